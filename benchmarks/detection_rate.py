"""How often a censor catches a row, over fresh cells: a rate with its Wilson interval.

A cell's repetitions share one transport client, and a row such as
``tor+webtunnel`` carries all of them in one TCP connection, so a cell's
repetitions are not independent tries. This runs ``--cells`` cells of one row
under one censor in one lab, each with a fresh client (a fresh connection, a
fresh inner handshake), and counts the cells in which the censor acted on the
row's flows. The benign mix runs in every cell, so the same run counts the
censor's false positives on it (benign flows it acted on, of those it saw).

Run: ``.venv/bin/python benchmarks/detection_rate.py --row tor+webtunnel
--censor tls-in-tls-2024 --cells 20 --delay-ms 20``. A row declared in an
experiment file (a bring-your-own-tool row) comes with ``--spec``, and
``--inner-tls`` carries the workloads' requests over HTTPS inside the tunnel,
as a browser's are: ``--row sb-vless-vision --spec
experiments/protocols-2026.toml --inner-tls``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ptlab.common.stats import wilson  # noqa: E402
from ptlab.experiment.runner import LabRunner  # noqa: E402
from ptlab.experiment.spec import Spec, TopologyOptions, Workloads, parse_spec  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row", required=True, help="the lab row (a transport plugin)")
    p.add_argument("--censor", required=True, help="the censor profile")
    p.add_argument("--cells", type=int, default=20, help="fresh cells (independent tries)")
    p.add_argument("--delay-ms", type=float, default=20.0, help="one-way delay in the core")
    p.add_argument("--size", type=int, default=500_000, help="bytes of the bulk download")
    p.add_argument("--bootstrap-s", type=float, default=60.0)
    p.add_argument("--spec", type=Path, help="an experiment file that declares --row")
    p.add_argument("--inner-tls", action="store_true",
                   help="the workloads' requests go over HTTPS inside the tunnel")
    args = p.parse_args(argv)
    table: dict = {}
    if args.spec:
        data = tomllib.loads(args.spec.read_text())
        table = data.get("transports", {}).get(args.row)
        if table is None:
            p.error(f"{args.spec} declares no row {args.row!r}")
        # Registers an external row as the plugin of its name (and its [tools]).
        parse_spec({"transports": {args.row: table}, "censors": {"none": {}},
                    **({"tools": data["tools"]} if "tools" in data else {})})
    spec = Spec(path=None, name="detection-rate", repetitions=1,
                topology=TopologyOptions(delay_ms=args.delay_ms),
                transports={args.row: table},
                workloads=Workloads(bulk_size=args.size, latency_count=0, benign=True,
                                    bootstrap_timeout_s=args.bootstrap_s, idle_timeout_s=15.0,
                                    bulk_timeout_s=120.0, inner_tls=args.inner_tls))
    out = Path(tempfile.mkdtemp(prefix="ptl-bench-"))
    caught = benign_seen = benign_hit = 0
    statuses: dict[str, int] = {}
    t0 = time.monotonic()
    with LabRunner(spec, out, capture=False, log=lambda *a: None) as runner:
        print(f"{args.row} under {args.censor}: {args.cells} fresh cells, RTT "
              f"{runner.rtt_ms} ms ({args.delay_ms:g} ms each way in the core)")
        for i in range(args.cells):
            row = runner.run_cell(args.row, args.censor)
            statuses[row.status] = statuses.get(row.status, 0) + 1
            hit = bool(row.detections)
            caught += hit
            benign_seen += row.benign_total
            benign_hit += sum(row.collateral_detections.values())
            print(f"  cell {i + 1:>3}: {row.status:<10} detections {row.detections or '-'}"
                  f"  benign acted on {sum(row.collateral_detections.values())}"
                  f"/{row.benign_total}", flush=True)
    lo, hi = wilson(caught, args.cells)
    print(f"caught in {caught}/{args.cells} cells: {caught / args.cells:.2f} "
          f"(Wilson 95 % {lo:.2f} to {hi:.2f}); statuses {statuses}")
    if benign_seen:
        flo, fhi = wilson(benign_hit, benign_seen)
        print(f"benign flows acted on: {benign_hit}/{benign_seen} "
              f"(Wilson 95 % {flo:.3f} to {fhi:.3f})")
    print(f"took {time.monotonic() - t0:.0f} s; cells in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
