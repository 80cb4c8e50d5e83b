"""Scoring a cell from plain evidence: no root, no lab, no processes."""

from __future__ import annotations

import dataclasses

import pytest

from ptlab.common import stats
from ptlab.common.flowroles import FlowRoles
from ptlab.common.results import Row
from ptlab.experiment import scoring
from ptlab.experiment.spec import Expectation
from ptlab.output import cellfmt
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
                    latency_samples=[10.0, 30.0, 20.0, 25.0, 15.0, 12.0], benign=None)
    assert scoring.score_measurement(row, m, PLAN) is None
    assert row.status == "reachable" and row.repetitions == 2 and row.bootstrap_s == 0.4
    assert (row.repetitions_ok, row.reachability_ci95) == (2, stats.wilson(2, 2))
    assert row.goodput_samples == [8.0, 4.0]
    assert row.goodput_mbit_s == pytest.approx(32 ** 0.5)  # the geometric mean
    lo, hi = row.goodput_ci95
    assert 0 < lo < row.goodput_mbit_s < hi
    assert row.latency_ms == 17.5  # the median, not the mean
    assert row.latency_ci95 == (10.0, 30.0) and row.latency_ci_level == pytest.approx(0.9688)
    assert [o["ok"] for o in row.repetition_outcomes] == [True, True]
    assert row.repetition_outcomes[0]["goodput_mbit_s"] == 8.0


def test_k_of_n_decides_the_status_by_the_documented_rule():
    plan3 = dataclasses.replace(PLAN, repetitions=3)
    failed = bulk(ok=False, received=1234, error="reset after 1234 B")
    cases = [("+++", "reachable", 3), ("+-+", "reachable", 2), ("+--", "blocked", 1),
             ("---", "blocked", 0)]
    for outcome, status, k in cases:
        row = Row("obfs4", "gfw-fet", "ERROR")
        bulks = [bulk() if o == "+" else failed for o in outcome]
        scoring.score_measurement(row, Measurement(0.4, bulks, [], None), plan3)
        assert (row.status, row.repetitions_ok, row.repetitions) == (status, k, 3)
        assert row.reachability_ci95 == stats.wilson(k, 3)
        if k < 3:
            assert row.bytes_before_block == 1234
        if status == "blocked":
            assert row.error == "reset after 1234 B"
        elif k < 3:
            assert row.error is None and "1 of 3 repetitions failed" in row.notes[0]


def test_one_good_repetition_has_goodput_but_no_interval():
    row = Row("obfs4", "gfw-fet", "ERROR")
    m = Measurement(0.4, [bulk(), bulk(ok=False, error="reset")], [], None)
    scoring.score_measurement(row, m, PLAN)
    assert row.goodput_mbit_s == pytest.approx(8.0) and row.goodput_ci95 is None


def test_no_bootstrap_is_blocked_with_the_deadline_named():
    row = Row("tor", "ip-blocklist", "ERROR")
    scoring.score_measurement(row, Measurement(None, [], [], None), PLAN)
    assert row.status == "blocked" and "within 5 s" in row.error


def test_a_corrupted_transfer_is_an_error_never_blocked():
    row = Row("obfs4", "none", "ERROR")
    m = Measurement(0.1, [bulk(ok=False, integrity=True, error="INTEGRITY FAILURE")], [], None)
    assert scoring.score_measurement(row, m, PLAN) == "INTEGRITY FAILURE"
    assert row.status == "ERROR"


def test_a_benign_class_that_fails_with_no_censor_is_a_lab_failure_not_collateral():
    base = Row("direct", "none", "ERROR")
    baseline_flows = [benign("https", "a", True), benign("ssh", "b", False),
                      benign("ssh", "c", True)]
    failing = scoring.score_benign(base, baseline_flows, None)
    assert failing == {"ssh"}
    # The baseline shows the lab failure with its reason, and no collateral at all.
    assert base.benign_lab_failures == {"ssh": 1}
    assert "lab failure, not collateral: benign ssh failed with no censor (1 of 2 flows)" \
        in base.notes[0]
    assert (base.benign_total, base.benign_blocked, base.collateral) == (1, 0, 0.0)
    assert base.benign_detail == {"https": {"ok": 1, "blocked": 0}}
    assert base.benign_unjudged == []


def test_collateral_counts_only_classes_that_passed_the_baseline():
    row = Row("direct", "fet", "ERROR")
    flows = [benign("https", "a", True), benign("ssh", "b", False), benign("ssh", "c", False),
             benign("binary", "d", False)]
    scoring.score_benign(row, flows, {"ssh"})
    # ssh failed with no censor: not judged here, and said so; the rest is counted.
    assert row.benign_unjudged == ["ssh"]
    assert "collateral not judged for ssh" in row.notes[0]
    assert (row.benign_total, row.benign_blocked) == (2, 1)
    assert row.collateral == 0.5
    assert row.benign_detail == {"https": {"ok": 1, "blocked": 0},
                                 "binary": {"ok": 0, "blocked": 1}}
    assert cellfmt.collateral(row) == "binary 1/1 (ssh not judged)"


def test_a_clean_baseline_judges_every_class():
    row = Row("direct", "fet", "ERROR")
    scoring.score_benign(row, [benign("https", "a", False)], set())
    assert row.benign_unjudged == [] and row.collateral == 1.0 and not row.notes


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


ROLES = FlowRoles.build(
    client_addresses=["198.18.0.2"],
    benign={(6, "198.18.9.2", 7000): "binary", (6, "198.18.9.2", 22): "ssh"},
    benign_only=[(6, "198.18.9.2", 22)], prober=["198.18.7.0/24"],
    infrastructure=[(17, "198.18.8.2", 53)])


def flow(client="198.18.0.2", client_port=40000, server="198.18.9.2", server_port=7000,
         proto=6) -> dict:
    return {"client": client, "server": server, "proto": proto, "client_port": client_port,
            "server_port": server_port}


def detection(f: dict, ts: float = 101.0, data_packet: int = 1) -> dict:
    return {"event": "detection", "detector": "fet", "actions": ["residual"], "ts": ts,
            "flow": f, "data_packet": data_packet, "since_first_data_s": 0.0}


def test_detections_are_put_to_the_flow_they_hit():
    row = Row("direct", "gfw-fet", "reachable")
    events = [detection(flow(client_port=61234)),               # the benign binary flow
              detection(flow(client_port=45000, server_port=22)),  # ssh: benign by destination
              detection(flow(client="198.18.7.9", server="198.18.3.2"))]  # the prober's
    scoring.score_censor(row, events, t_client=100.0, roles=ROLES)
    assert row.detector is None and row.detections == {}
    assert row.collateral_detections == {"binary": 1, "ssh": 1}
    assert row.probe_detections == 1
    transport = Row("obfs4", "gfw-fet", "blocked")
    scoring.score_censor(transport, [detection(flow(server="198.18.3.2", server_port=443))],
                         t_client=100.0, roles=ROLES)
    assert (transport.detector, transport.detection_data_packet) == ("fet", 1)
    assert transport.time_to_detection_s == 1.0


def test_probes_after_a_benign_flow_are_not_the_transports():
    """The GFW's prober probes the benign mix's binary server too (its random first
    packet is not exempt): those probes and verdicts are counted apart."""
    benign, ours = flow(client_port=61234), flow(server="198.18.3.2", server_port=9850)
    events = [{"event": "probe_request", "flow": benign},
              {"event": "probe_verdict", "flow": benign, "shadowsocks": "answers-identical-replay"},
              {"event": "probe_request", "flow": ours},
              {"event": "probe_verdict", "flow": ours, "shadowsocks": "timeout-on-every-probe"}]
    row = Row("shadowsocks", "gfw-prober", "reachable")
    scoring.score_censor(row, events, t_client=100.0, roles=ROLES)
    assert (row.probes_sent, row.collateral_probes) == (1, 1)
    assert row.probe_verdicts == {"timeout-on-every-probe": 1}


def test_the_port_decides_for_a_destination_both_share():
    # The binary server's port from an ephemeral port is the transport's (direct to it).
    assert ROLES.role_of(flow(client_port=40000)) == "transport"
    assert ROLES.role_of(flow(client_port=61000)) == "benign:binary"
    assert ROLES.role_of({"client": "2001:db8::1", "server": "::1"}) == "other"
    # The lab's resolver, asked by a transport client: infrastructure.
    assert ROLES.role_of(flow(server="198.18.8.2", server_port=53, proto=17)) == "infra"
    # ... unless the benign mix asked it (its dns-udp class).
    dns_roles = FlowRoles.build(["198.18.0.2"], {(17, "198.18.8.2", 53): "dns-udp"},
                                infrastructure=[(17, "198.18.8.2", 53)])
    assert dns_roles.role_of(flow(server="198.18.8.2", server_port=53, proto=17,
                                  client_port=61500)) == "benign:dns-udp"


def test_describe_says_what_a_researcher_quotes():
    direct = Row("direct", "gfw-fet", "reachable", repetitions=3, repetitions_ok=3,
                 benign_detail={"binary": {"ok": 0, "blocked": 1},
                                "https": {"ok": 3, "blocked": 0}})
    assert cellfmt.summary(direct) == ("reachable 3/3, transport undetected, "
                                        "collateral binary 1/1")
    obfs4 = Row("obfs4", "gfw-fet", "blocked", repetitions=3, repetitions_ok=0,
                detector="fet", action="residual", detection_data_packet=1)
    assert cellfmt.summary(obfs4) == ("blocked 0/3, by fet at the first data packet "
                                       "(residual)")


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
