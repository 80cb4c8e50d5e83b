"""Fixtures every test directory shares."""

from __future__ import annotations

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
    lab.runner.flush_events()  # services may log a connection's end after its cell
    lost = lost_events(lab.out_dir)
    assert not lost, "events logged by lab processes but missing from events.jsonl:\n" + \
        "\n".join(lost[:20])

