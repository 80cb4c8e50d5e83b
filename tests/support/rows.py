"""Result rows for the tests of what reads them (results files, report, terminal).

One reachable, one blocked and one failed cell cover every branch of a
renderer; each test overrides the fields it is about.
"""

from __future__ import annotations

from typing import Any

from ptlab.common.results import Results, Row


def reachable_row(**fields: Any) -> Row:
    """obfs4 with no censor: goodput and latency with intervals and samples."""
    base: dict[str, Any] = dict(
        transport="obfs4", censor="none", status="reachable", repetitions=3,
        goodput_mbps=42.0, goodput_ci95=(40.0, 44.0), goodput_samples=[41.0, 42.0, 43.0],
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
