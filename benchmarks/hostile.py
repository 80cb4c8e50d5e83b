"""Our servers under hostile load, as a hostile client would try them (issue 29).

Each server runs as its own process under a descriptor limit (``--nofile``,
1,024 by default, as ``ulimit -n 1024`` gives), relaying to an echo upstream
in this process. For each server x attack it runs the attack, then a
legitimate client's byte-exact exchange while the attack holds, then the
attack ends and the legitimate exchange runs again. It prints, per row: the
legitimate result during and after, the server's peak RSS and descriptors,
the bytes it logged and the tracebacks among them.

Attacks so far:

* ``junk``: ``--junk`` connections (1,100 and 10,000 by default, a row for
  each) that each send a few random bytes and stay open: the probe-resistant
  servers (obfs4, ScrambleSuit) must stay silent on them, so they pile up.
  The ``-lab`` rows run the lab's own server (``python -m transports.lab_mode
  server``, issue 48's form) instead of managed mode;
* ``slowloris``: ``--slowloris`` connections (1,500 by default) that send the
  start of an HTTP request head and never finish it (the meek server and the
  broker);
* ``sessions``: ``--sessions`` meek sessions (3,000 by default), each opened
  with one POST and never polled again;
* ``session-rate``: new meek sessions at ``--rate`` a second (100) for
  ``--rate-s`` seconds (30); the legitimate exchange runs half way through,
  and again 10 s after the flood;
* ``unread-streams``: ``--streams`` Turbo Tunnel streams (1,000) to the
  Snowflake bridge, each asking the upstream for an endless download and never
  reading a byte of it (16 to a ClientID, the bridge's cap);
* ``never-read``: ``--never-read`` WebSocket clients (1,000 and 3,000 by
  default, a row for each), at most 100 at a time, each sending Turbo
  Tunnel's token, a ClientID of its own and one KCP segment carrying an smux
  SYN for stream 3, then holding its connection and reading nothing (issue
  48's form), from 16 addresses in turn. The bridge's upstream for these
  rows sends without end to every connection, and the legitimate exchange is
  a byte-exact download of ``DOWNLOAD`` bytes of that stream. The ``-lab``
  row runs the bridge's own module (``python -m transports.snowflake.server
  --dest``), as the issue did, the other managed mode;
* ``resets``: connections that send their opening (random bytes, or the start
  of an HTTP head) and are then reset (SO_LINGER 0: an RST, not a FIN), in
  waves of 100 that keep coming while the legitimate exchange runs, until at
  least ``--resets`` (3,000) were sent: every read the server has pending ends
  in ECONNRESET, which must be a quiet line, never a traceback;
* ``malformed``: ``--malformed`` (2,000) requests that parse as nothing the
  server speaks, from 32 clients at once while the legitimate exchange runs:
  for the meek server and the broker, HTTP heads with bad request lines,
  header lines and lengths, bodies that are not a meek session's or JSON; for
  the Snowflake bridge, WebSocket upgrades followed by frames of random bytes
  (a Turbo Tunnel preamble that is not one, KCP that is not KCP) or by a frame
  that breaks WebSocket's own rules.

The legitimate client is our own: a 64 KiB byte-exact echo through obfs4,
ScrambleSuit, meek or the Snowflake bridge (each as a managed-mode PT server;
the bridge's over a WebSocket and Turbo Tunnel, as a proxy would carry it), and
the broker's ``/robots.txt`` compared with what it answered before the attack.
The exchange during the attack runs in a process of its own, as a client on
another machine would: one sharing the attackers' event loop waits behind their
callbacks, long enough under a burst for its connection to reach the server with
nothing sent. Like tor with a bridge, that client tries again after a failure, a
second later, up to three tries in all; the row names the try that got in and
why the first failed ("ok(try2:TimeoutError)"). A burst of connections larger
than a server's cap can close a client's connection before its hello is read
(the reset flood at ``--quick``'s budget: waves of 100 into a cap of 64); room
is left when the client gets in. The upstream echoes, or, for a connection whose
first byte is ``F``, sends without end. The attackers connect from their own
address (127.77.0.1), and the ``addresses`` column counts the server's log lines
that name it; a row fails on any (or on any other 127.77.0.x: the never-read
rows use 16), on a traceback, on more than 2 MiB of log, or on a peak RSS over
300 MiB. The first line of the table gives the load average at the end: the
figures are only comparable on a machine that was not busy.

``--quick`` runs smaller attacks (CI's form). Run:
``.venv/bin/python benchmarks/hostile.py [--quick] [--servers obfs4,scramblesuit,meek,broker]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ptlab.processes.ptparent import parse_method  # noqa: E402
from transports import base as transports  # noqa: E402
from transports.snowflake.carriers import WebSocketCarrier  # noqa: E402
from transports.snowflake.turbotunnel import TOKEN, encapsulation  # noqa: E402
from transports.snowflake.turbotunnel.redial import TurboTunnelSession  # noqa: E402

# What a legitimate client sends to the echo upstream. Its first byte is never
# DOWNLOAD_BYTE, which would ask the upstream for an endless download instead of
# an echo: os.urandom alone gave that 1 time in 256, a "bytes differ" row.
DOWNLOAD_BYTE = b"F"
EXCHANGE = b"E" + os.urandom(64 * 1024 - 1)
FLOOD = os.urandom(64 * 1024)
# What the endless upstream of the never-read rows sends, over and over: the same in
# every process, so the legitimate client (a process of its own) can check its bytes.
PATTERN = random.Random(48).randbytes(64 * 1024)
DOWNLOAD = 16 * len(PATTERN)  # the legitimate client's download in those rows: 1 MiB
# How long the never-read attackers hold before the legitimate client comes: the
# bridge's buffers fill in this time (issue 48 measured the peak after about 10 s).
NEVER_READ_HOLD_S = 10.0
# The attackers' source address (all of 127/8 is local): a log line that names it
# carries a client address, which no server may log by default.
ATTACKER = "127.77.0.1"
# The never-read rows' attackers come from 16 addresses in turn (127.77.0.1-16): a
# flood from one address mostly churns its own waiting connections (the HTTP
# guard's per-address share), and the row is about what the bridge holds when
# they all get in.
ATTACKER_NET = "127.77.0."
NEVER_READ_SOURCES = [f"{ATTACKER_NET}{i}" for i in range(1, 17)]
# The legitimate client during an attack tries again after a failure, as tor does.
LEGIT_TRIES = 3
RETRY_PAUSE_S = 1.0


async def start_upstream(endless: bool = False) -> tuple[asyncio.Server, int]:
    """Echo, or (first byte ``F``) an endless download: the "fast upstream". With
    ``endless``, every connection gets :data:`PATTERN` without end from its start,
    whatever it sends: issue 48's upstream, "a server that sends as fast as it can"."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Cancelled too: asyncio.run cancels the downloads still running at its end.
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError,
                                 asyncio.CancelledError):
            if endless:
                while True:
                    writer.write(PATTERN)
                    await writer.drain()
            first = await reader.readexactly(1)
            if first == DOWNLOAD_BYTE:
                while True:
                    writer.write(FLOOD)
                    await writer.drain()
            writer.write(first)
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@dataclass
class Endpoint:
    """What a legitimate client needs to know of a server."""

    name: str
    host: str
    port: int
    args: dict[str, str]
    robots: bytes = b""  # the broker's robots.txt before the attack
    download: bool = False  # the upstream sends PATTERN without end (never-read rows)


@dataclass(kw_only=True)
class Server(Endpoint):
    """One server process and what it announced."""

    proc: subprocess.Popen
    log: Path
    peak_rss_kib: int = 0
    peak_fds: int = 0

    def sample(self) -> None:
        """Note the process's RSS and descriptor count now (peaks are kept)."""
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_rss_kib = max(self.peak_rss_kib, int(line.split()[1]))
            self.peak_fds = max(self.peak_fds, len(os.listdir(f"/proc/{self.proc.pid}/fd")))

    def log_bytes(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def tracebacks(self) -> int:
        return self.log.read_text(errors="replace").count("Traceback") if self.log.exists() \
            else 0

    def addresses_logged(self) -> int:
        """Log lines that name the attackers' address."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return sum(ATTACKER_NET in line for line in text.splitlines())


def start_pt_server(transport: str, workdir: Path, orport: tuple[str, int],
                    nofile: int) -> Server:
    """Our managed-mode server PT for ``transport`` on loopback, under ``nofile``."""
    state = workdir / f"{transport}-state"
    state.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{transport}.log"
    env = {**os.environ, "TOR_PT_MANAGED_TRANSPORT_VER": "1",
           "TOR_PT_STATE_LOCATION": str(state), "TOR_PT_SERVER_TRANSPORTS": transport,
           "TOR_PT_SERVER_BINDADDR": f"{transport}-127.0.0.1:0",
           "TOR_PT_ORPORT": f"{orport[0]}:{orport[1]}"}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    out = open(log, "wb")  # noqa: SIM115 - the process owns it until it exits
    proc = subprocess.Popen([sys.executable, "-m", "transports.pt"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=out,
                            preexec_fn=limit)
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode(errors="replace").strip()
        if not line:
            break
        info = parse_method(line)
        if info and info["kind"] == "server":
            host, _, port = info["addr"].rpartition(":")
            # The PT's stdout keeps flowing into our log from now on.
            _drain(proc.stdout, out)
            return Server(transport, host.strip("[]"), int(port), info["args"], proc=proc,
                          log=log)
    proc.kill()
    raise RuntimeError(f"{transport}: no SMETHOD; log: {log.read_text()[-2000:]}")


def start_lab_server(transport: str, workdir: Path, upstream: tuple[str, int],
                     nofile: int) -> Server:
    """The lab's own server for ``transport`` on loopback under ``nofile``: ``python
    -m transports.lab_mode server``, or for Snowflake the bridge's own module
    (``python -m transports.snowflake.server``, issue 48's form); the client's
    arguments come from the state directory it wrote, as the lab reads them."""
    state = workdir / f"{transport}-state"
    state.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{transport}-lab.log"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    to = f"{upstream[0]}:{upstream[1]}"
    argv = (["transports.snowflake.server", "--listen", "127.0.0.1:0", "--dest", to]
            if transport == "snowflake" else
            ["transports.lab_mode", "server", "--transport", transport,
             "--listen", "127.0.0.1:0", "--upstream", to, "--state", str(state)])
    out = open(log, "wb")  # noqa: SIM115 - the process owns it until it exits
    proc = subprocess.Popen([sys.executable, "-m", *argv],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            preexec_fn=limit)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if '"ready"' in line:
                listen = json.loads(line)["listen"]
                host, _, port = (listen if isinstance(listen, str) else listen[0]).rpartition(":")
                args = {} if transport == "snowflake" else \
                    transports.get(transport).server_factory(state, {}).smethod_args()
                return Server(transport, host, int(port), dict(args), proc=proc, log=log)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{transport} lab server did not start: {log.read_text()[-2000:]}")


def start_broker(workdir: Path, nofile: int) -> Server:
    """Our Snowflake broker on loopback over plain HTTP, under ``nofile``."""
    import socket

    workdir.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = workdir / "broker.log"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    out = open(log, "wb")  # noqa: SIM115 - the process owns it until it exits
    proc = subprocess.Popen([sys.executable, "-m", "broker", "--addr", f"127.0.0.1:{port}",
                             "--disable-tls"], stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=limit)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if b'"ready"' in log.read_bytes():
            return Server("broker", "127.0.0.1", port, {}, proc=proc, log=log)
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"broker did not start: {log.read_text()[-2000:]}")


def _drain(stream, out) -> None:
    import threading

    def copy() -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            out.write(chunk)
            out.flush()
    threading.Thread(target=copy, daemon=True).start()


async def broker_robots(server: Endpoint, timeout_s: float) -> bytes:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(server.host, server.port), timeout_s)
    writer.write(b"GET /robots.txt HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), timeout_s)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n")[0].decode(errors="replace"))
    return body


def bridge_url(server: Endpoint) -> str:
    return f"ws://{server.host}:{server.port}/"


async def snowflake_exchange(server: Endpoint, timeout_s: float) -> str:
    """A Turbo Tunnel session over a WebSocket, as a proxy carries a client's: an
    echo of EXCHANGE, or, behind the endless upstream, the first DOWNLOAD bytes."""
    async def dial():
        return await WebSocketCarrier.connect(bridge_url(server))
    session = TurboTunnelSession(dial).start()
    expected = (PATTERN * (DOWNLOAD // len(PATTERN))) if server.download else EXCHANGE
    got = bytearray()
    stage = "open"
    try:
        reader, writer = await asyncio.wait_for(session.open_stream(), timeout_s)
        if not server.download:
            writer.write(EXCHANGE)
        stage = "read"

        async def read_all() -> None:
            while len(got) < len(expected):
                chunk = await reader.read(len(expected) - len(got))
                if not chunk:
                    raise asyncio.IncompleteReadError(bytes(got), len(expected))
                got.extend(chunk)
        await asyncio.wait_for(read_all(), timeout_s)
        writer.close()
    except Exception as exc:  # any failure is the row's result, named with its stage
        where = "open" if stage == "open" else f"{len(got) // 1024}KiB"
        return f"FAIL ({type(exc).__name__}@{where})"
    finally:
        await session.close()
    return "ok" if got == expected else "FAIL (bytes differ)"


async def legit_exchange(server: Endpoint, timeout_s: float) -> str:
    """A real client's byte-exact round trip through the server to the echo upstream
    (for the broker: its robots.txt, byte-exact against the one before the attack)."""
    if server.name == "broker":
        try:
            got = await broker_robots(server, timeout_s)
        except Exception as exc:  # any failure is the row's result, named
            return f"FAIL ({type(exc).__name__})"
        return "ok" if got == server.robots else "FAIL (bytes differ)"
    if server.name == "snowflake":
        return await snowflake_exchange(server, timeout_s)
    transport = transports.get(server.name)
    factory = transport.client_factory(None, server.args)
    try:
        reader, writer = await asyncio.wait_for(factory.dial(server.host, server.port),
                                                timeout_s)
        writer.write(EXCHANGE)
        got = await asyncio.wait_for(reader.readexactly(len(EXCHANGE)), timeout_s)
        writer.close()
    except Exception as exc:  # any failure is the row's result, named
        return f"FAIL ({type(exc).__name__})"
    return "ok" if got == EXCHANGE else "FAIL (bytes differ)"


async def legit_exchange_apart(server: Server, timeout_s: float) -> str:
    """:func:`legit_exchange` from a process of its own (``--legit-client``)."""
    spec = json.dumps({"name": server.name, "host": server.host, "port": server.port,
                       "args": server.args, "robots": server.robots.hex(),
                       "download": server.download, "timeout": timeout_s})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).resolve()), "--legit-client", spec,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(),
                                        LEGIT_TRIES * (2 * timeout_s + RETRY_PAUSE_S) + 30)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return "FAIL (client hung)"
    lines = out.decode(errors="replace").splitlines()
    return lines[-1] if lines else f"FAIL (client exited {proc.returncode})"


async def legit_exchange_with_tries(endpoint: Endpoint, timeout_s: float) -> str:
    """Up to LEGIT_TRIES exchanges, RETRY_PAUSE_S apart, until one succeeds. A
    success after a failure says which try it was and why the first one failed
    (``ok(try2:TimeoutError)``): a row that passes only on a retry is not the
    same result as one that passes at once."""
    first_failure = ""
    for attempt in range(1, LEGIT_TRIES + 1):
        result = await legit_exchange(endpoint, timeout_s)
        if result == "ok":
            return "ok" if attempt == 1 else f"ok(try{attempt}:{first_failure})"
        first_failure = first_failure or \
            result.removeprefix("FAIL (").rstrip(")").replace(" ", "-")
        if attempt < LEGIT_TRIES:
            await asyncio.sleep(RETRY_PAUSE_S)
    return result


def run_legit_client(spec: str) -> int:
    """The ``--legit-client`` process: the exchange, its result on stdout."""
    d = json.loads(spec)
    endpoint = Endpoint(d["name"], d["host"], int(d["port"]), dict(d["args"]),
                        bytes.fromhex(d["robots"]), bool(d["download"]))
    print(asyncio.run(legit_exchange_with_tries(endpoint, float(d["timeout"]))), flush=True)
    return 0


@dataclass
class Junk:
    """Connections that send a few random bytes and stay open."""

    count: int
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    refused: int = 0

    async def connect(self, host: str, port: int, source: str = ATTACKER
                      ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection from an attackers' address; None (counted) if refused."""
        try:
            return await asyncio.wait_for(asyncio.open_connection(
                host, port, local_addr=(source, 0)), 10)
        except (OSError, TimeoutError):
            self.refused += 1
            return None

    async def start(self, host: str, port: int) -> None:
        async def one() -> None:
            if (conn := await self.connect(host, port)) is None:
                return
            conn[1].write(self.opening())
            self.writers.append(conn[1])
        for i in range(0, self.count, 100):
            await asyncio.gather(*(one() for _ in range(min(100, self.count - i))))

    def opening(self) -> bytes:
        """What each connection sends before it falls silent."""
        return os.urandom(37)

    async def stop(self) -> None:
        for w in self.writers:
            w.close()
        self.writers.clear()
        await asyncio.sleep(0.5)


@dataclass
class Slowloris(Junk):
    """Connections that start an HTTP request head and never finish it."""

    def opening(self) -> bytes:
        return b"POST / HTTP/1.1\r\nHost: example.com\r\nX-Slow: "


@dataclass
class MeekSessions(Junk):
    """Meek sessions opened with one POST each and never polled again; with ``rate``,
    ``rate`` new ones a second in the background until ``count`` were opened."""

    rate: float = 0.0
    after_s: float = 10.0  # how long after the flood "after" is measured
    task: asyncio.Task | None = None
    answered: dict[int, int] = field(default_factory=dict)

    async def _open(self, http, url: str, i: int) -> None:
        import aiohttp

        try:
            async with http.post(url, data=b"", headers={
                    "X-Session-Id": f"hostile-{i:08}-{os.getpid()}"}) as r:
                self.answered[r.status] = self.answered.get(r.status, 0) + 1
        except (aiohttp.ClientError, OSError, TimeoutError):
            self.refused += 1

    async def _flood(self, url: str) -> None:
        import aiohttp

        conn = aiohttp.TCPConnector(limit=64, local_addr=(ATTACKER, 0))
        async with aiohttp.ClientSession(connector=conn) as http:
            if not self.rate:
                for i in range(0, self.count, 64):
                    await asyncio.gather(*(self._open(http, url, j)
                                           for j in range(i, min(i + 64, self.count))))
                return
            loop, t0, pending = asyncio.get_running_loop(), time.monotonic(), set()
            for i in range(self.count):
                await asyncio.sleep(max(0.0, t0 + i / self.rate - time.monotonic()))
                task = loop.create_task(self._open(http, url, i))
                pending.add(task)
                task.add_done_callback(pending.discard)
            await asyncio.gather(*pending)

    async def start(self, host: str, port: int) -> None:
        url = f"http://{host}:{port}/"
        if self.rate:
            self.task = asyncio.create_task(self._flood(url))
            await asyncio.sleep(self.count / self.rate / 2 - 1.0)  # "during": half way
        else:
            await self._flood(url)

    async def stop(self) -> None:
        if self.task is not None:
            await self.task
            await asyncio.sleep(self.after_s)
        await super().stop()


@dataclass
class UnreadStreams(Junk):
    """Turbo Tunnel streams that ask for an endless download and never read it."""

    per_client: int = 16
    sessions: list[TurboTunnelSession] = field(default_factory=list)

    async def start(self, host: str, port: int) -> None:
        url = f"ws://{host}:{port}/"

        async def dial():
            return await WebSocketCarrier.connect(url)
        left = self.count
        while left > 0:
            session = TurboTunnelSession(dial).start()
            self.sessions.append(session)
            for _ in range(min(self.per_client, left)):
                try:
                    _, writer = await asyncio.wait_for(session.open_stream(), 10)
                except Exception:  # noqa: BLE001 - a refused stream is the bridge's answer
                    self.refused += 1
                    continue
                writer.write(DOWNLOAD_BYTE)
            left -= self.per_client
        await asyncio.sleep(3.0)  # let the downloads fill whatever they can

    async def stop(self) -> None:
        await asyncio.gather(*(s.close() for s in self.sessions), return_exceptions=True)
        self.sessions.clear()
        await asyncio.sleep(1.0)


def kcp_syn_segment(conv: int) -> bytes:
    """One KCP push segment (sn 0) carrying an smux v2 SYN for stream 3: what a
    Turbo Tunnel client sends first (docs/transports/turbotunnel.md §3.1, §4.4)."""
    syn = struct.pack("<BBHI", 2, 0, 0, 3)  # ver 2, cmd SYN, length 0, sid 3
    return struct.pack("<IBBHIIII", conv, 81, 0, 65535, 0, 0, 0, len(syn)) + syn


@dataclass
class NeverRead(Junk):
    """WebSocket clients, at most 100 connecting at a time, that each send the Turbo
    Tunnel token, a ClientID of their own and a KCP segment opening stream 3, then
    hold their connection and read nothing more (issue 48)."""

    hold_s: float = NEVER_READ_HOLD_S
    opened: int = 0

    async def _one(self, host: str, port: int, gate: asyncio.Semaphore, source: str) -> None:
        async with gate:
            if (conn := await self.connect(host, port, source)) is None:
                return
            reader, writer = conn
            self.writers.append(writer)
            try:
                writer.write(websocket_upgrade(host, port))
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            except (OSError, TimeoutError, asyncio.IncompleteReadError,
                    asyncio.LimitOverrunError):
                self.refused += 1
                return
            if not head.startswith(b"HTTP/1.1 101"):
                self.refused += 1
                return
            conv = int.from_bytes(os.urandom(4), "little")
            writer.write(ws_frame(TOKEN + os.urandom(8) + encapsulation.encode(
                kcp_syn_segment(conv))))
            self.opened += 1

    async def start(self, host: str, port: int) -> None:
        gate = asyncio.Semaphore(100)
        await asyncio.gather(*(self._one(host, port, gate,
                                         NEVER_READ_SOURCES[i % len(NEVER_READ_SOURCES)])
                               for i in range(self.count)))
        await asyncio.sleep(self.hold_s)


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST: SO_LINGER on, zero seconds, then abort."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass
class Resets(Junk):
    """Waves of 100 connections that send their opening and are reset, from start()
    until stop(), and at least ``count`` in all."""

    http: bool = False
    task: asyncio.Task | None = None
    sent: int = 0
    stopping: bool = False

    def opening(self) -> bytes:
        return b"POST / HTTP/1.1\r\nHost: example.com\r\n" if self.http else os.urandom(37)

    async def _one(self, host: str, port: int) -> None:
        if (conn := await self.connect(host, port)) is None:
            return
        writer = conn[1]
        writer.write(self.opening())
        await asyncio.sleep(0.02)  # let the server start reading
        reset(writer)
        self.sent += 1

    async def _flood(self, host: str, port: int) -> None:
        while not (self.stopping and self.sent >= self.count):
            await asyncio.gather(*(self._one(host, port) for _ in range(100)))

    async def start(self, host: str, port: int) -> None:
        self.task = asyncio.create_task(self._flood(host, port))
        await asyncio.sleep(0.5)  # under way before the legitimate client comes

    async def stop(self) -> None:
        self.stopping = True
        if self.task is not None:
            await self.task
        await asyncio.sleep(0.5)


#: Requests no server of ours speaks: request lines, header lines and lengths that
#: break HTTP, and bodies that are not a meek session's or the broker's JSON.
BAD_HTTP = (
    b"GET\x00/ HTTP/1.1\r\n\r\n",
    b"POST / HTTP/9.9\r\nHost: x\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnope\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nX-Session-Id: \xff\xfe../..\r\nContent-Length: 4\r\n"
    b"\r\njunk",
    b"POST /client HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{\"offer\":",
    b"POST /proxy HTTP/1.1\r\nHost: x\r\nContent-Length: 18\r\n\r\n{\"Sid\": [1, 2, 3]}",
    b"POST /answer HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n\x00\x01\x02\x03",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32),  # TLS to a plain port
)


def websocket_upgrade(host: str, port: int) -> bytes:
    key = base64.b64encode(os.urandom(16))
    return (f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n").encode() + \
        b"Sec-WebSocket-Key: " + key + b"\r\n\r\n"


def ws_frame(payload: bytes, opcode: int = 2, masked: bool = True) -> bytes:
    """One WebSocket frame (RFC 6455 §5.2); a client's must be masked."""
    head = bytes([0x80 | opcode])
    n = len(payload)
    length = bytes([n]) if n < 126 else b"\x7e" + struct.pack("!H", n)
    if not masked:
        return head + length + payload
    mask = os.urandom(4)
    return (head[:1] + bytes([length[0] | 0x80]) + length[1:] + mask
            + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


@dataclass
class Malformed(Junk):
    """``count`` malformed requests from 32 clients at once, from start() on."""

    websocket: bool = False
    task: asyncio.Task | None = None
    sent: int = 0
    answered: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(29))

    def request(self, host: str, port: int) -> bytes:
        if not self.websocket:
            return self.rng.choice(BAD_HTTP)
        garbage = self.rng.randbytes(self.rng.randrange(1, 1200))
        frames = self.rng.choice((
            ws_frame(garbage),  # not a Turbo Tunnel preamble
            ws_frame(TOKEN + garbage),  # Turbo Tunnel's token, then not a ClientID and KCP
            ws_frame(garbage, masked=False),  # a client frame must be masked
            ws_frame(garbage[:10], opcode=0x3),  # a reserved opcode
            ws_frame(b"\xff" * 200, opcode=0x9),  # a control frame over 125 bytes
        ))
        return websocket_upgrade(host, port) + frames

    async def _one(self, host: str, port: int) -> None:
        if (conn := await self.connect(host, port)) is None:
            return
        reader, writer = conn
        try:
            writer.write(self.request(host, port))
            self.sent += 1
            if await asyncio.wait_for(reader.read(4096), 3):
                self.answered += 1
        except (OSError, TimeoutError):
            pass
        finally:
            writer.close()

    async def _flood(self, host: str, port: int) -> None:
        async def worker() -> None:
            while self.sent + self.refused < self.count:
                await self._one(host, port)
        await asyncio.gather(*(worker() for _ in range(32)))

    async def start(self, host: str, port: int) -> None:
        self.task = asyncio.create_task(self._flood(host, port))
        await asyncio.sleep(0.5)

    async def stop(self) -> None:
        if self.task is not None:
            await self.task
        await asyncio.sleep(0.5)


ATTACKS = {"obfs4": "junk", "scramblesuit": "junk", "meek": "slowloris", "broker": "slowloris",
           "meek-sessions": "sessions", "meek-rate": "session-rate", "snowflake": "slowloris",
           "snowflake-streams": "unread-streams", "obfs4-resets": "resets",
           "meek-resets": "resets", "snowflake-resets": "resets", "broker-resets": "resets",
           "meek-malformed": "malformed", "broker-malformed": "malformed",
           "snowflake-malformed": "malformed", "obfs4-lab": "junk",
           "scramblesuit-lab": "junk", "snowflake-unread": "never-read",
           "snowflake-unread-lab": "never-read"}


@dataclass
class RowResult:
    server: str
    attack: str
    during: str
    after: str
    peak_rss_mib: float
    peak_fds: int
    log_bytes: int
    tracebacks: int
    addresses: int
    note: str = ""  # what the attack got: how many of its connections were refused


async def run_row(name: str, attack_count: int, nofile: int, timeout_s: float,
                  workdir: Path, rate: float = 0.0, hold_s: float = NEVER_READ_HOLD_S
                  ) -> RowResult:
    attack = ATTACKS[name]
    echo, echo_port = await start_upstream(endless=attack == "never-read")
    workdir = workdir / f"x{attack_count}"
    if name.split("-")[0] == "broker":
        server = start_broker(workdir, nofile)
        server.robots = await broker_robots(server, timeout_s)
    elif name.endswith("-lab"):
        server = start_lab_server(name.split("-")[0], workdir, ("127.0.0.1", echo_port),
                                  nofile)
    else:
        server = start_pt_server(name.split("-")[0], workdir, ("127.0.0.1", echo_port), nofile)
        if server.name == "meek":
            server.args = {"url": f"http://{server.host}:{server.port}/"}
    server.download = attack == "never-read"
    try:
        await asyncio.sleep(0.3)
        baseline = await legit_exchange(server, timeout_s)
        if baseline != "ok":
            raise RuntimeError(f"{name}: the legitimate exchange fails with no attack: "
                               f"{baseline}")
        junk: Junk
        if attack == "unread-streams":
            junk = UnreadStreams(attack_count)
        elif attack == "never-read":
            junk = NeverRead(attack_count, hold_s=hold_s)
        elif attack == "sessions":
            junk = MeekSessions(attack_count)
        elif attack == "session-rate":
            junk = MeekSessions(attack_count, rate=rate, after_s=10.0 if attack_count > 1000
                                else 1.0)
        elif attack == "resets":
            junk = Resets(attack_count, http=server.name in ("meek", "broker", "snowflake"))
        elif attack == "malformed":
            junk = Malformed(attack_count, websocket=server.name == "snowflake")
        else:
            junk = (Slowloris if attack == "slowloris" else Junk)(attack_count)
        await junk.start(server.host, server.port)
        await asyncio.sleep(1.0)
        server.sample()
        during = await legit_exchange_apart(server, timeout_s)
        server.sample()
        await junk.stop()
        after = await legit_exchange(server, timeout_s)
        server.sample()
    finally:
        server.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(10)
        echo.close()
    note = (f"{junk.opened} of {attack_count} sessions opened"
            if isinstance(junk, NeverRead) else "")
    if junk.refused:
        note = f"{note}, {junk.refused} refused" if note else f"{junk.refused} refused"
    return RowResult(name, f"{attack} x{attack_count}", during, after,
                     round(server.peak_rss_kib / 1024, 1), server.peak_fds,
                     server.log_bytes(), server.tracebacks(), server.addresses_logged(), note)


def count_list(text: str) -> list[int]:
    """``1100,10000``: one row per count, each at least 1."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of counts") \
            from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every count must be at least 1")
    return counts


#: A server's peak RSS the project holds every row to (issue 29, issue 48).
RSS_GOAL_MIB = 300
#: A server's log under any row, at most (issue 29).
LOG_GOAL_BYTES = 2 << 20


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--legit-client"] and len(argv) == 2:
        return run_legit_client(argv[1])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--servers", default=",".join(ATTACKS))
    p.add_argument("--junk", type=count_list, default=[1100, 10000],
                   help="silent junk connections (a row for each count)")
    p.add_argument("--slowloris", type=int, default=1500, help="unfinished HTTP heads")
    p.add_argument("--sessions", type=int, default=3000, help="idle meek sessions")
    p.add_argument("--rate", type=float, default=100.0, help="new meek sessions a second")
    p.add_argument("--streams", type=int, default=1000, help="unread bridge streams")
    p.add_argument("--never-read", type=count_list, default=[1000, 3000],
                   help="bridge sessions that never read (a row for each count)")
    p.add_argument("--rate-s", type=float, default=30.0, help="seconds of new sessions")
    p.add_argument("--resets", type=int, default=3000, help="connections reset (RST)")
    p.add_argument("--malformed", type=int, default=2000, help="malformed requests")
    p.add_argument("--nofile", type=int, default=1024, help="the servers' descriptor limit")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per legit exchange")
    p.add_argument("--quick", action="store_true", help="a smaller attack, for CI")
    args = p.parse_args(argv)
    if min(args.slowloris, args.sessions, args.resets, args.malformed) < 1 or \
            args.nofile < 64 or args.rate <= 0 or args.rate_s < 2:
        p.error("--slowloris, --sessions, --resets and --malformed must be at least "
                "1, --nofile at least 64, --rate above 0 and --rate-s at least 2")
    unknown = set(args.servers.split(",")) - set(ATTACKS) - {""}
    if unknown:
        p.error(f"unknown servers {sorted(unknown)} (known: {', '.join(ATTACKS)})")
    junk, slow, nofile = (([300], 400, 256) if args.quick
                          else (args.junk, args.slowloris, args.nofile))
    sessions, rate, rate_s = ((400, 100.0, 4.0) if args.quick
                              else (args.sessions, args.rate, args.rate_s))
    counts: dict[str, list[int]] = {
        "junk": junk, "slowloris": [slow], "sessions": [sessions],
        "session-rate": [int(rate * rate_s)],
        "unread-streams": [100 if args.quick else args.streams],
        "never-read": [100] if args.quick else args.never_read,
        "resets": [500 if args.quick else args.resets],
        "malformed": [300 if args.quick else args.malformed]}
    hold_s = 3.0 if args.quick else NEVER_READ_HOLD_S
    # This process holds every attacking connection: give it room.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, max(*junk, *counts["never-read"], slow) * 2 + 256)
    if hard != resource.RLIM_INFINITY and want > hard:
        hard = want  # root may raise its own hard limit
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    rows: list[RowResult] = []
    keep = os.environ.get("PTLAB_HOSTILE_KEEP")  # a directory to keep the servers' logs in
    with (contextlib.nullcontext(keep) if keep else
          tempfile.TemporaryDirectory(prefix="ptl-hostile-")) as tmp:
        for name in [s for s in args.servers.split(",") if s]:
            for count in counts[ATTACKS[name]]:
                rows.append(asyncio.run(run_row(name, count, nofile, args.timeout,
                                                Path(tmp) / name, rate, hold_s)))
    print(f"servers under a descriptor limit of {nofile}; {os.getloadavg()[0]:.2f} load "
          f"(1 min) on {os.cpu_count()} CPUs at the end")
    print(f"{'server':<20} {'attack':<18} {'during':<26} {'after':<18} {'RSS MiB':>8} "
          f"{'fds':>6} {'log B':>9} {'tracebacks':>10} {'addresses':>9}")
    for r in rows:
        print(f"{r.server:<20} {r.attack:<18} {r.during:<26} {r.after:<18} "
              f"{r.peak_rss_mib:>8} {r.peak_fds:>6} {r.log_bytes:>9} {r.tracebacks:>10} "
              f"{r.addresses:>9}")
    for r in rows:
        if r.note:
            print(f"  {r.server} {r.attack}: {r.note}")
    bad = [r for r in rows if not r.during.startswith("ok") or r.after != "ok" or r.tracebacks
           or r.addresses or r.log_bytes > LOG_GOAL_BYTES or r.peak_rss_mib > RSS_GOAL_MIB]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
