"""How far Snowflake scales in the one-machine namespace lab, and what binds.

A lab with N proxy nodes, each running our volunteer proxy (aiortc, one
process per proxy), our broker, NAT probe and bridge; then M Snowflake client
PTs in the client namespace (``ptlab.processes.ptparent`` + ``transports.pt`` each),
which all fetch at once through their own proxies. Printed, side by side:
resident memory per proxy and per client (process trees, from /proc), the
broker's, the bridge's, open file descriptors, the machine's load, and how
many of the M concurrent fetches completed byte-exact in the time allowed.

Each run is done once per ``--per-process`` value (proxies per process: 1 is
one ``ptlab snowflake-proxy`` per proxy, K > 1 runs :mod:`ptlab.processes.proxypool`
pools of K threads) and per ``--clients`` value, in a fresh lab each, and the
figures are printed side by side with the memory ratio. Several client counts
find where the machine breaks: the aggregate goodput of the byte-exact
fetches, and the counts that show a collapse as it starts (answers the broker
could no longer hand over because the client had given up, data channels
that never opened, Turbo Tunnel sessions that reached the bridge).

Run as root: ``.venv/bin/python benchmarks/snowflake_scale.py [--proxies 100
--clients 100 [200 ...] --size 200000 --timeout 120 --per-process 1 25]``.
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
from unittest import mock

from ptcommon.events import count_events

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def parents() -> dict[int, list[int]]:
    """Parent PID -> child PIDs, from one pass over /proc."""
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(p.name))
    return kids


def tree(pid: int, kids: dict[int, list[int]] | None = None) -> list[int]:
    """`pid` and all its descendants."""
    kids = parents() if kids is None else kids
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
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


def run_scale(proxies: int, clients_n: int, size: int, timeout: float, pool: int) -> dict:
    """One lab: `proxies` proxies (`pool` per process), `clients_n` clients fetching at once."""
    from netns.process import LabProcess
    from ptlab.experiment.runner import LabRunner
    from ptlab.experiment.spec import parse_spec
    from ptlab.plugins.base import Endpoint
    from ptlab.plugins.snowflake import SNOWFLAKE

    spec = parse_spec({"experiment": {"name": "scale", "seed": 1},
                       "transports": {"snowflake": {"proxies": proxies, "proxy_pool": pool}},
                       "censors": {"none": {}}})
    out = Path(tempfile.mkdtemp(prefix="ptlab-scale-"))
    fig: dict = {"proxies": proxies, "clients": clients_n, "per_process": pool}
    t0 = time.monotonic()
    # Lab rows cap their proxies (a spec's sanity limit); this benchmark is about
    # going past it, and only the cap is lifted, only for this lab.
    with mock.patch.object(SNOWFLAKE, "max_proxies", max(proxies, SNOWFLAKE.max_proxies)), \
            LabRunner(spec, out, capture=False, log=lambda *a: None) as runner:
        lab = runner.lab
        assert lab is not None
        print(f"[{pool}/process] lab with {proxies} proxy nodes up in "
              f"{time.monotonic() - t0:.0f} s")
        t1 = time.monotonic()
        with runner.traffic_session("snowflake", "scale", out / "scale.pcap", 96) as ep0:
            assert runner.session is not None
            procs = {p.name: p for p in runner.session.procs}
            fig["proxies_up_s"] = round(time.monotonic() - t1, 1)
            print(f"[{pool}/process] broker, bridge and {proxies} proxies up in "
                  f"{fig['proxies_up_s']:.0f} s")
            clients = []
            t2 = time.monotonic()
            # In batches: 100 Python PTs importing aiortc at once on 2 CPUs miss
            # ptparent's 20 s deadline (measured), so start 10 at a time.
            for i in range(clients_n - 1):
                info = out / f"client{i}.json"
                p = LabProcess(lab.ns("client"), [
                    sys.executable, "-m", "ptlab.processes.ptparent", "client", "--transport",
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
            print(f"[{pool}/process] {clients_n} client PTs up in {time.monotonic() - t2:.0f} s")
            t3 = time.monotonic()
            results = asyncio.run(fetch_all(lab.ns("client"), endpoints, size, timeout))
            elapsed = time.monotonic() - t3
            fig["fetch_s"] = round(elapsed, 1)
            ok = [r for r in results if r.ok]
            fig["fetched"] = len(ok)
            fig["errors"] = sorted({str(r.error) for r in results if not r.ok})[:3]
            kids = parents()
            proxy_procs = [p for n, p in procs.items()
                           if n.startswith("snowflake-prox") and p.pid]
            proxy_total = sum(rss_mib(tree(p.pid, kids)) for p in proxy_procs)
            fig["proxy_processes"] = len(proxy_procs)
            fig["proxy_rss_total_mib"] = round(proxy_total)
            fig["proxy_rss_per_proxy_mib"] = round(proxy_total / proxies, 1)
            client_rss = [rss_mib(tree(p.pid, kids)) for p, _ in clients if p.pid]
            fig["client_rss_median_mib"] = round(statistics.median(client_rss), 1) \
                if client_rss else None
            for name in ("snowflake-broker", "snowflake-bridge"):
                if name in procs and procs[name].pid:
                    fig[f"{name}_rss_mib"] = round(rss_mib(tree(procs[name].pid, kids)), 1)
            everything = [q for p in list(procs.values()) + [c for c, _ in clients] if p.pid
                          for q in tree(p.pid, kids)]
            fig["fds"] = fds(everything)
            fig["load1"] = round(os.getloadavg()[0], 1)
            # Three decimals: a small fetch that waited on a rendezvous is still > 0.
            fig["goodput_mbit"] = round(len(ok) * size * 8 / 1e6 / elapsed, 3)
            fig.update(collapse_counts(procs))
            print(f"[{pool}/process] fetches: {len(ok)} of {len(results)} byte-exact "
                  f"({size} B each) in {fig['fetch_s']:.1f} s; errors: {fig['errors']}")
            print(f"[{pool}/process] proxy RSS: {proxy_total:.0f} MiB in {len(proxy_procs)} "
                  f"processes, {fig['proxy_rss_per_proxy_mib']:.1f} MiB per proxy")
            for p, _ in clients:
                p.stop()
    return fig


def collapse_counts(procs: dict) -> dict[str, int]:
    """What the proxies and the bridge logged of a rendezvous under strain:
    an answer not taken means the client's offer had timed out at the broker
    before the (starved) proxy answered, so the client will ask again."""
    texts = {n: p.log_text() for n, p in procs.items() if n.startswith("snowflake-")}
    proxies = "".join(t for n, t in texts.items() if n.startswith("snowflake-prox"))
    return {"answers_not_taken": proxies.count("answer not taken"),
            "channel_timeouts": proxies.count("timed out waiting for the data channel"),
            "bridge_sessions": count_events(texts.get("snowflake-bridge", ""), "attach")}


KEYS = ["proxies", "clients", "per_process", "proxy_processes", "proxy_rss_total_mib",
        "proxy_rss_per_proxy_mib", "fetched", "fetch_s", "goodput_mbit", "proxies_up_s",
        "client_rss_median_mib", "snowflake-broker_rss_mib", "snowflake-bridge_rss_mib", "fds",
        "load1", "bridge_sessions", "answers_not_taken", "channel_timeouts"]


def positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proxies", type=positive, default=100)
    ap.add_argument("--clients", type=positive, nargs="+", default=[100],
                    help="concurrent clients; several values, one lab each, find the break")
    ap.add_argument("--size", type=positive, default=200_000)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--per-process", type=positive, nargs="+", default=[1, 25],
                    help="proxies per process, one lab each, side by side (default: 1 25)")
    args = ap.parse_args(argv)
    figs = [run_scale(args.proxies, n, args.size, args.timeout, k)
            for k in args.per_process for n in args.clients]
    print(f"\n{args.proxies} proxies; clients fetching {args.size} B each, all at once, "
          f"within {args.timeout:.0f} s; {os.cpu_count()} CPUs")
    for k in KEYS:
        print(f"{k:>26}" + "".join(f"{str(f.get(k)):>12}" for f in figs))
    for n in args.clients:
        same = [f for f in figs if f["clients"] == n]
        base = same[0]
        for f in same[1:]:
            ratio = f["proxy_rss_per_proxy_mib"] / base["proxy_rss_per_proxy_mib"]
            print(f"{n} clients: memory per proxy, {f['per_process']}/process vs "
                  f"{base['per_process']}/process: {ratio:.3f}x; fetched {f['fetched']} vs "
                  f"{base['fetched']}, in {f['fetch_s']} s vs {base['fetch_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
