"""Fixtures every test directory shares."""

from __future__ import annotations

import time

import pytest

from ptlab.pytest_plugin import LabFixture
from tests.support.events import lost_events


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

