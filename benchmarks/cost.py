"""The cost of circumvention: every row ptlab has, side by side in one lab, against direct.

Per row, under no censor: goodput (geometric mean of ``--reps`` bulk downloads of
``--size`` bytes, each byte-exact), time to first byte (the median of
``--requests`` small requests over an open tunnel), connection setup (from
opening a connection through the transport to the first answer; for Conjure
this includes registration, for tor-less rows the tool's own handshake), and
the CPU seconds per GB moved that the row's client and server processes used
while the workloads ran (the runner's ``cpu_s``, counted in clock ticks).
Goodput, time to first byte and setup are also given as ratios to ``direct``,
run first in the same lab. ``direct`` runs no process of its own, so its CPU
is the kernel's and is not shown.

Each row runs in two labs, one after the other: one with no added delay or
loss, and one whose core adds 25 ms each way (50 ms RTT) and drops 1 % of
packets. The rows: Tor's transports (ours, and Debian's obfs4proxy), the Debian
tools of experiments/proxies.toml in SOCKS and tunnel mode (not iodine, whose
DNS tunnel moves a few kB/s), and the sing-box rows of
experiments/protocols-2026.toml. A row that needs a build tag the tool lacks
is listed as skipped.

Writes ``cost.csv`` and ``cost.png`` into ``--out`` (default
``results/cost-<time>/``) and prints the table.

Run: ``.venv/bin/python benchmarks/cost.py`` (about 40 minutes), or
``--rows direct,obfs4,sb-ss2022 --size 2000000`` for a few.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ptlab.common.results import Row  # noqa: E402
from ptlab.experiment.runner import LabRunner  # noqa: E402
from ptlab.experiment.spec import parse_spec  # noqa: E402

TOR_ROWS = ["obfs4", "obfs4proxy", "scramblesuit", "meek", "snowflake", "webtunnel", "conjure"]
# Too slow to move a bulk through in a benchmark of this length.
LEFT_OUT = {"iodine"}
SPEC_FILES = ["proxies.toml", "protocols-2026.toml"]
CONDITIONS = (("clean", 0.0, 0.0), ("50ms-1%loss", 25.0, 1.0))
COLUMNS = ["condition", "rtt_ms", "row", "status", "goodput_mbit_s", "goodput_ratio",
           "ttfb_ms", "ttfb_ratio", "setup_ms", "setup_ratio", "client_cpu_s_per_gb",
           "server_cpu_s_per_gb", "bytes_moved", "error"]


def external_rows() -> dict[str, dict[str, Any]]:
    """The bring-your-own-tool rows of the experiment files, by name."""
    out: dict[str, dict[str, Any]] = {}
    for name in SPEC_FILES:
        for row, table in tomllib.loads((ROOT / "experiments" / name).read_text())[
                "transports"].items():
            if table.get("kind") == "external" and row not in LEFT_OUT:
                out[row] = table
    return out


def all_rows() -> list[str]:
    return ["direct", *TOR_ROWS, *external_rows()]


def spec_for(rows: list[str], delay_ms: float, loss_pct: float, size: int, reps: int,
             requests: int):
    ext = external_rows()
    data = {
        "experiment": {"name": "cost", "repetitions": reps, "budget_s": 86400},
        "topology": {"delay_ms": delay_ms, "loss_pct": loss_pct},
        "transports": {r: ext.get(r, {}) for r in rows},
        "censors": {"none": {}},
        "workloads": {"bulk": {"size": size, "timeout_s": 600, "idle_timeout_s": 60},
                      "latency": {"count": requests}, "benign": {"enabled": False},
                      "bootstrap_timeout_s": 60},
    }
    return parse_spec(data)


def per_gb(cpu: float | None, moved: int) -> float | None:
    return cpu / (moved / 1e9) if cpu is not None and moved else None


def ratio(x: float | None, base: float | None) -> float | None:
    return x / base if x and base else None


def record(condition: str, rtt: float | None, row: Row, base: Row) -> dict[str, Any]:
    moved = sum(int(o.get("bytes") or 0) for o in row.repetition_outcomes if o.get("ok"))
    setup = row.bootstrap_s * 1000 if row.bootstrap_s is not None else None
    base_setup = base.bootstrap_s * 1000 if base.bootstrap_s is not None else None
    own_cpu = row.transport != "direct"
    return {
        "condition": condition, "rtt_ms": rtt, "row": row.transport, "status": row.status,
        "goodput_mbit_s": row.goodput_mbit_s,
        "goodput_ratio": ratio(row.goodput_mbit_s, base.goodput_mbit_s),
        "ttfb_ms": row.latency_ms, "ttfb_ratio": ratio(row.latency_ms, base.latency_ms),
        "setup_ms": setup, "setup_ratio": ratio(setup, base_setup),
        "client_cpu_s_per_gb": per_gb(row.cpu_s.get("client"), moved) if own_cpu else None,
        "server_cpu_s_per_gb": per_gb(row.cpu_s.get("server"), moved) if own_cpu else None,
        "bytes_moved": moved, "error": row.error or "",
    }


def fmt(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def print_table(records: list[dict[str, Any]]) -> None:
    by_row: dict[str, dict[str, dict[str, Any]]] = {}
    for r in records:
        by_row.setdefault(r["row"], {})[r["condition"]] = r
    names = [c for c, _, _ in CONDITIONS]
    head = f"{'row':<26} {'status':<10}"
    for c in names:
        head += (f" | {c + ' Mbit/s':>18} {'÷dir':>5} {'ttfb ms':>8} {'÷dir':>5}"
                 f" {'setup ms':>9} {'÷dir':>5} {'cli s/GB':>8} {'srv s/GB':>8}")
    print(head)
    for row, conds in by_row.items():
        status = "/".join(conds[c]["status"] for c in names if c in conds)
        line = f"{row:<26} {status:<10}"
        for c in names:
            r = conds.get(c, {})
            line += (f" | {fmt(r.get('goodput_mbit_s'), 1):>18} {fmt(r.get('goodput_ratio')):>5}"
                     f" {fmt(r.get('ttfb_ms'), 1):>8} {fmt(r.get('ttfb_ratio')):>5}"
                     f" {fmt(r.get('setup_ms'), 0):>9} {fmt(r.get('setup_ratio'), 1):>5}"
                     f" {fmt(r.get('client_cpu_s_per_gb'), 1):>8}"
                     f" {fmt(r.get('server_cpu_s_per_gb'), 1):>8}")
        print(line)
    for r in records:
        if r["status"] in ("ERROR", "skipped"):
            print(f"  {r['status']} {r['row']} ({r['condition']}): {r['error']}")


def plot(records: list[dict[str, Any]], path: Path) -> None:
    from matplotlib.figure import Figure

    names = [c for c, _, _ in CONDITIONS]
    rows = list(dict.fromkeys(r["row"] for r in records if r["row"] != "direct"))
    fig = Figure(figsize=(7.5, 0.28 * len(rows) + 1.6), layout="constrained")
    ax = fig.add_subplot()
    height = 0.8 / len(names)
    for i, c in enumerate(names):
        vals = {r["row"]: r["goodput_ratio"] or 0.0 for r in records if r["condition"] == c}
        ax.barh([y + i * height for y in range(len(rows))], [vals.get(r, 0.0) for r in rows],
                height=height, label=c)
    ax.set_yticks([y + height * (len(names) - 1) / 2 for y in range(len(rows))], rows,
                  fontsize=7)
    ax.invert_yaxis()
    ax.axvline(1.0, color="#000", lw=0.8, ls="--")
    ax.set_xlabel("goodput ÷ direct in the same lab", fontsize=8)
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", help="comma-separated rows (default: all; direct always first)")
    p.add_argument("--size", type=int, default=5_000_000, help="bytes per bulk download")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--requests", type=int, default=10)
    p.add_argument("--conditions", default=",".join(c for c, _, _ in CONDITIONS),
                   help="which of: " + ", ".join(c for c, _, _ in CONDITIONS))
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    known = all_rows()
    rows = known if not args.rows else ["direct", *[r for r in args.rows.split(",")
                                                    if r and r != "direct"]]
    if unknown := [r for r in rows if r not in known]:
        p.error(f"unknown rows: {', '.join(unknown)} (known: {', '.join(known)})")
    wanted = args.conditions.split(",")
    out = args.out or ROOT / "results" / time.strftime("cost-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    for condition, delay, loss in CONDITIONS:
        if condition not in wanted:
            continue
        spec = spec_for(rows, delay, loss, args.size, args.reps, args.requests)
        work = Path(tempfile.mkdtemp(prefix="ptl-bench-"))
        t0 = time.monotonic()
        with LabRunner(spec, work, capture=False, log=lambda *a: None) as runner:
            print(f"{condition}: RTT {runner.rtt_ms} ms, loss {loss:g} %, "
                  f"{args.size / 1e6:g} MB x {args.reps}, {len(rows)} rows", flush=True)
            base = runner.run_cell("direct", "none")
            for name in rows:
                row = base if name == "direct" else runner.run_cell(name, "none")
                records.append(record(condition, runner.rtt_ms, row, base))
        print(f"{condition}: {time.monotonic() - t0:.0f} s", flush=True)
    with open(out / "cost.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(records)
    plot(records, out / "cost.png")
    print_table(records)
    print(f"wrote {out / 'cost.csv'} and {out / 'cost.png'}")
    return 0 if all(r["status"] in ("reachable", "skipped") for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
