"""Turning what a cell saw into its result row: pure functions, no lab.

The runner (and so the namespace lab and the three-machine lab alike) collects
evidence: the client's :class:`~ptlab.workloads.cell.Measurement`, the censor's
event lines, the benign flows' outcomes, the transport's baseline row. This
module decides what they mean: reachable or blocked, goodput and latency with
their intervals, collateral damage, the detector and action that fired, whether
the spec's expectation holds. Keeping the judgement here, apart from the
processes, lets it be tested with plain data (tests/ptlab/test_scoring.py) and
keeps rows from the two labs comparable: they share every line of it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from .results import Row
from .spec import Expectation
from .stats import mean_ci95
from .workloads.cell import CellPlan, Measurement

#: The censor column every transport is measured under first.
BASELINE = "none"

#: A benign flow: (kind, target), e.g. ("https", "www.benign.lab").
BenignFlow = tuple[str, str]


def score_measurement(row: Row, m: Measurement, plan: CellPlan) -> str | None:
    """Status, goodput, latency and bytes-before-block from what the client measured.

    Returns the integrity failure's text when a transfer arrived corrupted: the row
    is then ERROR (a corrupting transport is a bug, never "blocked") and nothing
    else is scored.
    """
    row.bootstrap_s = m.bootstrap_s
    row.repetitions = plan.repetitions
    failure: str | None = None
    if m.bootstrap_s is None:
        failure = f"no request got through within {plan.bootstrap_s:.0f} s"
    for res in m.bulks:
        if res.integrity_error:
            row.status, row.error = "ERROR", res.error
            return res.error
        if not res.ok:
            failure = res.error
    if failure is None:
        goodputs = [b.goodput_mbps for b in m.bulks if b.goodput_mbps is not None]
        row.status = "reachable"
        row.goodput_samples = goodputs
        row.goodput_mbps, row.goodput_ci95 = mean_ci95(goodputs)
        row.latency_samples = list(m.latency_samples)
        if row.latency_samples:
            row.latency_ms = statistics.median(row.latency_samples)
            row.latency_ci95 = mean_ci95(row.latency_samples)[1]
    else:
        row.status, row.error = "blocked", failure
        row.bytes_before_block = sum(b.received for b in m.bulks)
    return None


def score_benign(row: Row, results: Iterable[Any],
                 baseline_failures: set[BenignFlow] | None) -> set[BenignFlow]:
    """Collateral damage: benign flows that fail under this censor but not without one.

    ``results`` have ``kind``, ``target`` and ``ok``. ``baseline_failures`` is what
    failed in the transport's baseline cell; None means this *is* the baseline.
    Returns the flows that failed here (the baseline's set, when it is one).
    """
    results = list(results)
    failing = {(r.kind, r.target) for r in results if not r.ok}
    if baseline_failures is None:
        if failing:
            row.notes.append(f"benign flows fail with no censor: {sorted(failing)}")
        excused: set[BenignFlow] = set()
    else:
        excused = failing & baseline_failures
        if excused:
            row.notes.append(f"not counted as collateral (fail with no censor too): "
                             f"{sorted(excused)}")
    counted = [r for r in results if (r.kind, r.target) not in excused]
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
                 censor_alive: bool = True) -> None:
    """Detections, actions, probes and counters from the censor's event lines.

    ``t_client`` is when the transport's client started (epoch seconds): the
    time to detection counts from there. A detection whose actions are empty
    (the per-connection chance said no) is not counted.
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
            row.detections[det] = row.detections.get(det, 0) + 1
            if row.detector is None:
                row.detector, row.action = det, "+".join(acts)
                row.time_to_detection_s = round(max(float(e["ts"]) - t_client, 0.0), 3)
        elif kind == "probe_request":
            row.probes_sent += 1
        elif kind == "probe_verdict":
            label = str(e.get("label"))
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
            row.expectation_met = row.status == e.status
    return row

