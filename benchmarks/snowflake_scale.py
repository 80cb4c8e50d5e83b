"""How far Snowflake scales in the one-machine namespace lab, and what binds.

A lab with N proxy nodes, each running our volunteer proxy (aiortc, one
process per proxy), our broker, NAT probe and bridge; then M Snowflake client
PTs in the client namespace (``ptlab.ptparent`` + ``transports.pt`` each),
which all fetch at once through their own proxies. Printed, side by side:
resident memory per proxy and per client (process trees, from /proc), the
broker's, the bridge's, open file descriptors, the machine's load, and how
many of the M concurrent fetches completed byte-exact in the time allowed.

Run as root: ``.venv/bin/python benchmarks/snowflake_scale.py [--proxies 100
--clients 100 --size 200000 --timeout 120]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(p.name))
    return out


def tree(pid: int) -> list[int]:
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += children(p)
    return seen


def rss_mib(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def fds(pids: list[int]) -> int:
    n = 0
    for p in pids:
        try:
            n += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            pass
    return n


async def fetch_all(ns: str, endpoints: list, size: int, timeout: float) -> list:
    from ptlab.workloads.bulk import bulk_download

    return await asyncio.gather(*(bulk_download(ns, ep, size, i, timeout=timeout,
                                                idle_timeout=timeout)
                                  for i, ep in enumerate(endpoints)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proxies", type=int, default=100)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--size", type=int, default=200_000)
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()

    from netns.process import LabProcess
    from ptlab.plugins.base import Endpoint
    from ptlab.plugins.snowflake import SNOWFLAKE
    from ptlab.runner import LabRunner
    from ptlab.spec import parse_spec

    # Lab rows cap their proxies at 8 (a spec's sanity limit); this benchmark is
    # about going past it.
    SNOWFLAKE.check_options = lambda options: None  # type: ignore[method-assign]
    spec = parse_spec({"experiment": {"name": "scale", "seed": 1},
                       "transports": {"snowflake": {"proxies": args.proxies}},
                       "censors": {"none": {}}})
    out = Path(tempfile.mkdtemp(prefix="ptlab-scale-"))
    t0 = time.monotonic()
    with LabRunner(spec, out, capture=False, log=lambda *a: None) as runner:
        lab = runner.lab
        assert lab is not None
        print(f"lab with {args.proxies} proxy nodes up in {time.monotonic() - t0:.0f} s")
        t1 = time.monotonic()
        with runner.traffic_session("snowflake", "scale", out / "scale.pcap", 96) as ep0:
            assert runner.session is not None
            procs = {p.name: p for p in runner.session.procs}
            print(f"broker, bridge and {args.proxies} proxies up in {time.monotonic() - t1:.0f} s")
            clients = []
            t2 = time.monotonic()
            # In batches: 100 Python PTs importing aiortc at once on 2 CPUs miss
            # ptparent's 20 s deadline (measured), so start 10 at a time.
            for i in range(args.clients - 1):
                info = out / f"client{i}.json"
                p = LabProcess(lab.ns("client"), [
                    sys.executable, "-m", "ptlab.ptparent", "client", "--transport",
                    "snowflake", "--state", str(out / f"client{i}-state"), "--info", str(info),
                    "--timeout", "120", "--", sys.executable, "-m", "transports.pt"],
                    f"client{i}", out / f"client{i}.log").start()
                clients.append((p, info))
                if len(clients) % 10 == 0:
                    for q, qi in clients[-10:]:
                        q.wait_for(lambda _t, qi=qi: qi.exists(), 180, "the PT's CMETHOD")
            endpoints = [ep0]
            for p, info in clients:
                p.wait_for(lambda _t, info=info: info.exists(), 180, "the PT's CMETHOD")
                addr = json.loads(info.read_text())["methods"][0]["addr"]
                host, _, port = addr.rpartition(":")
                endpoints.append(Endpoint(host, int(port), ep0.target_host, ep0.target_port,
                                          ep0.args))
            print(f"{args.clients} client PTs up in {time.monotonic() - t2:.0f} s")
            t3 = time.monotonic()
            results = asyncio.run(fetch_all(lab.ns("client"), endpoints, args.size,
                                            args.timeout))
            took = time.monotonic() - t3
            ok = [r for r in results if r.ok]
            proxy_rss = [rss_mib(tree(p.pid)) for n, p in procs.items()
                         if n.startswith("snowflake-proxy") and p.pid]
            client_rss = [rss_mib(tree(p.pid)) for p, _ in clients if p.pid]
            everything = [q for p in list(procs.values()) + [c for c, _ in clients] if p.pid
                          for q in tree(p.pid)]
            print(f"fetches: {len(ok)} of {len(results)} byte-exact ({args.size} B each) in "
                  f"{took:.1f} s; errors: {sorted({r.error for r in results if not r.ok})[:3]}")
            if proxy_rss:
                print(f"proxy RSS: median {statistics.median(proxy_rss):.1f} MiB, "
                      f"max {max(proxy_rss):.1f} MiB, total {sum(proxy_rss):.0f} MiB "
                      f"({len(proxy_rss)} processes)")
            if client_rss:
                print(f"client PT RSS (ptparent + PT): median "
                      f"{statistics.median(client_rss):.1f} MiB, total {sum(client_rss):.0f} MiB")
            for name in ("snowflake-broker", "snowflake-bridge"):
                if name in procs and procs[name].pid:
                    print(f"{name} RSS: {rss_mib(tree(procs[name].pid)):.1f} MiB")
            print(f"open fds across the run's processes: {fds(everything)}; load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
            for p, _ in clients:
                p.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
