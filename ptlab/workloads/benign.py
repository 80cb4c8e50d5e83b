"""The benign background mix: ordinary flows from the client, to measure collateral damage.

A censor is judged not only by what it blocks but by what it breaks on the
way (docs/architecture.md §3.5, the result row). This workload runs a handful of real,
innocent flows from the client namespace - HTTPS (TLS 1.3, certificate checked
against the lab CA), plain HTTP, DNS over UDP and TCP, SSH, a binary TCP
protocol, a UDP echo and a QUIC echo - all at once, and records which got through. A flow
that times out, is reset or returns the wrong bytes counts as blocked.

Every flow except SSH uses sockets made inside the client namespace
(netns.nsenter.ns_socket), so the test process itself needs no subprocess;
SSH runs the real OpenSSH client under ``ip netns exec``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import random
import secrets
import signal
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

import dns.message
import dns.rcode
import dns.rdatatype

from netns.nsenter import ns_socket
from ptlab.services.benign import binary_frame
from ptlab.services.netutil import family_of, format_hostport
from ptlab.services.sshd import SshdFiles, ssh_client_argv

from ..common.flowroles import BENIGN_PORTS, TCP, UDP

MAX_HTTP_RESPONSE = 1 << 20
SSH_COMMAND = "echo ptlab-benign-ok"
SSH_EXPECT = b"ptlab-benign-ok"


@dataclass
class BenignTargets:
    """Where the benign flows go. Empty or None fields are skipped."""

    # (ip, port, sni/host name, ca_path)
    https: list[tuple[str, int, str, str]] = field(default_factory=list)
    # (ip, port, host)
    http: list[tuple[str, int, str]] = field(default_factory=list)
    dns: tuple[str, int] | None = None
    dns_name: str = "web.lab"
    dns_type: str = "A"
    ssh: tuple[str, int] | None = None
    binary: tuple[str, int] | None = None
    udp: tuple[str, int] | None = None  # the UDP echo
    # (ip, port, sni, ca_path): QUIC v1 echoes (ptlab.services.quicecho)
    quic: list[tuple[str, int, str, str]] = field(default_factory=list)
    # More binary-protocol servers (the ISP's own servers beside Conjure's phantoms).
    binary_extra: list[tuple[str, int]] = field(default_factory=list)

    def destinations(self) -> dict[tuple[int, str, int], str]:
        """(IP protocol, address, port) -> the benign class of flows going there."""
        out: dict[tuple[int, str, int], str] = {}
        for ip, port, *_ in self.https:
            out[(TCP, ip, port)] = "https"
        for ip, port, *_ in self.http:
            out[(TCP, ip, port)] = "http"
        if self.dns is not None:
            out[(UDP, *self.dns)] = "dns-udp"
            out[(TCP, *self.dns)] = "dns-tcp"
        if self.ssh is not None:
            out[(TCP, *self.ssh)] = "ssh"
        for ip, port in ([self.binary] if self.binary else []) + self.binary_extra:
            out[(TCP, ip, port)] = "binary"
        if self.udp is not None:
            out[(UDP, *self.udp)] = "udp-echo"
        for ip, port, *_ in self.quic:
            out[(UDP, ip, port)] = "quic"
        return out

    def unbound_destinations(self) -> list[tuple[int, str, int]]:
        """Destinations whose flows cannot bind a benign source port (SSH runs the
        OpenSSH client); no transport goes there."""
        return [(TCP, *self.ssh)] if self.ssh is not None else []


@dataclass
class BenignResult:
    """One benign flow's outcome."""

    kind: str
    target: str
    ok: bool
    error: str | None
    seconds: float
    started: float = 0.0  # epoch seconds


class FlowError(Exception):
    """A flow that got an answer, but the wrong one."""


def collateral_share(results: list[BenignResult]) -> float:
    """The share of benign flows that did not get through (0.0 when there were none)."""
    if not results:
        return 0.0
    return sum(1 for r in results if not r.ok) / len(results)


# --- sockets in the client namespace ---------------------------------------------


def _bind_benign_port(sock: socket.socket) -> None:
    """Bind to a free port of BENIGN_PORTS, so the censor's events about this flow
    can be told from the transport's (ptlab.common.flowroles)."""
    any_addr = "::" if sock.family == socket.AF_INET6 else "0.0.0.0"
    for _ in range(64):
        try:
            sock.bind((any_addr, _rng.choice(BENIGN_PORTS)))
            return
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, "no free port in the benign range")


_rng = random.Random()


async def connect_in(ns: str | None, ip: str, port: int,
                     type: int = socket.SOCK_STREAM) -> socket.socket:
    """A socket in namespace `ns`, from a port of BENIGN_PORTS, connected (TCP) or
    associated (UDP) to ip:port."""
    loop = asyncio.get_running_loop()
    sock = await asyncio.to_thread(ns_socket, ns, family_of(ip), type)
    sock.setblocking(False)
    try:
        _bind_benign_port(sock)
        await loop.sock_connect(sock, (ip, port))
    except BaseException:
        sock.close()
        raise
    return sock


async def _udp_exchange(ns: str | None, ip: str, port: int, payload: bytes, timeout: float,
                        accept: Callable[[bytes], bool]) -> bytes:
    """Send a datagram, resending every third of `timeout`, until `accept` likes a reply."""
    loop = asyncio.get_running_loop()
    sock = await connect_in(ns, ip, port, socket.SOCK_DGRAM)
    try:
        interval = max(timeout / 3, 0.05)
        while True:
            await loop.sock_sendall(sock, payload)
            try:
                async with asyncio.timeout(interval):
                    while True:
                        data = await loop.sock_recv(sock, 65535)
                        if accept(data):
                            return data
            except TimeoutError:
                continue  # resend; the caller's overall timeout ends the loop
    finally:
        sock.close()


# --- flows ---------------------------------------------------------------------


async def _http_get(ns: str | None, ip: str, port: int, host: str,
                    ctx: ssl.SSLContext | None) -> None:
    sock = await connect_in(ns, ip, port)
    reader, writer = await asyncio.open_connection(
        sock=sock, ssl=ctx, server_hostname=host if ctx else None,
        ssl_handshake_timeout=None if ctx is None else 60.0,
    )
    try:
        if ctx is not None:
            version = writer.get_extra_info("ssl_object").version()
            if version != "TLSv1.3":
                raise FlowError(f"negotiated {version}, not TLSv1.3")
        writer.write(
            f"GET / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: ptlab-benign\r\n"
            f"Accept: */*\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise FlowError(f"not an HTTP response: {lines[0][:60]!r}")
        status = int(parts[1])
        length = None
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            if k.strip().lower() == "content-length" and v.strip().isdigit():
                length = int(v.strip())
        if length is not None:
            await reader.readexactly(min(length, MAX_HTTP_RESPONSE))
        else:
            # Until close; an unclean TLS close after the body is not a block.
            with contextlib.suppress(ssl.SSLError, ConnectionError, asyncio.IncompleteReadError):
                while await reader.read(65536):
                    pass
        if not 200 <= status < 400:
            raise FlowError(f"HTTP {status}")
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _tls_context(ca_path: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_path)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    return ctx


async def _dns_udp(ns: str | None, ip: str, port: int, name: str, rdtype: str,
                   timeout: float) -> None:
    query = dns.message.make_query(name, rdtype)

    def matches(data: bytes) -> bool:
        return len(data) >= 2 and data[:2] == query.to_wire()[:2]

    data = await _udp_exchange(ns, ip, port, query.to_wire(), timeout, matches)
    _check_dns(query, dns.message.from_wire(data))


async def dns_over_tcp(ns: str | None, ip: str, port: int, name: str, rdtype: str) -> None:
    """One DNS query over TCP (RFC 7766 framing); FlowError unless the answer matches."""
    query = dns.message.make_query(name, rdtype)
    wire = query.to_wire()
    sock = await connect_in(ns, ip, port)
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        writer.write(struct.pack("!H", len(wire)) + wire)
        await writer.drain()
        (length,) = struct.unpack("!H", await reader.readexactly(2))
        _check_dns(query, dns.message.from_wire(await reader.readexactly(length)))
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _check_dns(query: dns.message.Message, resp: dns.message.Message) -> None:
    if not query.is_response(resp):
        raise FlowError("DNS answer does not match the query")
    if resp.rcode() != dns.rcode.NOERROR:
        raise FlowError(f"DNS {dns.rcode.to_text(resp.rcode())}")
    want = query.question[0].rdtype
    if not any(rr.rdtype == want for rr in resp.answer):
        raise FlowError(f"DNS answer has no {dns.rdatatype.to_text(want)} record")


async def binary_exchange(ns: str | None, ip: str, port: int) -> None:
    """1 KiB of random bytes to the binary server, which must answer their SHA-256:
    high-entropy benign traffic, what an entropy rule is most likely to misjudge."""
    payload = secrets.token_bytes(1024)
    sock = await connect_in(ns, ip, port)
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        writer.write(binary_frame(payload))
        await writer.drain()
        if await reader.readexactly(32) != hashlib.sha256(payload).digest():
            raise FlowError("wrong digest from the binary server")
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _udp_echo(ns: str | None, ip: str, port: int, timeout: float) -> None:
    payload = secrets.token_bytes(200)
    await _udp_exchange(ns, ip, port, payload, timeout, lambda d: d == payload)


async def quic_echo(ns: str | None, ip: str, port: int, sni: str, ca: str,
                    size: int = 3000) -> None:
    """A QUIC v1 connection naming `sni` (certificate checked against `ca`), one
    stream of `size` random bytes echoed back intact. Its Initial is padded to
    1,200 bytes, as every QUIC client's is (RFC 9000 §14.1)."""
    from aioquic.asyncio import QuicConnectionProtocol
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.connection import QuicConnection

    from ptlab.services.quicecho import ALPN

    cfg = QuicConfiguration(is_client=True, alpn_protocols=ALPN, server_name=sni)
    cfg.load_verify_locations(ca)
    loop = asyncio.get_running_loop()
    sock = await asyncio.to_thread(ns_socket, ns, family_of(ip), socket.SOCK_DGRAM)
    sock.setblocking(False)
    try:
        _bind_benign_port(sock)
        transport, proto = await loop.create_datagram_endpoint(
            lambda: QuicConnectionProtocol(QuicConnection(configuration=cfg)), sock=sock)
    except BaseException:
        sock.close()
        raise
    try:
        proto.connect((ip, port))
        await proto.wait_connected()
        reader, writer = await proto.create_stream()
        payload = secrets.token_bytes(size)
        writer.write(payload)
        writer.write_eof()
        got = await reader.read()
        if got != payload:
            raise FlowError(f"quic echo: {len(got)} bytes back of {size}, or altered")
    finally:
        proto.close()
        transport.close()


async def ssh_session(ns: str | None, ip: str, port: int, files: SshdFiles | None,
                      timeout: float) -> None:
    """A real OpenSSH login to the lab's sshd that runs one command and checks its output."""
    if files is None:
        raise FlowError("no ssh client key given")
    argv = [*(["ip", "netns", "exec", ns] if ns else []),
            *ssh_client_argv(files, ip, port, SSH_COMMAND, connect_timeout=timeout)]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )
    try:
        out, err = await proc.communicate()
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        raise
    if proc.returncode != 0 or SSH_EXPECT not in out:
        msg = err.decode(errors="replace").strip().splitlines()
        raise FlowError(f"ssh exit {proc.returncode}: {msg[-1] if msg else 'no output'}")


# --- the mix ---------------------------------------------------------------------


async def _https_get(ns: str | None, ip: str, port: int, host: str, ca: str) -> None:
    """An HTTPS GET whose TLS context is built inside the flow's timing and error
    handling: a CA that fails to load is that flow's failure, not the mix's."""
    await _http_get(ns, ip, port, host, _tls_context(ca))


async def _timed(kind: str, target: str, timeout: float,
                 make: Callable[[], Awaitable[None]]) -> BenignResult:
    start, started = time.monotonic(), round(time.time(), 6)
    error: str | None = None
    try:
        async with asyncio.timeout(timeout):
            await make()
    except TimeoutError:
        error = f"timeout after {timeout:g}s"
    except FlowError as exc:
        error = str(exc)
    except ssl.SSLCertVerificationError as exc:
        error = f"certificate: {exc.verify_message or exc}"
    except Exception as exc:  # reset, refused, garbled: one flow's failure, never the mix's
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return BenignResult(kind, target, error is None, error, round(time.monotonic() - start, 4),
                        started)


async def run_benign_mix(client_ns: str | None, targets: BenignTargets, timeout: float = 3.0,
                         ssh: SshdFiles | None = None) -> list[BenignResult]:
    """Run every configured benign flow from `client_ns` concurrently; one result each."""
    jobs: list[Awaitable[BenignResult]] = []
    ns = client_ns
    for ip, port, host, ca in targets.https:
        jobs.append(_timed("https", f"{host}@{format_hostport(ip, port)}", timeout,
                           partial(_https_get, ns, ip, port, host, ca)))
    for ip, port, host in targets.http:
        jobs.append(_timed("http", f"{host}@{format_hostport(ip, port)}", timeout,
                           partial(_http_get, ns, ip, port, host, None)))
    if targets.dns is not None:
        ip, port = targets.dns
        name, rdtype = targets.dns_name, targets.dns_type
        where = f"{name}@{format_hostport(ip, port)}"
        jobs.append(_timed("dns-udp", where, timeout,
                           lambda: _dns_udp(ns, ip, port, name, rdtype, timeout)))
        jobs.append(_timed("dns-tcp", where, timeout,
                           lambda: dns_over_tcp(ns, ip, port, name, rdtype)))
    if targets.ssh is not None:
        sip, sport = targets.ssh
        jobs.append(_timed("ssh", format_hostport(sip, sport), timeout,
                           lambda: ssh_session(ns, sip, sport, ssh, timeout)))
    for bip, bport in ([targets.binary] if targets.binary else []) + targets.binary_extra:
        jobs.append(_timed("binary", format_hostport(bip, bport), timeout,
                           partial(binary_exchange, ns, bip, bport)))
    if targets.udp is not None:
        uip, uport = targets.udp
        jobs.append(_timed("udp-echo", format_hostport(uip, uport), timeout,
                           lambda: _udp_echo(ns, uip, uport, timeout)))
    for qip, qport, sni, ca in targets.quic:
        jobs.append(_timed("quic", f"{sni}@{format_hostport(qip, qport)}", timeout,
                           partial(quic_echo, ns, qip, qport, sni, ca)))
    return list(await asyncio.gather(*jobs))
