"""Scoring a cell from plain evidence: no root, no lab, no processes."""

from __future__ import annotations

import pytest

from ptlab import scoring
from ptlab.results import Row
from ptlab.spec import Expectation
from ptlab.workloads.benign import BenignResult
from ptlab.workloads.bulk import BulkResult
from ptlab.workloads.cell import CellPlan, Measurement

PLAN = CellPlan(bootstrap_s=5.0, repetitions=2, bulk_size=1_000_000, seed=1,
                bulk_timeout_s=10.0, idle_timeout_s=2.0, latency_count=3, benign=True,
                benign_timeout_s=5.0)


def bulk(ok: bool = True, seconds: float = 1.0, received: int = 1_000_000,
         error: str | None = None, integrity: bool = False) -> BulkResult:
    return BulkResult(ok=ok, size=1_000_000, received=received, seconds=seconds,
                      sha256=None, expected="x", integrity_error=integrity, error=error)


def benign(kind: str, target: str, ok: bool) -> BenignResult:
    return BenignResult(kind=kind, target=target, ok=ok, error=None if ok else "reset",
                        seconds=0.1)


def test_every_bulk_through_is_reachable_with_goodput_and_latency():
    row = Row("obfs4", "none", "ERROR")
    m = Measurement(bootstrap_s=0.4, bulks=[bulk(seconds=1.0), bulk(seconds=2.0)],
                    latency_samples=[10.0, 30.0, 20.0], benign=None)
    assert scoring.score_measurement(row, m, PLAN) is None
    assert row.status == "reachable" and row.repetitions == 2 and row.bootstrap_s == 0.4
    assert row.goodput_samples == [8.0, 4.0]
    assert row.goodput_mbps == pytest.approx(6.0)
    assert row.latency_ms == 20.0  # the median, not the mean


def test_one_failed_bulk_is_blocked_and_counts_the_bytes_before():
    row = Row("obfs4", "gfw-fet", "ERROR")
    m = Measurement(bootstrap_s=0.4, bulks=[bulk(), bulk(ok=False, received=1234,
                                                         error="reset after 1234 B")],
                    latency_samples=[], benign=None)
    scoring.score_measurement(row, m, PLAN)
    assert (row.status, row.error) == ("blocked", "reset after 1234 B")
    assert row.bytes_before_block == 1_000_000 + 1234


def test_no_bootstrap_is_blocked_with_the_deadline_named():
    row = Row("tor", "ip-blocklist", "ERROR")
    scoring.score_measurement(row, Measurement(None, [], [], None), PLAN)
    assert row.status == "blocked" and "within 5 s" in row.error


def test_a_corrupted_transfer_is_an_error_never_blocked():
    row = Row("obfs4", "none", "ERROR")
    m = Measurement(0.1, [bulk(ok=False, integrity=True, error="INTEGRITY FAILURE")], [], None)
    assert scoring.score_measurement(row, m, PLAN) == "INTEGRITY FAILURE"
    assert row.status == "ERROR"


def test_collateral_discounts_what_fails_with_no_censor_too():
    base = Row("direct", "none", "ERROR")
    baseline_flows = [benign("https", "a", True), benign("ssh", "b", False)]
    failing = scoring.score_benign(base, baseline_flows, None)
    assert failing == {("ssh", "b")} and "fail with no censor" in base.notes[0]
    row = Row("direct", "fet", "ERROR")
    flows = [benign("https", "a", True), benign("ssh", "b", False), benign("binary", "c", False)]
    scoring.score_benign(row, flows, failing)
    # ssh fails without a censor too: not the censor's collateral.
    assert (row.benign_total, row.benign_blocked) == (2, 1)
    assert row.collateral == 0.5
    assert row.benign_detail == {"https": {"ok": 1, "blocked": 0},
                                 "binary": {"ok": 0, "blocked": 1}}


def test_censor_events_give_detector_action_probes_and_counters():
    row = Row("obfs4", "gfw", "reachable")
    events = [
        {"event": "detection", "detector": "fet", "actions": [], "ts": 100.5},  # chance said no
        {"event": "detection", "detector": "fet", "actions": ["rst", "residual"], "ts": 101.25},
        {"event": "detection", "detector": "entropy", "action": "drop", "ts": 102.0},
        {"event": "probe_request"}, {"event": "probe_request"},
        {"event": "probe_verdict", "label": "obfs4"},
        {"event": "counters", "cpu_s": 0.5, "counters": {"new_flows": {"packets": 10},
                                                         "dropped": {"packets": 3}}},
    ]
    scoring.score_censor(row, events, t_client=100.0)
    assert row.detections == {"fet": 1, "entropy": 1}
    assert (row.detector, row.action, row.time_to_detection_s) == ("fet", "rst+residual", 1.25)
    assert row.probes_sent == 2 and row.probe_verdicts == {"obfs4": 1}
    assert row.censor_counters == {"new_flows": 10, "dropped": 3}
    assert row.censor_cpu_per_flow_ms == 50.0
    assert row.notes == []


def test_a_censor_that_died_or_reported_nothing_is_said():
    row = Row("obfs4", "gfw", "reachable")
    scoring.score_censor(row, [], t_client=0.0, censor_alive=False)
    assert row.status == "ERROR" and "censor process died" in row.error
    assert "no counters" in row.notes[0]


def test_baselines_and_expectations():
    blocked_base = scoring.as_baseline(Row("meek", "none", "blocked", error="timeout"))
    assert blocked_base.status == "ERROR" and "fails with no censor" in blocked_base.error
    row = scoring.against_baseline(Row("meek", "sni", "blocked"), blocked_base)
    assert row.status == "ERROR" and "baseline" in row.error
    ok = scoring.against_baseline(Row("meek", "sni", "blocked"), Row("meek", "none", "reachable"))
    assert ok.status == "blocked"
    expect = [Expectation("meek", "sni", "blocked"), Expectation("meek", "none", "reachable")]
    assert scoring.apply_expectations(ok, expect).expectation_met is True
    miss = scoring.apply_expectations(Row("meek", "none", "blocked"), expect)
    assert (miss.expectation, miss.expectation_met) == ("reachable", False)
