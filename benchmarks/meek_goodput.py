"""meek goodput and request latency ÷ direct, side by side in one lab, at a stated RTT.

Rows: ``direct`` (plain TCP to the bridge, the baseline), ``meek`` (our client,
Python's ssl), ``meek-chrome`` (our client, curl_cffi's Chrome) and
``meek-lite`` (Debian obfs4proxy's client), all under no censor, in one lab.
The lab's core router adds ``--delay-ms`` one way in each direction (netem, or
the userspace delay line where the kernel has no netem), so the RTT printed
is what every row ran at. Each row: ``--reps`` bulk downloads of ``--size``
bytes (mean goodput) and ``--requests`` keep-alive GET /ping round trips over
one tunnel (median latency).

Why latency matters for meek: every request waits for a serial HTTP round
trip, and an idle tunnel polls on a schedule that grows to 5 s, so the first
bytes after a quiet spell wait for the next poll.

Run: ``.venv/bin/python benchmarks/meek_goodput.py [--delay-ms 20]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ptlab.runner import LabRunner  # noqa: E402
from ptlab.spec import Spec, TopologyOptions, Workloads  # noqa: E402

ROWS = ["direct", "meek", "meek-chrome", "meek-lite"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=10_000_000, help="bytes per bulk download")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--delay-ms", type=float, default=10.0, help="one-way delay in the core")
    args = p.parse_args(argv)
    rows = [r for r in ROWS if r != "meek-lite" or shutil.which("obfs4proxy")]
    spec = Spec(path=None, name="meek-bench", repetitions=args.reps,
                topology=TopologyOptions(delay_ms=args.delay_ms),
                transports={r: {} for r in rows},
                workloads=Workloads(bulk_size=args.size, latency_count=args.requests,
                                    benign=False, bootstrap_timeout_s=30.0,
                                    idle_timeout_s=15.0, bulk_timeout_s=300.0))
    out = Path(tempfile.mkdtemp(prefix="ptl-meek-bench-"))
    results = {}
    with LabRunner(spec, out, capture=False, log=lambda *a: None) as runner:
        print(f"RTT client→web {runner.rtt_ms} ms ({args.delay_ms:g} ms each way in the "
              f"core); {args.size / 1e6:g} MB x {args.reps}, {args.requests} requests")
        for row in rows:
            results[row] = runner.run_cell(row, "none")
    base = results["direct"]
    print(f"{'row':<12} {'status':<10} {'Mbit/s':>8} {'÷direct':>8} {'latency ms':>11} "
          f"{'÷direct':>8}")
    for name, r in results.items():
        good = r.goodput_mbps or 0.0
        lat = r.latency_ms or 0.0
        g_ratio = good / base.goodput_mbps if base.goodput_mbps else float("nan")
        l_ratio = lat / base.latency_ms if base.latency_ms else float("nan")
        print(f"{name:<12} {r.status:<10} {good:8.2f} {g_ratio:8.3f} {lat:11.1f} {l_ratio:8.2f}")
    shutil.rmtree(out, ignore_errors=True)
    return 0 if all(r.status == "reachable" for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
