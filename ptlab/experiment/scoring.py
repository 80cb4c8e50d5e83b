"""Turning what a cell saw into its result row: pure functions, no lab.

The runner (and so the namespace lab and the three-machine lab alike) collects
evidence: the client's :class:`~ptlab.workloads.cell.Measurement`, the censor's
event lines, the benign flows' outcomes, the transport's baseline row. This
module decides what they mean: reachable or blocked, goodput and latency with
their intervals, collateral damage, the detector and action that fired, whether
the spec's expectation holds. Keeping the judgement here, apart from the
processes, lets it be tested with plain data (tests/ptlab/experiment/test_scoring.py) and
keeps rows from the two labs comparable: they share every line of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ptcommon.events import event_record

from ..common import stats
from ..common.flowroles import INFRA, PROBE, TRANSPORT, FlowRoles
from ..common.results import Row
from ..workloads.cell import CellPlan, Measurement
from .spec import Expectation

#: The censor column every transport is measured under first.
BASELINE = "none"

#: A cell is "reachable" when at least this share of its repetitions got through
#: (docs/lab/results.md §2). With a censor that blocks by chance the k of n is the
#: finding; the status only summarises it.
REACHABLE_SHARE = 0.5


def status_of(k: int, n: int) -> str:
    """The summary of k of n repetitions through: reachable or blocked."""
    return "reachable" if n and k >= REACHABLE_SHARE * n else "blocked"


def score_measurement(row: Row, m: Measurement, plan: CellPlan) -> str | None:
    """Status (k of n), goodput, latency and bytes-before-block from what the client measured.

    Returns the integrity failure's text when a transfer arrived corrupted: the row
    is then ERROR (a corrupting transport is a bug, never "blocked") and nothing
    else is scored.
    """
    row.bootstrap_s = m.bootstrap_s
    row.repetitions = plan.repetitions
    for res in m.bulks:
        if res.integrity_error:
            row.status, row.error = "ERROR", res.error
            return res.error
    row.repetition_outcomes = [
        {"repetition": i + 1, "ok": b.ok, "goodput_mbit_s": b.goodput_mbit_s,
         "seconds": round(b.seconds, 4), "bytes": b.received, "error": b.error,
         "started": b.started}
        for i, b in enumerate(m.bulks)]
    ok = [b for b in m.bulks if b.ok]
    n = plan.repetitions
    k = len(ok)
    row.repetitions_ok = k
    row.reachability_ci95 = stats.wilson(k, n)
    row.status = status_of(k, n)
    failures = [b for b in m.bulks if not b.ok]
    if m.bootstrap_s is None:
        row.error = f"no request got through within {plan.bootstrap_s:.0f} s"
    elif failures:
        row.error = failures[0].error
        if row.status == "reachable":
            row.notes.append(f"{n - k} of {n} repetitions failed: {failures[0].error}")
    if failures:
        row.bytes_before_block = failures[0].received
    elif m.bootstrap_s is None:
        row.bytes_before_block = 0
    goodputs = [b.goodput_mbit_s for b in ok if b.goodput_mbit_s is not None]
    row.goodput_samples = goodputs
    if goodputs:
        centre, ci = stats.log_ci95(goodputs)
        row.goodput_mbit_s, row.goodput_ci95 = centre, ci if len(goodputs) > 1 else None
    row.latency_samples = list(m.latency_samples)
    if row.latency_samples:
        med = stats.median_ci(row.latency_samples)
        row.latency_ms = med.median
        if len(row.latency_samples) > 1:
            row.latency_ci95, row.latency_ci_level = (med.low, med.high), round(med.level, 4)
    if row.status == "reachable":
        row.error = None
    return None


def score_benign(row: Row, results: Iterable[Any],
                 baseline_failures: set[str] | None) -> set[str]:
    """Collateral damage: benign flows the censor broke, judged only where the lab
    showed, with no censor, that they work.

    ``results`` have ``kind``, ``target``, ``ok`` and ``error``. ``baseline_failures``
    is the set of benign classes that failed in the transport's baseline cell; None
    means this *is* the baseline. There a failure is the lab's, never collateral:
    it is counted in ``benign_lab_failures`` with its reason. In a censored cell, a
    class that failed in the baseline is not judged at all (``benign_unjudged``):
    its failures here could be the lab's as much as the censor's.
    Returns the classes that failed (the baseline's set, when it is one).
    """
    results = list(results)
    failing = {r.kind for r in results if not r.ok}
    if baseline_failures is None:
        unjudged = failing
        for kind in sorted(failing):
            flows = [r for r in results if r.kind == kind]
            bad = [r for r in flows if not r.ok]
            row.benign_lab_failures[kind] = len(bad)
            row.notes.append(f"lab failure, not collateral: benign {kind} failed with no "
                             f"censor ({len(bad)} of {len(flows)} flows): "
                             f"{bad[0].error or 'no reason given'}")
    else:
        unjudged = baseline_failures & {r.kind for r in results}
        if unjudged:
            row.notes.append("collateral not judged for " + ", ".join(sorted(unjudged))
                             + ": those benign classes failed with no censor too")
    row.benign_unjudged = sorted(unjudged) if baseline_failures is not None else []
    counted = [r for r in results if r.kind not in unjudged]
    row.benign_total = len(counted)
    row.benign_blocked = sum(not r.ok for r in counted)
    row.collateral = row.benign_blocked / row.benign_total if counted else None
    detail: dict[str, dict[str, int]] = {}
    for r in counted:
        d = detail.setdefault(r.kind, {"ok": 0, "blocked": 0})
        d["ok" if r.ok else "blocked"] += 1
    row.benign_detail = detail
    return failing


def score_censor(row: Row, events: Iterable[dict[str, Any]], t_client: float,
                 censor_alive: bool = True, roles: FlowRoles | None = None) -> None:
    """Detections, actions, probes and counters from the censor's event lines.

    Each detection is put to the flow it hit (``roles``; without them every flow
    counts as the transport's): the transport's give the row's detector, action,
    time to detection (from ``t_client``, when the transport's client started)
    and which of the flow's data packets it fired on; a benign flow's count as
    collateral detections of its class; the prober's are counted apart. A
    detection whose actions are empty (the per-connection chance said no) is
    not counted.
    """
    if not censor_alive:
        row.status, row.error = "ERROR", "the censor process died during the cell"
    saw_counters = False
    for e in events:
        kind = e.get("event")
        if kind == "detection":
            acts = e.get("actions") or ([e["action"]] if e.get("action") else [])
            if not acts:
                continue
            det = e.get("detector") or "?"
            role = roles.role_of(e.get("flow")) if roles and e.get("flow") else TRANSPORT
            if role.startswith("benign:"):
                cls = role.removeprefix("benign:")
                row.collateral_detections[cls] = row.collateral_detections.get(cls, 0) + 1
                continue
            if role == PROBE:
                row.probe_detections += 1
                continue
            if role == INFRA:
                row.infra_detections += 1
                continue
            row.detections[det] = row.detections.get(det, 0) + 1
            if row.detector is None:
                row.detector, row.action = det, "+".join(acts)
                row.time_to_detection_s = round(max(float(e["ts"]) - t_client, 0.0), 3)
                row.detection_data_packet = e.get("data_packet")
                row.detection_after_first_byte_s = e.get("since_first_data_s")
        elif kind in ("probe_request", "probe_verdict") and roles and e.get("flow") \
                and roles.role_of(e["flow"]) != TRANSPORT:
            # The prober was sent after another flow (the benign mix's random-looking
            # binary protocol, say): that is the censor's business with that server.
            row.collateral_probes += kind == "probe_request"
        elif kind == "probe_request":
            row.probes_sent += 1
        elif kind == "probe_verdict":
            # The Frolov suite's label, else the Alice, OpenVPN or HTTPS suite's class.
            label = str(e.get("label") or e.get("shadowsocks") or e.get("openvpn")
                        or e.get("https"))
            row.probe_verdicts[label] = row.probe_verdicts.get(label, 0) + 1
        elif kind == "counters":
            saw_counters = True
            row.censor_counters = {k: v["packets"] for k, v in e["counters"].items()}
            flows = row.censor_counters.get("new_flows", 0)
            if flows:
                row.censor_cpu_per_flow_ms = round(e["cpu_s"] * 1000 / flows, 4)
    if not saw_counters:
        row.notes.append("censor reported no counters (did it crash?)")


def as_baseline(row: Row) -> Row:
    """A transport's no-censor row: nothing blocks without a censor, so a "blocked"
    baseline is an ERROR of the transport or the lab."""
    if row.status == "blocked":
        row.status, row.error = "ERROR", f"fails with no censor: {row.error}"
    return row


def against_baseline(row: Row, baseline: Row) -> Row:
    """A censored cell is "blocked" only if its transport works with no censor."""
    if row.status == "blocked" and baseline.status != "reachable":
        row.notes.append(f"blocked-looking failure, but {row.transport} fails with no "
                         f"censor too")
        row.status = "ERROR"
        row.error = f"baseline (none censor) failed: {baseline.error}"
    return row


def apply_expectations(row: Row, expects: Iterable[Expectation]) -> Row:
    """The spec's ``[[expect]]`` for this cell, and whether the row meets it."""
    for e in expects:
        if (e.transport, e.censor) == (row.transport, row.censor):
            row.expectation = e.status
            # A skipped row ran nothing: its expectation is neither met nor failed.
            row.expectation_met = None if row.status == "skipped" else row.status == e.status
    return row


def workload_markers(cell: str, m: Measurement) -> list[dict[str, Any]]:
    """The client's side of a cell as events: each repetition and each benign flow
    at the time it started, with its outcome and its flow role."""
    out = [event_record("workload", "bulk", ts=b.started, cell=cell, role=TRANSPORT,
                        repetition=i + 1, ok=b.ok, seconds=round(b.seconds, 4),
                        bytes=b.received, error=b.error)
           for i, b in enumerate(m.bulks)]
    out += [event_record("workload", "benign", ts=r.started, cell=cell,
                         role=f"benign:{r.kind}", target=r.target, ok=r.ok,
                         seconds=r.seconds, error=r.error)
            for r in m.benign or []]
    return out
