"""What the lab's datapath costs: kernel forwarding vs. the userspace delay line.

Measures TCP goodput from the web node to the client, side by side in one lab:
plain kernel forwarding, the delay line holding packets 0 ms (its pure
per-packet cost, i.e. its throughput cap) and 5 ms (RTT +10 ms), and prints
the ratios. Run as root: ``.venv/bin/python benchmarks/delayline.py``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from netns import shaping
from netns.lab import Lab
from netns.measure import tcp_download_mbps
from netns.topology import default_topology

SIZE = 100_000_000
RUNS = 3


def measure(lab: Lab) -> float:
    return statistics.median(
        tcp_download_mbps(lab.ns("web"), lab.addr("web"), lab.ns("client"), SIZE)
        for _ in range(RUNS))


def main() -> int:
    results: dict[str, float] = {}
    with Lab(default_topology(0)) as lab, tempfile.TemporaryDirectory() as tmp:
        results["kernel forwarding"] = measure(lab)
        for delay in (0.0, 5.0):
            line = shaping.start_delay_line(lab.ns("inet"), delay, Path(tmp) / f"{delay}.log")
            try:
                results[f"delay line {delay:g} ms"] = measure(lab)
            finally:
                line.stop()
    base = results["kernel forwarding"]
    print(f"TCP goodput web -> client, {SIZE / 1e6:.0f} MB, median of {RUNS}")
    for name, mbps in results.items():
        print(f"  {name:22s} {mbps:9.1f} Mbit/s   ratio to kernel {mbps / base:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
