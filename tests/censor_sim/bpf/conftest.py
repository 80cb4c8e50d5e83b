"""Kernel fast path tests: each loads an eBPF program, which needs root."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="loading an eBPF program needs root (CAP_BPF)")
        for item in items:
            if "tests/censor_sim/bpf/" in str(item.fspath):
                item.add_marker(skip)
