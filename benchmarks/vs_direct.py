"""Transports ÷ direct, side by side in one lab at a stated RTT: goodput, request
latency and connection setup.

``--rows`` names lab rows (default: the meek rows); ``direct`` (plain TCP to the
bridge) is always run first as the baseline. Every row runs under no censor in
one lab whose core router adds ``--delay-ms`` one way in each direction (netem,
or the userspace delay line where the kernel has no netem), so the printed RTT
is what every row ran at. Per row: ``--reps`` bulk downloads of ``--size``
bytes (mean goodput), ``--requests`` keep-alive GET /ping round trips over one
tunnel (median latency), and the setup time: from opening the SOCKS connection
to the first answer, which for Conjure includes registering and the
registration delay, and for meek the first poll.

Run: ``.venv/bin/python benchmarks/vs_direct.py --rows meek,meek-chrome,meek-lite``
or ``--rows conjure,conjure-prefix,conjure-obfs4 [--delay-ms 20]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ptlab.experiment.runner import LabRunner  # noqa: E402
from ptlab.experiment.spec import Spec, TopologyOptions, Workloads  # noqa: E402

DEFAULT_ROWS = "meek,meek-chrome,meek-lite"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=10_000_000, help="bytes per bulk download")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--delay-ms", type=float, default=10.0, help="one-way delay in the core")
    p.add_argument("--rows", default=DEFAULT_ROWS, help="comma-separated lab rows")
    args = p.parse_args(argv)
    rows = ["direct"] + [r for r in args.rows.split(",") if r and r != "direct"
                         and (r != "meek-lite" or shutil.which("obfs4proxy"))]
    spec = Spec(path=None, name="vs-direct", repetitions=args.reps,
                topology=TopologyOptions(delay_ms=args.delay_ms),
                transports={r: {} for r in rows},
                workloads=Workloads(bulk_size=args.size, latency_count=args.requests,
                                    benign=False, bootstrap_timeout_s=30.0,
                                    idle_timeout_s=15.0, bulk_timeout_s=300.0))
    out = Path(tempfile.mkdtemp(prefix="ptl-bench-"))
    results = {}
    with LabRunner(spec, out, capture=False, log=lambda *a: None) as runner:
        print(f"RTT client→web {runner.rtt_ms} ms ({args.delay_ms:g} ms each way in the "
              f"core); {args.size / 1e6:g} MB x {args.reps}, {args.requests} requests")
        for row in rows:
            results[row] = runner.run_cell(row, "none")
    base = results["direct"]
    print(f"{'row':<15} {'status':<10} {'Mbit/s':>8} {'÷direct':>8} {'latency ms':>11} "
          f"{'÷direct':>8} {'setup ms':>9} {'÷direct':>8}")

    def ratio(x: float | None, base_x: float | None) -> float:
        return x / base_x if x and base_x else float("nan")

    for name, r in results.items():
        setup = (r.bootstrap_s or 0.0) * 1000
        print(f"{name:<15} {r.status:<10} {r.goodput_mbit_s or 0:8.2f} "
              f"{ratio(r.goodput_mbit_s, base.goodput_mbit_s):8.3f} {r.latency_ms or 0:11.1f} "
              f"{ratio(r.latency_ms, base.latency_ms):8.2f} {setup:9.1f} "
              f"{ratio(r.bootstrap_s, base.bootstrap_s):8.1f}")
    shutil.rmtree(out, ignore_errors=True)
    return 0 if all(r.status == "reachable" for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
