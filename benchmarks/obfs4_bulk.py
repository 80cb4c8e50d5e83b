"""obfs4 bulk goodput on loopback: ours vs. obfs4proxy vs. plain TCP, side by side.

Each run moves ``--size`` bytes one way, SOCKS client → PT client → PT server →
sink "ORPort", with both PTs in Tor managed mode under ptadapter (the parent
tor would be). The sink measures: from its first byte received to its last.
Rows (iat-mode 0 everywhere):

* ``tcp``: sender straight to the sink (the loopback ceiling);
* ``obfs4proxy``: Debian obfs4proxy client and server;
* ``ours``: ``python -m transports.pt`` client and server;
* ``ours→obfs4proxy`` and ``obfs4proxy→ours``: mixed pairs (client→server).

Median of ``--runs`` (3) per row, in Mbit/s (10⁶ bit/s), then the ratios.
``--profile DIR`` runs our PT processes under cProfile and writes
``DIR/ours-{client,server}.prof`` (the numbers then include cProfile's
overhead). Run: ``.venv/bin/python benchmarks/obfs4_bulk.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import ptadapter

from netns import procstat

OBFS4PROXY = shutil.which("obfs4proxy") or "/usr/bin/obfs4proxy"
OURS = [sys.executable, "-m", "transports.pt"]
CHUNK = 1 << 20


class Sink:
    """A blocking-socket ORPort stand-in that times each connection's first→last byte."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.results: dict[int, tuple[int, float]] = {}
        self.expect = 0
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True, name="sink").start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._receive, args=(conn,), daemon=True).start()

    def _receive(self, conn: socket.socket) -> None:
        buf = bytearray(CHUNK)
        got, first = 0, None
        with conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            while got < self.expect:
                n = conn.recv_into(buf)
                if not n:
                    break
                if first is None:
                    first = time.perf_counter()
                got += n
            elapsed = time.perf_counter() - (first or time.perf_counter())
            self.results[conn.fileno()] = (got, elapsed)
            self.last = (got, elapsed)
            self.done.set()


def socks5_connect(port: int, host: str, dport: int, args: dict[str, str]) -> socket.socket:
    """A blocking SOCKS5 CONNECT with PT arguments as RFC 1929 username (+ NUL password)."""
    s = socket.create_connection(("127.0.0.1", port))
    blob = ";".join(f"{k}={v}" for k, v in args.items()).encode()
    assert len(blob) < 256
    if blob:
        s.sendall(b"\x05\x01\x02")
        assert s.recv(2) == b"\x05\x02"
        s.sendall(bytes((1, len(blob))) + blob + b"\x01\x00")
        assert s.recv(2) == b"\x01\x00", "PT rejected the arguments"
    else:
        s.sendall(b"\x05\x01\x00")
        assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(host) + struct.pack(">H", dport))
    reply = b""
    while len(reply) < 10:
        more = s.recv(10 - len(reply))
        assert more, "SOCKS reply cut short"
        reply += more
    assert reply[1] == 0, f"SOCKS CONNECT failed: {reply[1]}"
    return s


def send_bulk(sock: socket.socket, size: int, block: bytes) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    view = memoryview(block)
    left = size
    while left:
        n = min(left, len(view))
        sock.sendall(view[:n])
        left -= n


def one_run(sink: Sink, size: int, block: bytes, connect) -> float:
    """Mbit/s of one transfer, as the sink saw it."""
    sink.expect, sink.done = size, threading.Event()
    sock = connect()
    try:
        send_bulk(sock, size, block)
        if not sink.done.wait(600):
            raise RuntimeError("the sink never finished")
    finally:
        sock.close()
    got, elapsed = sink.last
    if got != size:
        raise RuntimeError(f"sink got {got} of {size} bytes")
    return size * 8 / elapsed / 1e6


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (Linux /proc)."""
    seconds = procstat.cpu_seconds(pid)
    if seconds is None:
        raise ProcessLookupError(pid)
    return seconds


def pt_cmd(kind: str, role: str, profile: Path | None) -> list[str]:
    if kind == "obfs4proxy":
        return [OBFS4PROXY]
    if profile is None:
        return OURS
    return [sys.executable, "-m", "cProfile", "-o", str(profile / f"ours-{role}.prof"),
            "-m", "transports.pt"]


@contextlib.asynccontextmanager
async def pt_pair(client: str, server: str, orport: int, state: Path, profile: Path | None,
                  transport: str = "obfs4"
                  ) -> AsyncIterator[tuple[int, int, dict[str, str], dict[str, int]]]:
    """(socks port, bridge port, SOCKS args, PIDs) of a running client/server PT pair."""
    srv = ptadapter.ServerAdapter(pt_cmd(server, "server", profile), state / f"s-{server}",
                                  "127.0.0.1", orport)
    srv.add_transport(transport, "127.0.0.1", 0, {"iat-mode": "0"})
    cli = ptadapter.ClientAdapter(pt_cmd(client, "client", profile), state / f"c-{client}",
                                  [transport])
    async with srv, cli:
        st = srv.get_transport(transport)
        args = st.parse_args()
        pids = {"client": cli._process.pid, "server": srv._process.pid}  # noqa: SLF001
        yield cli.get_transport(transport).port, st.port, args, pids


async def measure(name: str, runs: int, sink: Sink, size: int, block: bytes,
                  state: Path, profile: Path | None) -> tuple[list[float], dict[str, float]]:
    """Mbit/s of each run, and each PT's CPU seconds per GB moved."""
    if name == "tcp":
        def connect() -> socket.socket:
            return socket.create_connection(("127.0.0.1", sink.port))
        return [await asyncio.to_thread(one_run, sink, size, block, connect)
                for _ in range(runs)], {}
    transport = "obfs4"
    if name == "direct":  # our PT machinery (SOCKS, relay, asyncio) without obfs4
        name, transport = "ours", "direct"
    client, _, server = name.partition("→")
    server = server or client
    async with pt_pair(client, server, sink.port, state, profile, transport) as (
            socks, bport, args, pids):
        def connect() -> socket.socket:
            return socks5_connect(socks, "127.0.0.1", bport, args)
        out = []
        before = {role: cpu_seconds(pid) for role, pid in pids.items()}
        for _ in range(runs):
            out.append(await asyncio.to_thread(one_run, sink, size, block, connect))
            await asyncio.sleep(0.2)  # let the PTs close the finished connection
        cpu = {role: (cpu_seconds(pid) - before[role]) / (runs * size / 1e9)
               for role, pid in pids.items()}
        return out, cpu


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=200_000_000, help="bytes per run (200 MB)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", default="tcp,obfs4proxy,ours,ours→obfs4proxy,obfs4proxy→ours",
                    help="comma list of rows (client→server for a mixed pair)")
    ap.add_argument("--profile", type=Path, help="cProfile our PTs into this directory")
    opts = ap.parse_args()
    if not os.access(OBFS4PROXY, os.X_OK):
        print(f"obfs4proxy not found at {OBFS4PROXY}", file=sys.stderr)
        return 1
    if opts.profile:
        opts.profile.mkdir(parents=True, exist_ok=True)
    block = os.urandom(CHUNK)
    sink = Sink()
    rows = [r.strip() for r in opts.rows.split(",") if r.strip()]
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="obfs4_bulk_") as tmp:
        for name in rows:
            results[name], cpu = await measure(name, opts.runs, sink, opts.size, block,
                                               Path(tmp), opts.profile)
            runs = " / ".join(f"{v:.0f}" for v in results[name])
            cpu_txt = (f"   CPU s/GB: client {cpu['client']:.2f}, server {cpu['server']:.2f}"
                       if cpu else "")
            print(f"{name:<18} median {statistics.median(results[name]):8.0f} Mbit/s"
                  f"   ({runs}){cpu_txt}", flush=True)
    sink.sock.close()
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"\n{opts.size / 1e6:.0f} MB one way, iat-mode 0, median of {opts.runs}, "
          f"{os.cpu_count()} CPUs")
    for a, b in (("ours", "obfs4proxy"), ("ours", "tcp"), ("obfs4proxy", "tcp"),
                 ("ours→obfs4proxy", "obfs4proxy"), ("obfs4proxy→ours", "obfs4proxy")):
        if a in med and b in med:
            print(f"  {a} ÷ {b}: {med[a] / med[b]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
