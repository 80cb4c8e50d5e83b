"""The meek client: one TCP stream carried by a serial chain of HTTP POSTs.

Behaviour follows meek-client and obfs4proxy's meek_lite
(docs/transports/meek.md §2, §4, §6):

* arguments ``url=`` (required, http or https) and ``front=`` (optional): the
  connection, DNS and TLS SNI go to ``front`` (host and port), the Host header
  names the ``url`` host;
* one session per stream, ``X-Session-Id`` the hex of 16 bytes of
  SHA-256(64 random bytes) as meek_lite makes it;
* strictly serial round trips: what the application wrote (coalesced, at most
  64 KiB) goes in the body, the response body (at most 64 KiB) goes back;
* the polling schedule: after a round trip that moved bytes, poll again at
  once; after an empty one, wait 100 ms, then ×1.5 per empty round trip up
  to 5 s; application data cuts the wait short;
* a non-200 answer is retried, up to 10 tries 30 s apart (the same body),
  unless the application closes its end meanwhile, which ends the wait at
  once (ours); a transport error ends the session.

TLS (``tls=``): ``python`` uses Python's ssl through aiohttp; any other value
names a curl_cffi browser profile (``chrome``, ``firefox``, ``safari``, ...)
whose ClientHello the request then carries (our addition, in the spirit of
meek's ``utls=``). Timers take an injectable sleep for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import aiohttp.abc

from transports.base import Streams, TransportError
from transports.common.fronting import FrontingError, fronted
from transports.common.httpbody import read_limited
from transports.common.pipes import spawn, stream_pair

if TYPE_CHECKING:  # types only: ResolveResult is newer than our aiohttp floor (3.9)
    from aiohttp.abc import ResolveResult
    from curl_cffi.requests import AsyncSession, Response

MAX_PAYLOAD = 0x10000
INIT_POLL_S, MAX_POLL_S, POLL_MULTIPLIER = 0.100, 5.0, 1.5
MAX_TRIES, RETRY_DELAY_S = 10, 30.0
TLS_PYTHON = "python"


def new_session_id() -> str:
    """meek_lite's id: hex of the first 16 bytes of SHA-256 over 64 random bytes."""
    return hashlib.sha256(os.urandom(64)).digest()[:16].hex()


def next_interval(current: float, moved: bool) -> float:
    """The wait before the next poll (meek-client's schedule)."""
    if moved:
        return 0.0
    if current == 0.0:
        return INIT_POLL_S
    return min(current * POLL_MULTIPLIER, MAX_POLL_S)


@dataclass(frozen=True)
class MeekArgs:
    """A bridge line's meek arguments, resolved into where to connect and what to say."""

    url: str  # what the request line goes to (front host swapped in)
    host: str  # the Host header
    tls: str = TLS_PYTHON

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> MeekArgs:
        url = args.get("url")
        if not url:
            raise TransportError("meek: missing argument 'url'")
        try:
            request_url, host = fronted(url, args.get("front", ""))
        except FrontingError as exc:
            raise TransportError(f"meek: {exc}") from None
        tls = args.get("tls", TLS_PYTHON).strip().lower() or TLS_PYTHON
        return cls(request_url, host, tls)


class RoundTripper(Protocol):
    async def post(self, body: bytes, session_id: str) -> tuple[int, bytes]: ...
    async def close(self) -> None: ...


class _StaticResolver(aiohttp.abc.AbstractResolver):
    """Names pinned to addresses (fingerprint capture on loopback), else the system's."""

    def __init__(self, pinned: Mapping[str, str]) -> None:
        self.pinned = dict(pinned)
        self.fallback = aiohttp.ThreadedResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host in self.pinned:
            addr = self.pinned[host]
            fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
            return [{"hostname": host, "host": addr, "port": port, "family": fam,
                     "proto": 0, "flags": socket.AI_NUMERICHOST}]
        return await self.fallback.resolve(host, port, family)

    async def close(self) -> None:
        await self.fallback.close()


class AiohttpRoundTripper:
    """POSTs with Python's ssl (the default context: system CAs, or SSL_CERT_FILE)."""

    def __init__(self, args: MeekArgs, ssl_context: ssl.SSLContext | None = None,
                 resolve: Mapping[str, str] | None = None) -> None:
        self.args = args
        connector = aiohttp.TCPConnector(
            limit=1, ssl=ssl_context if ssl_context else True,
            resolver=_StaticResolver(resolve) if resolve else None)
        self.http = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60))

    async def post(self, body: bytes, session_id: str) -> tuple[int, bytes]:
        headers = {"Host": self.args.host, "X-Session-Id": session_id}
        async with self.http.post(self.args.url, data=body, headers=headers,
                                  allow_redirects=False) as r:
            data = await read_limited(r.content, MAX_PAYLOAD)
            return r.status, data

    async def close(self) -> None:
        await self.http.close()


class CurlRoundTripper:
    """POSTs through curl_cffi with a browser's ClientHello (``impersonate``)."""

    def __init__(self, args: MeekArgs, cafile: str | None = None,
                 resolve: Mapping[str, str] | None = None) -> None:
        try:
            from curl_cffi import CurlOpt
            from curl_cffi.requests import AsyncSession
        except ImportError as exc:  # pragma: no cover - a dependency of ptlab
            raise TransportError(f"meek: tls={args.tls} needs curl_cffi ({exc})") from None
        self.args = args
        verify: Any = cafile or os.environ.get("SSL_CERT_FILE") or True
        options: dict[Any, Any] = {}
        if resolve:
            port = urlsplit(args.url).port or 443
            options[CurlOpt.RESOLVE] = [f"{h}:{port}:{a}" for h, a in resolve.items()]
        try:
            self.http: AsyncSession[Response] = AsyncSession(
                impersonate=args.tls, verify=verify, timeout=60, max_clients=1,
                allow_redirects=False, curl_options=options or None)
        except Exception as exc:  # noqa: BLE001 - curl_cffi names a bad profile its own way
            raise TransportError(f"meek: unknown tls profile {args.tls!r}: {exc}") from None

    async def post(self, body: bytes, session_id: str) -> tuple[int, bytes]:
        headers = {"Host": self.args.host, "X-Session-Id": session_id}
        try:
            r = await self.http.post(self.args.url, data=body, headers=headers)
        except Exception as exc:  # noqa: BLE001 - curl errors become connection errors
            raise ConnectionError(f"meek: {exc}") from exc
        return r.status_code, r.content[:MAX_PAYLOAD]

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.http.close()


def round_tripper(args: MeekArgs, resolve: Mapping[str, str] | None = None) -> RoundTripper:
    if args.tls == TLS_PYTHON:
        return AiohttpRoundTripper(args, resolve=resolve)
    return CurlRoundTripper(args, resolve=resolve)


class MeekSession:
    """Moves bytes between a local socket and the meek server until either ends."""

    def __init__(self, rt: RoundTripper, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 retry_delay_s: float = RETRY_DELAY_S) -> None:
        self.rt, self.reader, self.writer = rt, reader, writer
        self.sleep = sleep
        self.retry_delay_s = retry_delay_s
        self.session_id = new_session_id()
        self.pending = bytearray()
        self.local_eof = False
        self._data = asyncio.Event()
        self._closed = asyncio.Event()  # the application's EOF (local_eof), to wait on
        self._room = asyncio.Event()
        self._room.set()
        self.round_trips = 0
        self.error: str | None = None

    async def _read_local(self) -> None:
        """Coalesce what the application writes, holding at most 64 KiB."""
        while True:
            await self._room.wait()
            chunk = await self.reader.read(MAX_PAYLOAD)
            if not chunk:
                self.local_eof = True
                self._closed.set()
                self._data.set()
                return
            self.pending += chunk
            self._data.set()
            if len(self.pending) >= MAX_PAYLOAD:
                self._room.clear()

    async def _wait_for_data(self, seconds: float) -> None:
        if self.pending or self.local_eof or seconds <= 0:
            return
        self._data.clear()
        waiter = asyncio.ensure_future(self._data.wait())
        timer = asyncio.ensure_future(self.sleep(seconds))
        try:
            await asyncio.wait({waiter, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            timer.cancel()

    async def _retry_delay(self) -> None:
        """The wait before a retry, cut short when the application closes with
        nothing left to send: nobody waits for the answer any more (our server
        answers 500 for good once the upstream has ended, so without this every
        session would outlive its application by the whole delay)."""
        timer = asyncio.ensure_future(self.sleep(self.retry_delay_s))
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({timer, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not timer.done() and self.pending:
                await timer  # closed, but with data still to deliver: the full delay
        finally:
            timer.cancel()
            closed.cancel()

    async def _round_trip(self, body: bytes) -> bytes:
        for attempt in range(MAX_TRIES):
            status, data = await self.rt.post(body, self.session_id)
            self.round_trips += 1
            if status == 200:
                return data
            if attempt + 1 < MAX_TRIES:
                await self._retry_delay()
                if self.local_eof and not self.pending:
                    # Ours: the application has gone, so nobody waits for the answer.
                    raise ConnectionError(f"meek: HTTP {status}, and the application closed")
        raise ConnectionError(f"meek: the server answered HTTP {status} {MAX_TRIES} times")

    async def run(self) -> None:
        reading = asyncio.create_task(self._read_local())
        interval = INIT_POLL_S  # as meek-client: the first request waits for data or 100 ms
        try:
            while True:
                await self._wait_for_data(interval)
                if self.local_eof and not self.pending:
                    return
                body = bytes(self.pending[:MAX_PAYLOAD])
                del self.pending[:len(body)]
                self._room.set()
                data = await self._round_trip(body)
                if data:
                    self.writer.write(data)
                    await self.writer.drain()
                interval = next_interval(interval, bool(body or data))
        except (OSError, aiohttp.ClientError, TimeoutError) as exc:
            self.error = str(exc) or type(exc).__name__
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            self.writer.close()


class MeekClientFactory:
    """``dial`` returns the application's end of a socket pair; a :class:`MeekSession`
    carries the other end over HTTP."""

    def __init__(self, args: MeekArgs,
                 make_rt: Callable[[MeekArgs], RoundTripper] = round_tripper) -> None:
        self.args = args
        self.make_rt = make_rt

    async def dial(self, host: str, port: int) -> Streams:  # noqa: ARG002 - meek ignores them
        rt = self.make_rt(self.args)
        (reader, writer), inner = await stream_pair(MAX_PAYLOAD, 1 << 20)
        session = MeekSession(rt, reader, writer)

        async def run() -> None:
            try:
                await session.run()
            finally:
                await rt.close()

        spawn(run())
        return inner
