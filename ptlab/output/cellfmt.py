"""A cell's numbers as text, the same in the terminal table, the report and compare.

Every figure carries its n: a goodput from 2 repetitions and one from 20 are
not the same finding, and the reader must see which is which.
"""

from __future__ import annotations

from ..common.results import Row


def status(row: Row) -> str:
    """"reachable 3/3", "blocked 1/3", "ERROR", "skipped"."""
    if row.status in ("ERROR", "skipped") or row.repetitions_ok is None:
        return row.status
    return f"{row.status} {row.repetitions_ok}/{row.repetitions}"


def reachability_interval(row: Row) -> str:
    """The Wilson interval of k/n, e.g. "[21%, 94%]" ("" without one)."""
    if row.reachability_ci95 is None:
        return ""
    lo, hi = row.reachability_ci95
    return f"[{lo:.0%}, {hi:.0%}]"


def _digits(x: float) -> int:
    """Decimals that keep about three significant figures (2826, 67.3, 4.21)."""
    return 0 if x >= 100 else 1 if x >= 10 else 2


def goodput(row: Row, digits: int | None = None) -> str:
    """Geometric mean [log-scale 95 % CI] n=k, in Mbit/s."""
    if row.goodput_mbit_s is None:
        return "—"
    if digits is None:
        digits = _digits(row.goodput_mbit_s)
    n = len(row.goodput_samples)
    if row.goodput_ci95 is None:
        return f"{row.goodput_mbit_s:.{digits}f} n={n}"
    lo, hi = row.goodput_ci95
    return f"{row.goodput_mbit_s:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}] n={n}"


def latency(row: Row) -> str:
    """Median [order-statistic CI] n, in ms; the CI's level when it is not 95 %."""
    if row.latency_ms is None:
        return "—"
    n = len(row.latency_samples)
    if row.latency_ci95 is None:
        return f"{row.latency_ms:.1f} n={n}"
    lo, hi = row.latency_ci95
    level = row.latency_ci_level
    # Few samples cannot give a 95 % order-statistic interval: say what it covers.
    note = f" ({level:.0%} CI)" if level is not None and level < 0.95 else ""
    return f"{row.latency_ms:.1f} [{lo:.1f}, {hi:.1f}]{note} n={n}"


def broken_classes(row: Row) -> list[str]:
    """Each benign class with a blocked flow, as "class blocked/run"."""
    return [f"{k} {d['blocked']}/{d['ok'] + d['blocked']}"
            for k, d in sorted(row.benign_detail.items()) if d.get("blocked")]


def lab_failures(row: Row) -> list[str]:
    """Each benign class that failed with no censor, as "class N failed"."""
    return [f"{k} {n} failed" for k, n in sorted(row.benign_lab_failures.items())]


def collateral(row: Row) -> str:
    """Benign classes broken, k/n each, e.g. "binary 1/1, https 1/3"; "0/9" if none;
    classes the baseline could not vouch for are named as not judged."""
    unjudged = f" ({', '.join(row.benign_unjudged)} not judged)" if row.benign_unjudged else ""
    if row.collateral is None:
        return "—" + unjudged
    return (", ".join(broken_classes(row)) or f"0/{row.benign_total}") + unjudged


def detection(row: Row) -> str:
    """The transport's detection: "fet @1 → residual" (the data packet it fired on)."""
    if row.detector is None:
        return "—"
    where = f" @{row.detection_data_packet}" if row.detection_data_packet else ""
    return f"{row.detector}{where} → {row.action}" if row.action else row.detector


def summary(row: Row) -> str:
    """The cell in one line a researcher can quote: status with k of n, what the
    censor did to the transport, and which benign classes it broke.

    e.g. "reachable 3/3, transport undetected, collateral binary 1/1" or
    "blocked 0/3, by fet at the first data packet (residual)".
    """
    if row.status in ("ERROR", "skipped"):
        return f"{row.status}: {row.error}"
    parts = [status(row)]
    if row.detector is None:
        parts.append("transport undetected")
    else:
        where = ""
        if row.detection_data_packet == 1:
            where = " at the first data packet"
        elif row.detection_data_packet:
            where = f" at data packet {row.detection_data_packet}"
        elif row.detection_data_packet == 0:
            where = " before any data"
        verb = "by" if row.status == "blocked" else "detected by"
        parts.append(f"{verb} {row.detector}{where} ({row.action})")
    if broken := broken_classes(row):
        parts.append("collateral " + ", ".join(broken))
    if failed := lab_failures(row):
        parts.append("lab failure with no censor: " + ", ".join(failed))
    if row.benign_unjudged:
        parts.append(f"collateral not judged for {', '.join(row.benign_unjudged)}")
    return ", ".join(parts)
