"""Fixtures every test directory shares, and the tiers every test is put in.

Two tiers (docs/lab/testing.md):

- **fast**: no root, no lab, no network beyond loopback. Every test is in it
  unless it says otherwise, so a new unit test lands here by default;
- **lab**: real namespaces, real peers, root. A test is in it when it is marked
  ``lab``, ``interop``, ``slow`` or ``network``, or lives under ``tests/lab/`` or
  ``tests/interop/``.

``python -m pytest -m fast`` runs the first alone; CI runs it as an unprivileged
user with no network, so a fast test that needs either fails there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from ptlab.pytest_plugin import LabFixture
from tests.support.events import lost_events

# Hypothesis judges correctness here, never speed (benchmarks/ do that): no
# wall-clock deadline and no too-slow check, which a loaded machine or tests
# running side by side would turn into failures of correct code.
settings.register_profile("ptlab", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ptlab")

#: Markers that put a test in the lab tier.
LAB_TIER_MARKERS = ("lab", "interop", "slow", "network")
#: Folders whose every test is in the lab tier.
LAB_TIER_DIRS = ("lab", "interop")
TESTS = Path(__file__).resolve().parent


def in_lab_tier(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(m) for m in LAB_TIER_MARKERS):
        return True
    parts = Path(str(item.path)).resolve().relative_to(TESTS).parts
    return parts[0] in LAB_TIER_DIRS


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per CPU, at most 8. Lab tests spend most of their
    time waiting on processes and the network, and each worker's lab is its own."""
    return min(8, 2 * (os.cpu_count() or 1))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not in_lab_tier(item):
            item.add_marker(pytest.mark.fast)


@pytest.fixture(autouse=True)
def _lab_events_reach_events_jsonl(request: pytest.FixtureRequest):
    """After every test that used the shared lab: each event any lab process
    logged is in the lab's events.jsonl (docs/architecture.md §3.1)."""
    yield
    lab = (getattr(request.node, "funcargs", None) or {}).get("lab")  # None: interrupted
    if not isinstance(lab, LabFixture):  # not the plugin's shared lab (or none)
        return
    # Services may log a connection's end after its cell, even after this read: what
    # they stamped up to a second before it must be in; later lines, next time.
    read_at = time.time()
    lab.runner.flush_events()
    lost = lost_events(lab.out_dir, before=read_at - 1.0)
    assert not lost, "events logged by lab processes but missing from events.jsonl:\n" + \
        "\n".join(lost[:20])

