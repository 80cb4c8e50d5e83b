"""Live censor tests: one small lab per session, a censor process per test.

Traffic comes from sockets this test process opens inside the lab's
namespaces (``netns.nsenter.ns_socket``): an echo server on the bridge node
and clients on the client node, so every packet crosses the real censor
router and its NFQUEUE datapath.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netns.nsenter import ns_socket
from ptcommon.events import READY_PATTERN
from tests.support.netlab import default_lab_or_skip


@pytest.fixture(scope="session")
def censor_lab(tmp_path_factory) -> Iterator[Any]:
    yield from default_lab_or_skip(proxies=0)


class EchoServer:
    """Echo (or sink, or reply-with) servers on several ports of one lab node."""

    def __init__(self, ns: str, addr: str, ports: list[int], proto: str = "tcp",
                 banner: bytes = b"", sink: bool = False) -> None:
        self.addr = addr
        self.banner = banner
        self.sink = sink
        self.ports = ports
        self.stop = threading.Event()
        self.socks: list[socket.socket] = []
        self.received: list[tuple[int, bytes]] = []
        for port in ports:
            typ = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
            s = ns_socket(ns, socket.AF_INET, typ)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
            if proto == "tcp":
                s.listen(64)
            s.settimeout(0.2)
            self.socks.append(s)
            target = self._tcp if proto == "tcp" else self._udp
            threading.Thread(target=target, args=(s, port), daemon=True).start()

    def _tcp(self, s: socket.socket, port: int) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = s.accept()
            except OSError:
                continue
            threading.Thread(target=self._echo, args=(conn, port), daemon=True).start()

    def _echo(self, conn: socket.socket, port: int) -> None:
        conn.settimeout(5)
        with conn:
            try:
                if self.sink:  # read and never answer (a server with a replay filter
                    while conn.recv(65536):  # that never speaks first looks the same)
                        pass
                    return
                if self.banner:  # server speaks first, and again a little later
                    conn.sendall(self.banner)
                    threading.Timer(0.5, self._later, (conn,)).start()
                while data := conn.recv(65536):
                    self.received.append((port, data))
                    conn.sendall(data)
            except OSError:
                pass

    def _later(self, conn: socket.socket) -> None:
        try:
            conn.sendall(self.banner)
        except OSError:
            pass

    def _udp(self, s: socket.socket, port: int) -> None:
        while not self.stop.is_set():
            try:
                data, peer = s.recvfrom(65536)
            except OSError:
                continue
            self.received.append((port, data))
            s.sendto(data, peer)

    def close(self) -> None:
        self.stop.set()
        for s in self.socks:
            s.close()


class Censor:
    """A censor process in the lab's censor namespace, run for one test."""

    def __init__(self, lab: Any, out: Path, profile: str, overrides: dict | None = None,
                 seed: int = 0, prober: str | None = None) -> None:
        from netns.process import LabProcess

        cfg = {"profile": profile, "overrides": overrides or {},
               "inside": lab.iface("censor", "client"), "outside": lab.iface("censor", "inet"),
               "seed": seed}
        if prober:
            cfg["prober"] = prober
        path = out / f"censor-{profile}.json"
        path.write_text(json.dumps(cfg))
        self.proc = LabProcess(lab.ns("censor"), [sys.executable, "-m", "censor_sim", "--config",
                                                  str(path)], "censor", out / "censor.log")
        self.proc.start()
        self.proc.wait_log(READY_PATTERN, timeout=20)

    def events(self, name: str | None = None) -> list[dict]:
        out = []
        for line in self.proc.log_text().splitlines():
            if line.startswith("{"):
                e = json.loads(line)
                if name is None or e.get("event") == name:
                    out.append(e)
        return out

    def stop(self) -> dict:
        self.proc.stop(timeout=5)
        final = self.events("counters")
        return final[-1] if final else {}


@pytest.fixture
def run_censor(censor_lab, tmp_path):
    started: list[Censor] = []

    def start(profile: str, overrides: dict | None = None, **kw: Any) -> Censor:
        c = Censor(censor_lab, tmp_path, profile, overrides, **kw)
        started.append(c)
        return c

    yield start
    for c in started:
        if c.proc.running():
            c.stop()


@pytest.fixture
def echo(censor_lab):
    servers: list[EchoServer] = []

    def start(ports: list[int], proto: str = "tcp", role: str = "bridge",
              banner: bytes = b"", sink: bool = False) -> EchoServer:
        s = EchoServer(censor_lab.ns(role), censor_lab.addr(role), ports, proto, banner, sink)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def tcp_exchange(lab: Any, server: str, port: int, payloads: list[bytes],
                 timeout: float = 1.5, sport: int = 0) -> str:
    """Connect from the client node, send each payload and read its echo.

    Returns "ok", "connect-timeout", "timeout" (a payload never came back),
    "reset" or "refused".
    """
    s = ns_socket(lab.ns("client"))
    s.settimeout(timeout)
    try:
        if sport:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", sport))
        try:
            s.connect((server, port))
        except TimeoutError:
            return "connect-timeout"
        except ConnectionRefusedError:
            return "refused"
        for p in payloads:
            s.sendall(p)
            got = b""
            deadline = time.monotonic() + timeout
            while len(got) < len(p):
                s.settimeout(max(deadline - time.monotonic(), 0.01))
                chunk = s.recv(65536)
                if not chunk:
                    return "reset"
                got += chunk
        return "ok"
    except TimeoutError:
        return "timeout"
    except (ConnectionResetError, BrokenPipeError):
        return "reset"
    finally:
        s.close()


def udp_exchange(lab: Any, server: str, port: int, payload: bytes, timeout: float = 1.0,
                 sport: int = 0) -> bool:
    s = ns_socket(lab.ns("client"), socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        if sport:
            s.bind(("0.0.0.0", sport))
        s.sendto(payload, (server, port))
        data, _ = s.recvfrom(65536)
        return data == payload
    except TimeoutError:
        return False
    finally:
        s.close()


@pytest.fixture
def tcp(censor_lab):
    """tcp(server, port, payloads, timeout=..., sport=...) from the client node."""
    return lambda *a, **kw: tcp_exchange(censor_lab, *a, **kw)


@pytest.fixture
def udp(censor_lab):
    return lambda *a, **kw: udp_exchange(censor_lab, *a, **kw)
