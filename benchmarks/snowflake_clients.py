"""Many clients through one Snowflake proxy: ours against Debian's, side by side.

Tor's proxy serves every client the broker sends it, with no capacity limit
by default, and so does ours. One lab; our broker, bridge and data server;
the one proxy slot filled in turn by our proxy (``ptlab snowflake-proxy``) and
Debian's ``snowflake-proxy``. For each client count (default 1, 5, 20 and
50), that many of Debian's ``snowflake-client`` run at once; each is matched
with the proxy, opens its stream (a one-byte exchange, not timed), and then
all move ``--kb`` KiB up and the same down together, SHA-256 checked.

Printed per proxy and count: the aggregate goodput (all bytes over the time
from the first transfer's start to the last one's end), each client's share
(the slowest, median and fastest client's goodput), and the proxy's peak
resident memory, CPU time over the transfer and peak open descriptors, read
from /proc, its worker processes included (``--workers 1 2`` runs ours with
each number of session workers: ``ptlab snowflake-proxy -workers N``). The
shipped unit (``contrib/ptlab-snowflake-proxy.service``) caps the proxy at
``MemoryMax``; its value is printed beside the peak. Beside them: the proxy's
CPU split into user and system time, and the proxy node's UDP datagrams and
TCP segments in and out over the transfer (the kernel's counters in its
namespace), so the packets each proxy spends per byte can be compared.
``--no-debian`` runs ours alone, for profiling.

Run as root: ``.venv/bin/python benchmarks/snowflake_clients.py [--clients 1 5 20 50
--kb 2048 --workers 1 --no-debian]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from netns import procstat  # noqa: E402

UNIT = Path(__file__).resolve().parent.parent / "contrib" / "ptlab-snowflake-proxy.service"


def unit_memory_max() -> int:
    """The shipped unit's MemoryMax, in bytes."""
    m = re.search(r"^MemoryMax=(\d+)([KMG]?)\s*$", UNIT.read_text(), re.M)
    if not m:
        raise ValueError(f"{UNIT}: no MemoryMax")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def rss_bytes(pid: int) -> int:
    m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(m.group(1)) * 1024 if m else 0


_SNMP_NAMES = {("Udp:", "InDatagrams"): "udp_in", ("Udp:", "OutDatagrams"): "udp_out",
               ("Udp:", "RcvbufErrors"): "udp_drops", ("Tcp:", "InSegs"): "tcp_in",
               ("Tcp:", "OutSegs"): "tcp_out", ("Udp6InDatagrams",): "udp_in",
               ("Udp6OutDatagrams",): "udp_out", ("Udp6RcvbufErrors",): "udp_drops"}


def snmp_counters(*tables: str) -> dict[str, int]:
    """UDP and TCP counters from the text of /proc/net/snmp (a header row and a
    value row per protocol) and /proc/net/snmp6 (a name and a value per row),
    IPv4 and IPv6 summed: datagrams and segments in and out, and UDP datagrams
    dropped for want of receive buffer."""
    out = {"udp_in": 0, "udp_out": 0, "udp_drops": 0, "tcp_in": 0, "tcp_out": 0}
    for text in tables:
        rows = [line.split() for line in text.splitlines()]
        for head, vals in zip(rows, rows[1:], strict=False):
            if head and vals and head[0] == vals[0] and head[0] in ("Udp:", "Tcp:") \
                    and head != vals:
                for col, value in zip(head[1:], vals[1:], strict=False):
                    if (key := _SNMP_NAMES.get((head[0], col))) is not None:
                        out[key] += int(value)
        for r in rows:
            if len(r) == 2 and (key := _SNMP_NAMES.get((r[0],))) is not None:
                out[key] += int(r[1])
    return out


def snmp(lab, node: str) -> dict[str, int]:
    """:func:`snmp_counters` of ``node``'s namespace, now."""
    import subprocess

    return snmp_counters(*(subprocess.run(
        ["ip", "netns", "exec", lab.ns(node), "cat", table], capture_output=True, text=True,
        check=True).stdout for table in ("/proc/net/snmp", "/proc/net/snmp6")))


def cpu_split(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid``."""
    fields = procstat.fields(pid)
    if fields is None:
        raise ProcessLookupError(pid)
    return (int(fields[procstat.UTIME]) / procstat.TICK,
            int(fields[procstat.STIME]) / procstat.TICK)


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def tree(pid: int) -> list[int]:
    """``pid`` and its children (the proxy's session workers)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return [pid, *(int(k) for k in kids)]


def tree_sum(measure, pid: int) -> float:
    total = 0
    for p in tree(pid):
        with contextlib.suppress(OSError):
            total += measure(p)
    return total


def tree_cpu(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid`` and its children, one read of each."""
    user = system = 0.0
    for p in tree(pid):
        with contextlib.suppress(OSError):
            u, s = cpu_split(p)
            user, system = user + u, system + s
    return user, system


@dataclass
class Watch:
    """Peak memory and descriptors of one process, sampled every 0.1 s."""

    pid: int
    peak_rss: int = 0
    peak_fds: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        self.peak_rss = max(self.peak_rss, int(tree_sum(rss_bytes, self.pid)))
        self.peak_fds = max(self.peak_fds, int(tree_sum(descriptors, self.pid)))

    def run(self) -> None:
        while not self.stop.wait(0.1):
            self.sample()


@dataclass
class Cell:
    clients: int
    aggregate_mb_s: float
    shares: list[float]
    peak_rss: int
    cpu_s: float
    cpu_sys_s: float
    peak_fds: int
    exact: int
    setup_s: float
    drops: dict[str, int]
    # The proxy node's kernel counters over the transfer (snmp()).
    proxy_packets: dict[str, int]
    not_opened: list[str]


@dataclass
class Start:
    """Counts the clients whose stream is open; ``go`` starts them all."""

    opened: int = 0
    failed: list[str] = field(default_factory=list)  # clients whose stream never opened
    go: asyncio.Event = field(default_factory=asyncio.Event)


async def one_client(lab, port: int, n: int, seed: int, start: Start
                     ) -> tuple[float, float, bool] | None:
    """Open the stream, wait for the start, move n up and n down: (start, end, exact);
    None if the stream never opened (counted, not timed)."""
    from tests.support.snowflakelab import socks_open, upload_and_download

    try:
        reader, writer = await socks_open(lab, port, None)
        writer.write(b"U 1\nx")
        await writer.drain()
        if not await asyncio.wait_for(reader.readline(), 180):
            raise ConnectionError("closed before the first answer")
    except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError) as exc:
        start.failed.append(f"{type(exc).__name__}: {exc}")
        return None
    try:
        start.opened += 1
        await start.go.wait()
        t0 = time.monotonic()
        try:
            await upload_and_download(reader, writer, n, seed=seed)
            exact = True
        except (AssertionError, ConnectionError, TimeoutError):
            exact = False
        return t0, time.monotonic(), exact
    finally:
        writer.close()


async def cell(lab, out: Path, which: str, clients: int, kb: int, workers: int = 1) -> Cell:
    from tests.support.snowflakelab import Rig

    rig = Rig(lab, out)
    try:
        proxy = (rig.our_proxy(0, "-workers", str(workers)) if which == "ours"
                 else rig.debian_proxy(0))
        await asyncio.to_thread(rig.wait_available, 1)
        ports = [rig.debian_client(i) for i in range(clients)]
        watch = Watch(proxy.pid)
        threading.Thread(target=watch.run, daemon=True).start()
        start = Start()
        n = kb * 1024
        tasks = [asyncio.create_task(one_client(lab, port, n, 10 + 2 * i, start))
                 for i, port in enumerate(ports)]
        # Every client's stream is open (all matched, through the one proxy) before
        # the clock starts, so the figure is goodput, not rendezvous.
        t_open = time.monotonic()
        while start.opened + len(start.failed) < clients:
            await asyncio.sleep(0.1)
        setup = time.monotonic() - t_open
        user0, sys0 = tree_cpu(proxy.pid)
        snmp0 = {node: snmp(lab, node) for node in ("proxy0", "client")}
        start.go.set()
        results = [r for r in await asyncio.gather(*tasks) if r is not None]
        user, system = (a - b for a, b in zip(tree_cpu(proxy.pid), (user0, sys0), strict=True))
        snmp1 = {node: snmp(lab, node) for node in snmp0}
        delta = {node: {k: v - snmp0[node][k] for k, v in c.items()} for node, c in snmp1.items()}
        drops = {node: d["udp_drops"] for node, d in delta.items()}
        watch.stop.set()
        watch.sample()
        begin = min((r[0] for r in results), default=0.0)
        end = max((r[1] for r in results), default=1.0)
        # A client that never opened its stream, or did not finish exact, gets 0.
        shares = sorted([2 * n / 1e6 / (r[1] - r[0]) if r[2] else 0.0 for r in results]
                        + [0.0] * len(start.failed))
        exact = sum(1 for r in results if r[2])
        return Cell(clients, exact * 2 * n / 1e6 / (end - begin), shares, watch.peak_rss,
                    user + system, system, watch.peak_fds, exact, setup, drops,
                    delta["proxy0"], start.failed)
    finally:
        rig.close()


async def main(counts: list[int], kb: int, workers: list[int] | None = None,
               debian: bool = True) -> None:
    from netns.lab import Lab
    from netns.topology import default_topology

    limit = unit_memory_max()
    lab = Lab(default_topology(proxies=1)).up()
    rows: dict[tuple[str, int], Cell] = {}
    variants = [(f"ours×{w}" if w > 1 else "ours", "ours", w) for w in workers or [1]]
    if debian:
        variants.append(("debian", "debian", 1))
    try:
        with tempfile.TemporaryDirectory(prefix="ptl-sfclients-") as tmp:
            for clients in counts:
                for label, which, w in variants:
                    out = Path(tmp) / f"{label}-{clients}"
                    out.mkdir()
                    c = rows[(label, clients)] = await cell(lab, out, which, clients, kb, w)
                    print(f"{label:6s} {clients:3d} clients: {c.aggregate_mb_s:6.2f} MB/s "
                          f"aggregate, {c.exact}/{clients} byte-exact; per client "
                          f"min {c.shares[0]:.2f} median {statistics.median(c.shares):.2f} "
                          f"max {c.shares[-1]:.2f} MB/s; peak RSS {c.peak_rss / 2**20:.0f} MiB "
                          f"(unit MemoryMax {limit / 2**20:.0f} MiB), CPU {c.cpu_s:.1f} s "
                          f"({c.cpu_sys_s:.1f} s system), "
                          f"peak fds {c.peak_fds}; {clients - len(c.not_opened)} of {clients} "
                          f"streams open after "
                          f"{c.setup_s:.1f} s; UDP receive-buffer drops {c.drops}", flush=True)
                    pk = c.proxy_packets
                    print(f"       proxy node: UDP {pk['udp_in']} in, {pk['udp_out']} out; "
                          f"TCP {pk['tcp_in']} in, {pk['tcp_out']} out "
                          f"({2 * kb * 1024 * c.exact / max(pk['udp_out'] + pk['udp_in'], 1):.0f}"
                          f" goodput bytes per UDP datagram)", flush=True)
                    if c.not_opened:
                        print(f"       {len(c.not_opened)} streams never opened: "
                              f"{c.not_opened[0]}", flush=True)
    finally:
        lab.down()
    if not debian:
        return
    print(f"\n{kb} KiB each way per client; ours ÷ Debian's aggregate:")
    for clients in counts:
        d = rows[("debian", clients)]
        for label, _, _ in variants[:-1]:
            o = rows[(label, clients)]
            print(f"  {clients:3d} clients: {label} {o.aggregate_mb_s:6.2f}  "
                  f"Debian {d.aggregate_mb_s:6.2f}"
                  f"  ratio {o.aggregate_mb_s / d.aggregate_mb_s:5.2f}   peak RSS {label} "
                  f"{o.peak_rss / 2**20:.0f} MiB, Debian {d.peak_rss / 2**20:.0f} MiB; "
                  f"within MemoryMax: {'yes' if o.peak_rss < limit else 'NO'}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 5, 20, 50])
    ap.add_argument("--kb", type=int, default=2048, help="KiB each way per client")
    ap.add_argument("--workers", type=int, nargs="+", default=[1],
                    help="run ours with each number of session workers")
    ap.add_argument("--no-debian", action="store_true",
                    help="run ours only (no ratio): for profiling our proxy")
    a = ap.parse_args()
    if min(a.workers) < 1:
        ap.error("--workers: at least 1")
    asyncio.run(main(a.clients, a.kb, a.workers, debian=not a.no_debian))
