"""Result rows for the tests of what reads them (results files, report, terminal).

One reachable, one blocked and one failed cell cover every branch of a
renderer; each test overrides the fields it is about.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ptlab.common.results import Results, Row


def reachable_row(**fields: Any) -> Row:
    """obfs4 with no censor: goodput and latency with intervals and samples."""
    base: dict[str, Any] = dict(
        transport="obfs4", censor="none", status="reachable", repetitions=3,
        goodput_mbit_s=42.0, goodput_ci95=(40.0, 44.0), goodput_samples=[41.0, 42.0, 43.0],
        latency_ms=21.5, latency_ci95=(20.0, 23.0), latency_samples=[20.0, 21.5, 23.0],
        collateral=0.0, rtt_ms=20.0, expectation="reachable", expectation_met=True)
    return Row(**(base | fields))


def blocked_row(**fields: Any) -> Row:
    """obfs4 caught by the FET detector, against an expectation of reachable."""
    base: dict[str, Any] = dict(
        transport="obfs4", censor="gfw", status="blocked", detector="fet",
        rtt_ms=20.0, expectation="reachable", expectation_met=False)
    return Row(**(base | fields))


def error_row(**fields: Any) -> Row:
    """A cell that could not be run at all."""
    base: dict[str, Any] = dict(transport="meek", censor="none", status="ERROR",
                                error="bridge not ready")
    return Row(**(base | fields))


def skipped_row(**fields: Any) -> Row:
    """A row the tools found here cannot run (a build tag is missing)."""
    base: dict[str, Any] = dict(transport="sb-vless-reality", censor="none", status="skipped",
                                error="needs sing-box built with with_utls",
                                expectation="reachable")
    return Row(**(base | fields))


def results_of(rows: list[Row], **fields: Any) -> Results:
    """A run holding ``rows``, with plausible times and spec path."""
    base: dict[str, Any] = dict(started="2024-01-01T00:00:00+00:00",
                                finished="2024-01-01T00:05:00+00:00",
                                spec_path="experiments/default.toml")
    return Results(**(base | fields), rows=rows)


# --- whole runs, scored as the runner scores them -----------------------------------------

#: What a measured cell is given as: one goodput (Mbit/s) per repetition, None for
#: a repetition that did not get through; the latency samples (ms).
Goodputs = Sequence[float | None]


def measured_row(transport: str, censor: str, goodputs: Goodputs,
                 latencies: list[float] | None = None) -> Row:
    """A cell scored by ptlab.experiment.scoring from a synthetic measurement, so
    its status, k/n, intervals and samples are exactly what a run would record."""
    from ptlab.experiment.scoring import score_measurement
    from ptlab.workloads.bulk import BulkResult
    from ptlab.workloads.cell import CellPlan, Measurement

    size = 2_000_000
    bulks = [BulkResult(ok=g is not None, size=size, received=size if g else size // 3,
                        seconds=size * 8 / 1e6 / g if g else 4.0, sha256=None, expected="",
                        error=None if g else "idle for 4 s")
             for g in goodputs]
    plan = CellPlan(bootstrap_s=8.0, repetitions=len(goodputs), bulk_size=size, seed=1,
                    bulk_timeout_s=30.0, idle_timeout_s=4.0,
                    latency_count=len(latencies or []), benign=False, benign_timeout_s=3.0)
    got_through = any(g is not None for g in goodputs)
    row = Row(transport=transport, censor=censor, status="blocked", rtt_ms=0.1)
    score_measurement(row, Measurement(bootstrap_s=0.4 if got_through else None, bulks=bulks,
                                       latency_samples=list(latencies or []), benign=None),
                      plan)
    return row


def _spread(centre: float, n: int, rel: float = 0.08) -> list[float]:
    """n values around ``centre``, a deterministic spread of about ±rel."""
    return [centre * (1 + rel * ((i * 7) % 5 - 2) / 2) for i in range(n)]


def default_shape_run() -> list[Row]:
    """The default spec's shape: 4 transports x 3 censors (none first), the IP
    blocklist blocking every repetition, a cell blocked 1 of 3, an ERROR row; the
    goodputs within one decade, as an unshaped run on one machine gives them."""
    lat = [0.8, 0.9, 0.7, 4.8, 0.9, 0.8, 1.0, 0.9, 4.3, 0.8]
    rows = []
    for t, mbps in (("direct", 895.0), ("obfs4", 537.0), ("obfs4proxy", 584.0)):
        rows.append(measured_row(t, "none", _spread(mbps, 3, rel=0.3), lat))
        rows.append(measured_row(t, "ip-blocklist", [None, None, None]))
    rows.append(measured_row("direct", "gfw-fet", _spread(1111.0, 3, rel=0.2), lat))
    rows.append(measured_row("obfs4", "gfw-fet", [None, None, None]))
    rows.append(measured_row("obfs4proxy", "gfw-fet", [590.0, None, None]))
    for c in ("none", "ip-blocklist", "gfw-fet"):
        rows.append(error_row(transport="meek", censor=c,
                              error="bridge not ready" if c == "none" else
                              "baseline failed: bridge not ready"))
    return rows


#: 8 transports, long names among them; 5 censors.
WIDE_TRANSPORTS = ("direct", "obfs4", "obfs4proxy", "meek", "snowflake", "webtunnel",
                   "sb-vless-reality", "shadowsocks-libev-aead")
WIDE_CENSORS = ("none", "ip-blocklist", "gfw-fet-2021-residual", "throttle-tls", "sni-filter")


def forty_cell_run() -> list[Row]:
    """8 transports x 5 censors: reachable, blocked (some k of n), ERROR and skipped
    cells; 1 and 3 repetitions; goodputs from 0.003 to 9000 Mbit/s (six decades)."""
    base = {"direct": 9000.0, "obfs4": 450.0, "obfs4proxy": 600.0, "meek": 2.5,
            "snowflake": 0.9, "webtunnel": 120.0, "sb-vless-reality": 800.0,
            "shadowsocks-libev-aead": 1500.0}
    factor = {"none": 1.0, "ip-blocklist": 1.0, "gfw-fet-2021-residual": 0.6,
              "throttle-tls": 0.004, "sni-filter": 0.9}
    rows = []
    for i, t in enumerate(WIDE_TRANSPORTS):
        reps = 1 if i % 3 == 2 else 3
        for j, c in enumerate(WIDE_CENSORS):
            if t == "sb-vless-reality":
                rows.append(skipped_row(transport=t, censor=c))
                continue
            if t == "meek" and c == "sni-filter":
                rows.append(error_row(transport=t, censor=c, error="the censor process died"))
                continue
            g = base[t] * factor[c]
            if c == "ip-blocklist" and t != "snowflake":
                goodputs: Goodputs = [None] * reps
            elif c == "gfw-fet-2021-residual" and t in ("obfs4", "obfs4proxy", "meek"):
                goodputs = [g, *[None] * (reps - 1)] if reps > 1 else [None]
            else:
                goodputs = _spread(g, reps, rel=0.3 if (i + j) % 2 else 0.05)
            lat = _spread(0.2 * 10 ** ((i + j) % 4), 10 if reps == 3 else 1, rel=0.4)
            rows.append(measured_row(t, c, goodputs,
                                     lat if any(x is not None for x in goodputs) else []))
    return rows


def matrix_run(transports: int = 23, censors: int = 42) -> list[Row]:
    """A full.toml-sized matrix (23 x 42 = 966 cells): every censor blocks some rows,
    slows others, and lets the rest through; a row is skipped and a few cells are
    ERROR, as in a real run of that size."""
    rows = []
    for i in range(transports):
        t = f"transport-{i:02}" if i else "direct"
        base = 10.0 ** (1 + i % 4)
        for j in range(censors):
            c = "none" if j == 0 else f"censor-{j:02}-2026"
            if i == transports - 1:
                rows.append(skipped_row(transport=t, censor=c))
            elif (i * 7 + j) % 97 == 3:
                rows.append(error_row(transport=t, censor=c, error="bridge not ready"))
            elif j and (i + j) % 3 == 0:
                rows.append(measured_row(t, c, [None, None, None]))
            else:
                g = base * (0.5 if j and (i + j) % 5 == 0 else 1.0)
                rows.append(measured_row(t, c, _spread(g, 3, rel=0.2), _spread(5.0, 10)))
    return rows
