"""One 40-cell matrix three ways: serially, two labs at once (--jobs 2), and on Dask
with two local workers (a scheduler and two worker processes, as a cluster's
machines would run them). Prints each mode's wall time, its ratio to serial, and
whether every cell's status agrees with the serial run's; then, from the serial
run's own per-cell CPU and wall figures, the speedup to expect on a machine with
more cores or on more machines.

The cells of a matrix are independent; what limits the speedup on one machine is
its CPUs, which the labs share (a cell's censor, servers and clients), and each
lab's bring-up. On more machines each worker brings up its own lab once.

Run: ``.venv/bin/python benchmarks/scale_matrix.py`` as root (about 10 minutes
on 2 vCPUs); ``--out DIR`` keeps the three runs' results.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netns import procstat  # noqa: E402
from tests.support.daskcluster import LocalDaskCluster  # noqa: E402

#: 8 rows x 5 columns: quick transports and censors that block in different ways.
SPEC = """
[experiment]
name = "scale40"
repetitions = 1
budget_s = 3600
[transports.direct]
[transports.obfs4]
[transports.obfs4proxy]
[transports.scramblesuit]
[transports.scramblesuit-obfs4proxy]
[transports.obfs4-split]
[transports.meek]
[transports.webtunnel]
[censors.none]
[censors.ip-blocklist]
detectors.ip_blocklist.addresses = ["role:bridge", "role:web", "role:cdn"]
[censors.gfw-fet]
profile = "gfw-fet-2021"
policy.rules = [{ detector = "fet", action = "residual", probability = 1.0 }]
actions.residual.seconds = [20]
[censors.sni-blocklist]
[censors.tspu-quic-2022]
[workloads]
bootstrap_timeout_s = 10
[workloads.bulk]
size = 500_000
[workloads.latency]
count = 2
[workloads.benign]
enabled = false
"""


def ptlab(*args: str) -> tuple[float, float, int]:
    """Run ``ptlab ARGS``: its wall seconds, the CPU seconds of it and its children,
    and its exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ptlab", *args], cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        print(proc.stderr[-3000:], file=sys.stderr)
    return wall, cpu, proc.returncode


def cluster_cpu(cluster: LocalDaskCluster) -> float:
    """CPU seconds so far of the Dask scheduler's and workers' processes and of their
    reaped children (the labs' processes): /proc/PID/stat's utime, stime, cutime and
    cstime."""
    return sum(procstat.cpu_seconds(proc.pid, reaped=True) or 0.0
               for proc in cluster.procs.values())


def statuses(out: Path) -> dict[str, str]:
    rows = json.loads((out / "results.json").read_text())["rows"]
    return {f"{r['transport']} × {r['censor']}": r["status"] for r in rows}


def cell_seconds(out: Path) -> list[float]:
    rows = json.loads((out / "results.json").read_text())["rows"]
    return [r["cell_seconds"] for r in rows if r.get("cell_seconds") is not None]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="keep the runs' results here (default: a temporary dir)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("scale_matrix: run as root (labs need namespaces)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ptlscale") as tmp_name:
        tmp = Path(args.out) if args.out else Path(tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        spec = tmp / "scale40.toml"
        spec.write_text(SPEC)
        modes: dict[str, tuple[float, float, int]] = {}
        modes["serial"] = ptlab("run", str(spec), "--results", str(tmp / "serial"))
        modes["--jobs 2"] = ptlab("run", str(spec), "--jobs", "2",
                                  "--results", str(tmp / "jobs2"))
        cluster = LocalDaskCluster(tmp)
        try:
            before = cluster_cpu(cluster)
            wall, cpu, code = ptlab("run", str(spec), "--executor", "dask",
                                    "--scheduler", cluster.address,
                                    "--results", str(tmp / "dask"))
            # The cells ran in the cluster's processes, not ptlab's: their CPU too.
            modes["dask, 2 workers"] = (wall, cpu + cluster_cpu(cluster) - before, code)
        finally:
            cluster.stop()
        serial = statuses(tmp / "serial")
        dirs = {"serial": "serial", "--jobs 2": "jobs2", "dask, 2 workers": "dask"}
        print(f"{'mode':<18}{'cells':>6}{'wall s':>9}{'÷ serial':>10}{'CPU s':>8}  statuses")
        for mode, (wall, cpu, _) in modes.items():
            got = statuses(tmp / dirs[mode])
            agree = "agree" if got == serial else (
                f"DIFFER: {sorted(c for c in serial if got.get(c) != serial[c])}")
            print(f"{mode:<18}{len(got):>6}{wall:>9.1f}{modes['serial'][0] / wall:>10.2f}"
                  f"{cpu:>8.1f}  {agree}")
        # What more cores or machines would give, from the serial run's own figures:
        # cells are independent, so N labs finish in about max(total / N, longest cell)
        # plus one bring-up each, as long as the CPUs keep up (CPU per wall second).
        wall, cpu, _ = modes["serial"]
        cells = cell_seconds(tmp / "serial")
        busy = cpu / wall
        up = wall - sum(cells)
        print(f"\nserial: {len(cells)} cells, {sum(cells):.0f} s in cells (median "
              f"{statistics.median(cells):.1f} s, longest {max(cells):.1f} s), {up:.0f} s "
              f"for the lab; {busy:.2f} CPUs busy on average")
        for n in (2, 4, 8, 16):
            ideal = up + max(sum(cells) / n, max(cells))
            cores = n * max(busy, 1.0)
            print(f"  {n:>2} labs, each with {max(busy, 1.0):.1f} CPUs ({cores:.0f} in all): "
                  f"about {ideal:.0f} s, {wall / ideal:.1f}x serial")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
