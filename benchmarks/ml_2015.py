"""The learning censor end to end: a lab dataset, its evaluation, and the censor's cost.

Collects ``experiments/ml-dataset.toml`` in the lab (about 2,900 flows:
obfs4, obfs4-split, meek and the benign mix under LAN, lossy-WAN and
small-MTU tunnel settings), evaluates it as ``ptlab evaluate`` does, and
prints every detector's TPR/FPR with 95 % intervals, the portability drops,
the base rate at the chosen prevalence, and what one per-flow decision costs
the censor in CPU (the exported models, timed over the dataset's own flows,
side by side with the per-packet parser the censor runs anyway).

Run as root: ``.venv/bin/python benchmarks/ml_2015.py [--scale 1.0] [--dataset DIR]``
(``--dataset`` reuses a collected dataset instead of collecting one).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REPO = Path(__file__).resolve().parent.parent


def decision_cost(ds_path: Path) -> list[str]:
    """Microseconds per decision for each shipped model, over the dataset's pcaps."""
    from censor_sim import packet
    from censor_sim.detectors.ml.model import load
    from censor_sim.pcapflows import flows_from_pcap, read_packets
    from ptlab.ml.dataset import load_dataset

    ds = load_dataset(ds_path)
    pcap = ds.path / ds.meta[0]["pcap"]
    clients = sorted({m["client"] for m in ds.meta})
    logs = [f.log for f in flows_from_pcap(pcap, [f"{c}/128" if ":" in c else f"{c}/32"
                                                  for c in clients])]
    raws = [raw for _, raw, _ in read_packets(pcap)][:20000]
    t0 = time.perf_counter()
    for raw in raws:
        packet.parse(raw)
    parse_us = (time.perf_counter() - t0) / len(raws) * 1e6
    lines = [f"censor per-packet parse: {parse_us:.1f} µs ({len(raws)} packets)"]
    for name in ("wang2015-entropy-length", "wang2015-meek-tree"):
        m = load(name)
        t0 = time.perf_counter()
        decided = sum(m.decide(log) is not None for log in logs)
        us = (time.perf_counter() - t0) / max(len(logs), 1) * 1e6
        lines.append(f"{name}: {us:.1f} µs per flow decision ({decided} of {len(logs)} flows "
                     f"decided; {us / parse_us:.1f}× one packet parse)")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(REPO / "experiments" / "ml-dataset.toml"))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--dataset", help="an existing dataset directory (skip collection)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prevalence", type=float, default=1e-6)
    args = ap.parse_args()

    from ptlab.ml.dataset import collect, load_dataset, load_dataset_spec, scaled
    from ptlab.ml.evaluate import EvalOptions, evaluate
    from ptlab.ml.report import render, summary_lines

    if args.dataset:
        out = Path(args.dataset)
    else:
        out = Path(tempfile.mkdtemp(prefix="ptlab-ml-"))
        spec = load_dataset_spec(Path(args.spec))
        if args.scale != 1.0:
            spec = scaled(spec, args.scale)
        t0 = time.monotonic()
        man = collect(spec, out, log=lambda *a: None)
        print(f"dataset: {man['flows']} flows in {time.monotonic() - t0:.0f} s → {out} "
              f"(failed flows: {sum(man['failed_flows'].values())})")
    ds = load_dataset(out)
    result = evaluate(ds, EvalOptions(seed=args.seed, prevalence=args.prevalence))
    for line in summary_lines(result):
        print(line)
    for line in decision_cost(out):
        print(line)
    print(f"report: {render(result, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
