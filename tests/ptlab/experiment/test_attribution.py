"""Detections are put to the flow they hit (issue 21's case, in a real lab).

Under the FET censor at p = 1 with the benign mix running, direct's own stream
(an HTTP GET: printable, so exempt) is never detected while the benign binary
flow (random bytes) is; obfs4 is caught on its first data packet.
"""

from __future__ import annotations

import json

import pytest

from ptlab.common import stats
from ptlab.experiment import scoring
from ptlab.output import cellfmt

FET_P1 = {"policy": {"rules": [{"detector": "fet", "action": "residual",
                                "probability": 1.0}]},
          "actions": {"residual": {"seconds": [20]}}}


@pytest.mark.lab
def test_direct_is_reachable_undetected_and_the_binary_flow_is_collateral(lab):
    row = lab.run_cell("direct", "gfw-fet-2021", FET_P1, benign=True)
    binary = row.benign_detail["binary"]
    assert binary["blocked"] == binary["ok"] + binary["blocked"] >= 1
    assert row.detector is None and row.detections == {}
    assert row.collateral_detections.get("binary", 0) >= 1
    n = binary["blocked"]
    assert cellfmt.summary(row) == (f"reachable {row.repetitions}/{row.repetitions}, "
                                     f"transport undetected, collateral binary {n}/{n}")
    # events.jsonl says the same: the detections carry the benign flow's role.
    events = [json.loads(x) for x in (lab.out_dir / "events.jsonl").read_text().splitlines()]
    cell = [e for e in events if e.get("cell") == "direct__gfw-fet-2021"]
    roles = {e["role"] for e in cell if e.get("event") == "detection"}
    assert roles == {"benign:binary"}
    assert [e["event"] for e in cell if e.get("component") == "runner"] == [
        "cell_start", "cell_end"]
    assert [float(e["ts"]) for e in cell] == sorted(float(e["ts"]) for e in cell)


@pytest.mark.lab
def test_obfs4_is_blocked_by_fet_at_its_first_data_packet(lab):
    row = lab.run_cell("obfs4", "gfw-fet-2021", FET_P1, bootstrap_timeout_s=4.0)
    assert (row.status, row.repetitions_ok) == ("blocked", 0)
    assert cellfmt.summary(row) == (f"blocked 0/{row.repetitions}, by fet at the first "
                                     "data packet (residual)")
    assert row.detection_after_first_byte_s is not None
    assert row.detection_after_first_byte_s < 0.5


@pytest.mark.lab
def test_a_seeded_half_chance_censor_gives_k_of_n(lab):
    """FET resetting each non-exempt connection with p = 0.5 (the lab's seed fixes
    the draws): every repetition is a new obfs4 connection, so the cell is k of n,
    neither all nor none, and its status follows the documented rule."""
    half = {"policy": {"rules": [{"detector": "fet", "action": "rst", "probability": 0.5}]}}
    saved = lab.spec.repetitions
    lab.spec.repetitions = 8
    try:
        row = lab.run_cell("obfs4", "gfw-fet-2021", half, bootstrap_timeout_s=15.0,
                           bulk_size=200_000)
    finally:
        lab.spec.repetitions = saved
    assert row.repetitions == 8 and len(row.repetition_outcomes) == 8
    k = row.repetitions_ok
    assert 0 < k < 8, row.repetition_outcomes
    assert row.status == scoring.status_of(k, 8)
    assert row.reachability_ci95 == stats.wilson(k, 8)
    assert cellfmt.summary(row).startswith(f"{row.status} {k}/8")
