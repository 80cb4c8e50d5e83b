"""Probing a suspected HTTPS front for a hidden tunnel: is it just a web server?

HTTPT (Frolov and Wustrow, FOCI 2020) and Tor's WebTunnel put a proxy
behind an ordinary web server that serves its site to everyone and proxies one
secret path. Their threat model is a censor that connects to the server itself,
with the name it saw in the ClientHello, and asks what a browser or a crawler
would: the front page, paths it guesses, and a WebSocket ``Upgrade`` on a path it
guesses. A front that answers all of that as a web server does gives it nothing;
one that resets, stays silent or answers in some other protocol stands out, as
the Frolov probes of NDSS 2020 single out servers that never answer.

No published measurement shows a censor probing WebTunnel bridges; this suite is
the papers' threat model, and the lab's check that our bridge holds up under it
(docs/censors/probing.md §6).

Each probe is one TLS connection (no certificate check: the censor does not need
to trust the site) carrying one HTTP/1.1 request. Its answer is parsed as far as
HTTP allows: status line, header fields, and a body bounded by
``Content-Length``, chunked coding, or the close.
"""

from __future__ import annotations

import asyncio
import random
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ptcommon.tlshello import NeedMore, parse_client_hello

from .observe import SockFactory

WEB_SERVER = "https-web-server"  # every probe got an HTTP answer over TLS
NOT_WEB = "https-not-web"  # TLS worked, and some probe got no HTTP answer
NO_TLS = "https-no-tls"  # no TLS handshake completed
UNREACHABLE = "unreachable"

MAX_HEAD = 16 * 1024
MAX_BODY = 256 * 1024


@dataclass(frozen=True)
class HttpsProbe:
    name: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()

    def request(self, host: str) -> bytes:
        lines = [f"GET {self.path} HTTP/1.1", f"Host: {host}",
                 "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 "
                 "Firefox/128.0", "Accept: */*"]
        lines += [f"{k}: {v}" for k, v in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def suite(seed: int = 0, guesses: int = 2) -> list[HttpsProbe]:
    """``GET /``, ``guesses`` random paths, and an ``Upgrade: websocket`` on a
    random path (with the RFC 6455 handshake fields a browser sends)."""
    rng = random.Random(f"https-probes-{seed}")

    def guess() -> str:
        return "/" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789")
                             for _ in range(rng.randrange(6, 25)))

    probes = [HttpsProbe("root", "/")]
    probes += [HttpsProbe(f"guess-{i + 1}", guess()) for i in range(guesses)]
    key = rng.randbytes(16).hex()[:22] + "=="
    probes.append(HttpsProbe("upgrade-guess", guess(), (
        ("Connection", "Upgrade"), ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"), ("Sec-WebSocket-Key", key))))
    return probes


@dataclass
class HttpsAnswer:
    """What one probe saw. ``status`` is None when no HTTP status line came back."""

    probe: str
    path: str
    connected: bool = False
    tls: bool = False
    status: int | None = None
    status_line: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    error: str | None = None
    after_s: float | None = None
    source: str | None = None  # the prober's address for this probe

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def comparable(self, ignore: Sequence[str] = ("date",)) -> tuple[Any, ...]:
        """Status line, header fields in order (less ``ignore``, which change with
        the clock) and body: what must match between two servers byte for byte."""
        skip = {h.lower() for h in ignore}
        return (self.tls, self.status_line,
                tuple((k, v) for k, v in self.headers if k.lower() not in skip), self.body)

    def to_json(self) -> dict[str, Any]:
        return {"probe": self.probe, "path": self.path, "connected": self.connected,
                "tls": self.tls,
                "status": self.status, "status_line": self.status_line,
                "headers": self.headers, "body_len": len(self.body), "error": self.error,
                "after_s": self.after_s, "source": self.source}


def sni_of(first_payload: bytes) -> str | None:
    """The server name in the suspicious flow's ClientHello, if the first payload holds
    all of one (a long hello spans several segments: the censor then sends the name
    its detector read, and without it the probes name no server)."""
    try:
        hello = parse_client_hello(first_payload) if first_payload else None
    except (NeedMore, ValueError):
        return None
    return hello.sni if hello else None


def _client_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


async def _read_answer(reader: asyncio.StreamReader, ans: HttpsAnswer) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        ans.error = "not an HTTP status line"
        return
    ans.status_line, ans.status = lines[0], int(parts[1])
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            ans.error = "malformed header field"
            return
        ans.headers.append((name, value.strip()))
    if ans.status in (101, 204, 304) or 100 <= ans.status < 200:
        return
    length, chunked = ans.header("content-length"), ans.header("transfer-encoding")
    if chunked and "chunked" in chunked.lower():
        body = bytearray()
        while len(body) < MAX_BODY:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                break
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        ans.body = bytes(body)
    elif length is not None and length.isdigit():
        ans.body = await reader.readexactly(min(int(length), MAX_BODY))
    else:
        ans.body = await reader.read(MAX_BODY)


async def ask(host: str, port: int, sni: str | None, probe: HttpsProbe, watch_s: float,
              sock_factory: SockFactory | None = None,
              connect_timeout: float = 5.0) -> HttpsAnswer:
    """One probe: a TLS connection with ``sni``, one request, its answer."""
    ans = HttpsAnswer(probe.name, probe.path)
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    writer = None
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _, _, _, addr = infos[0]
        sock = sock_factory(family) if sock_factory else socket.socket(family,
                                                                       socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, addr), connect_timeout)
        except BaseException:
            sock.close()
            raise
        ans.connected = True
        ans.source = sock.getsockname()[0]
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            sock=sock, ssl=_client_context(), server_hostname=sni or None,
            limit=MAX_HEAD), watch_s)
        ans.tls = True
        writer.write(probe.request(sni or host))
        await asyncio.wait_for(_read_answer(reader, ans), watch_s)
    except TimeoutError:
        ans.error = "no answer within the watch" if ans.tls else "no TLS handshake in time"
    except ssl.SSLError as exc:
        ans.error = f"TLS: {exc.reason or exc}"
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        ans.error = f"truncated or malformed answer: {type(exc).__name__}"
    except OSError as exc:
        ans.error = f"{type(exc).__name__}: {exc.strerror or exc}"
    finally:
        ans.after_s = round(time.monotonic() - t0, 6)
        if writer is not None:
            writer.close()
    return ans


async def investigate(host: str, port: int, first_payload: bytes = b"", *,
                      sni: str | None = None, watch_s: float = 5.0, seed: int = 0,
                      sock_factory: SockFactory | None = None) -> list[HttpsAnswer]:
    """Every probe of :func:`suite`, one after the other (as a crawler would), with
    the SNI of the suspicious flow unless ``sni`` is given."""
    name = sni if sni is not None else sni_of(first_payload)
    return [await ask(host, port, name, p, watch_s, sock_factory) for p in suite(seed)]


def classify(answers: Sequence[HttpsAnswer]) -> str:
    """The suite's verdict: a web server, TLS with something else behind it, or no TLS."""
    if not answers:
        return UNREACHABLE
    if not any(a.tls for a in answers):
        return NO_TLS if any(a.connected for a in answers) else UNREACHABLE
    if all(a.tls and a.status is not None and a.error is None for a in answers):
        return WEB_SERVER
    return NOT_WEB
