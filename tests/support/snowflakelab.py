"""A Snowflake rig in a lab: a broker (ours, or Snowflake's current one), our
bridge and a data server, with proxies and clients (ours, Debian's 2.5.1, or the
current release built by ``scripts/setup --peers``) started on demand.

The interop tests and ``benchmarks/snowflake_goodput.py`` share it. Every
piece is a real process in its own namespace: the broker on the broker node,
the bridge (``python -m transports.snowflake.server``) on the bridge node
sending streams to a data server beside it, proxies on proxy nodes outside
the censor, the client behind the censor router.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import socket
import sys
import threading
import time
from pathlib import Path

from netns.nsenter import ns_socket
from netns.process import LabProcess
from ptcommon.events import READY_PATTERN, count_events
from transports.pt import socks5
from transports.snowflake.messages import DEFAULT_BRIDGE_FINGERPRINT

NO_ROUTE_STUN = "stun:203.0.113.1:3478"  # unroutable in the lab: gathering ends at once
DATA_PORT, BRIDGE_PORT, BROKER_PORT, NAT_PROBE_PORT = 9100, 8443, 8080, 8081
MB = 1_000_000

def stream_bytes(seed: int, n: int):
    rng = random.Random(seed)
    while n > 0:
        k = min(n, 65536)
        yield rng.randbytes(k)
        n -= k


class DataServer:
    """``U <n>``: read n bytes, answer their SHA-256; ``D <n> <seed>``: send n
    seeded bytes. Threads on sockets in the bridge namespace."""

    def __init__(self, ns: str, addr: str, port: int) -> None:
        self.sock = ns_socket(ns)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((addr, port))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(120)
        f = conn.makefile("rb")
        with conn:
            try:
                while line := f.readline():
                    cmd, *rest = line.split()
                    if cmd == b"U":
                        n, h = int(rest[0]), hashlib.sha256()
                        while n:
                            chunk = f.read(min(n, 65536))
                            if not chunk:
                                return
                            h.update(chunk)
                            n -= len(chunk)
                        conn.sendall(h.hexdigest().encode() + b"\n")
                    elif cmd == b"D":
                        for chunk in stream_bytes(int(rest[1]), int(rest[0])):
                            conn.sendall(chunk)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        self._thread.join(2)  # the listening socket is freed only once accept() returns
        self.sock.close()


class Rig:
    """Broker, bridge and data server in the lab; proxies and clients on demand."""

    def __init__(self, lab, out: Path, broker: str | None = None) -> None:
        """``broker``: None for ours, else the path of Snowflake's current broker."""
        self.lab, self.out = lab, out
        self.procs: list[LabProcess] = []
        bridge = lab.addr("bridge")
        self.data = DataServer(lab.ns("bridge"), bridge, DATA_PORT)
        self.bridge = self._start("bridge", [
            sys.executable, "-m", "transports.snowflake.server",
            "--listen", f"{bridge}:{BRIDGE_PORT}", "--dest", f"{bridge}:{DATA_PORT}",
            "--unsafe-logging"],  # the interop tests check the proxy's and client's address
            READY_PATTERN)
        self.relay_url = f"ws://{bridge}:{BRIDGE_PORT}/"
        bridges = out / "bridges.jsonl"
        bridges.write_text(json.dumps({"displayName": "lab", "webSocketAddress": self.relay_url,
                                       "fingerprint": DEFAULT_BRIDGE_FINGERPRINT}) + "\n")
        exact = f"^{bridge}$"
        self.broker_url = f"http://{lab.addr('broker')}:{BROKER_PORT}/"
        addr = f"{lab.addr('broker')}:{BROKER_PORT}"
        if broker is None:
            self.broker = self._start("broker", [
                sys.executable, "-m", "broker", "--addr", addr,
                "--disable-tls", "--allowed-relay-pattern", exact,
                "--bridge-list-path", str(bridges), "--proxy-timeout", "8", "--next-poll", "1000",
                "--unknown-proxies-unrestricted"], READY_PATTERN)
        else:  # it prints nothing when ready: wait for its port
            self.broker = self._start("broker", [
                broker, "-addr", addr, "-disable-tls", "-disable-geoip", "-unsafe-logging",
                "-allowed-relay-pattern", exact, "-bridge-list-path", str(bridges)],
                name="upstream-broker")
            wait_port(lab.ns("broker"), lab.addr("broker"), BROKER_PORT)
        self.nat_probe_url = f"http://{lab.addr('broker')}:{NAT_PROBE_PORT}/probe"

    def debug_page(self) -> str:
        """The broker's /debug page (the same text from ours and Tor's)."""
        with ns_socket(self.lab.ns("broker")) as s:
            s.settimeout(5)
            s.connect((self.lab.addr("broker"), BROKER_PORT))
            s.sendall(b"GET /debug HTTP/1.0\r\n\r\n")
            body = b""
            while chunk := s.recv(65536):
                body += chunk
        return body.decode(errors="replace").partition("\r\n\r\n")[2]

    def available(self) -> int:
        """How many proxies are polling the broker now (its /debug page)."""
        for line in self.debug_page().splitlines():
            if line.startswith("current snowflakes available:"):
                return int(line.rsplit(":", 1)[1])
        return 0

    def wait_available(self, n: int = 1, timeout: float = 30.0) -> None:
        """Until ``n`` proxies poll the broker, so a client's first request finds one
        (a client told "no proxies" waits 10 s before it asks again)."""
        deadline = time.monotonic() + timeout
        while (have := self.available()) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{have} of {n} proxies polling the broker after {timeout} s")
            time.sleep(0.1)

    def _start(self, node: str, argv: list[str], ready: str | None = None,
               env: dict[str, str] | None = None, name: str | None = None) -> LabProcess:
        name = name or node
        p = LabProcess(self.lab.ns(node), argv, name, self.out / f"{name}.log", env=env).start()
        self.procs.append(p)
        if ready:
            p.wait_log(ready, 30)
        return p

    def our_proxy(self, i: int, *extra: str) -> LabProcess:
        return self._start(f"proxy{i}", [
            sys.executable, "-m", "ptlab", "snowflake-proxy", "-broker", self.broker_url,
            "-relay", self.relay_url, "-allowed-relay-hostname-pattern",
            f"^{self.lab.addr('bridge')}$", "-allow-non-tls-relay", "-stun", NO_ROUTE_STUN,
            "-poll-interval", "1", "-nat-probe-server", "",
            "-unsafe-logging", *extra], name=f"our-proxy{i}")

    def debian_proxy(self, i: int) -> LabProcess:
        return self._start(f"proxy{i}", [
            "snowflake-proxy", "-broker", self.broker_url, "-relay", self.relay_url,
            "-allowed-relay-hostname-pattern", f"{self.lab.addr('bridge')}$",
            "-allow-non-tls-relay", "-stun", NO_ROUTE_STUN, "-verbose",
            "-summary-interval", "1h"], name=f"debian-proxy{i}")

    def nat_probe(self) -> LabProcess:
        """Our NAT probe service beside the broker (Tor's probetest exchange)."""
        return self._start("broker", [
            sys.executable, "-m", "transports.snowflake.natprobe", "--addr",
            f"{self.lab.addr('broker')}:{NAT_PROBE_PORT}", "--stun", NO_ROUTE_STUN],
            READY_PATTERN, name="natprobe")

    def upstream_proxy(self, binary: str, i: int, *extra: str) -> LabProcess:
        """Snowflake's current proxy (2.14: ``-summary-interval 0`` turns the summary off,
        ``-nat-retest-interval 0`` tests the NAT type once, at start)."""
        return self._start(f"proxy{i}", [
            binary, "-broker", self.broker_url, "-relay", self.relay_url,
            "-allowed-relay-hostname-pattern", f"^{self.lab.addr('bridge')}$",
            "-allow-non-tls-relay", "-stun", NO_ROUTE_STUN, "-verbose", "-unsafe-logging",
            "-summary-interval", "0", "-nat-retest-interval", "0", *extra],
            name=f"upstream-proxy{i}")

    def upstream_client(self, binary: str) -> int:
        """Snowflake's current client PT; its SOCKS port."""
        name = "upstream-client"
        p = self._start("client", [
            binary, "-url", self.broker_url, "-ice", NO_ROUTE_STUN,
            "-log", str(self.out / f"{name}-own.log"), "-unsafe-logging"],
            "CMETHODS DONE", self._pt_env(name), name=name)
        return _cmethod_port(p.log_text())

    def _pt_env(self, name: str) -> dict[str, str]:
        state = self.out / f"{name}-state"
        state.mkdir(exist_ok=True)
        return {"TOR_PT_MANAGED_TRANSPORT_VER": "1", "TOR_PT_CLIENT_TRANSPORTS": "snowflake",
                "TOR_PT_STATE_LOCATION": str(state)}

    def our_client(self) -> int:
        p = self._start("client", [sys.executable, "-m", "transports.pt"],
                        "CMETHODS DONE", self._pt_env("our-client"), name="our-client")
        return _cmethod_port(p.log_text())

    def debian_client(self, index: int | None = None) -> int:
        """Debian's client PT (``index`` names each of several); its SOCKS port."""
        name = "debian-client" if index is None else f"debian-client{index}"
        p = self._start("client", [
            "snowflake-client", "-url", self.broker_url, "-ice", NO_ROUTE_STUN,
            "-log", str(self.out / f"{name}-own.log")],
            "CMETHODS DONE", self._pt_env(name), name=name)
        return _cmethod_port(p.log_text())

    def lyrebird_client(self, binary: str) -> int:
        """lyrebird (Tor's current PT, built by scripts/setup --peers) as the client PT
        for snowflake; its SOCKS port. It takes the broker and ICE servers as SOCKS
        arguments, as tor passes a bridge line's (:func:`our_args`)."""
        p = self._start("client", [binary, "-enableLogging", "-logLevel", "INFO"],
                        "CMETHODS DONE", self._pt_env("lyrebird-client"),
                        name="lyrebird-client")
        return _cmethod_port(p.log_text())

    def attaches(self) -> list[dict]:
        return [json.loads(line) for line in self.bridge.log_text().splitlines()
                if count_events(line, "attach")]

    def close(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.data.close()


def wait_port(ns: str, addr: str, port: int, timeout: float = 30.0) -> None:
    """Until ``addr:port`` in namespace ``ns`` accepts a TCP connection."""
    deadline = time.monotonic() + timeout
    while True:
        with ns_socket(ns) as s:
            s.settimeout(1)
            try:
                s.connect((addr, port))
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nothing listens on {addr}:{port} after {timeout} s") \
                        from None
        time.sleep(0.1)


def _cmethod_port(log: str) -> int:
    for line in log.splitlines():
        if line.startswith("CMETHOD snowflake socks5"):
            return int(line.split()[-1].rsplit(":", 1)[1])
    raise AssertionError(f"no CMETHOD line in: {log[-500:]}")


async def socks_open(lab, port: int, args: dict[str, str] | None):
    sock = ns_socket(lab.ns("client"))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    await socks5.client_connect(reader, writer, "192.0.2.3", 1, args)
    return reader, writer


async def upload(reader, writer, n: int, seed: int = 5) -> float:
    """``U n``: n bytes up, checked by the server's SHA-256; the seconds taken."""
    t0 = time.monotonic()
    writer.write(f"U {n}\n".encode())
    h = hashlib.sha256()
    for chunk in stream_bytes(seed, n):
        h.update(chunk)
        writer.write(chunk)
        await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 120)
    assert line.strip().decode() == h.hexdigest(), "upload not byte-exact"
    return time.monotonic() - t0


async def download(reader, writer, n: int, seed: int = 6) -> float:
    """``D n seed``: n bytes down, checked against the same stream; the seconds taken."""
    t0 = time.monotonic()
    writer.write(f"D {n} {seed}\n".encode())
    want = hashlib.sha256(b"".join(stream_bytes(seed, n))).hexdigest()
    got = hashlib.sha256()
    left = n
    while left:
        chunk = await asyncio.wait_for(reader.read(min(left, 65536)), 120)
        assert chunk, f"stream ended with {left} bytes to go"
        got.update(chunk)
        left -= len(chunk)
    assert got.hexdigest() == want, "download not byte-exact"
    return time.monotonic() - t0


async def upload_and_download(reader, writer, n: int, seed: int = 5) -> float:
    """U then D on one stream; return the seconds taken."""
    return await upload(reader, writer, n, seed) + await download(reader, writer, n, seed + 1)


def our_args(rig: Rig, **extra: str) -> dict[str, str]:
    return {"url": rig.broker_url, "ice": NO_ROUTE_STUN, **extra}


def client_addresses(lab) -> set[str]:
    """The client's two addresses. A proxy's ?client_ip= is the first non-local
    candidate of the client's offer, and which family the client's ICE agent lists
    first varies from run to run (the lab is dual-stack): either is the client."""
    return {lab.addr("client"), lab.addr("client", v6=True)}
