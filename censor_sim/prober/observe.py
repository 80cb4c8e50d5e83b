"""Send one probe and watch how the server reacts: data, FIN, RST, or nothing.

Frolov et al. (NDSS 2020, §IV) fingerprint servers that never answer by *how* and
*when* they close: a FIN means the application closed with everything read, a RST
means it closed with unread bytes in its receive buffer (or aborted), and TIMEOUT
means it kept the connection open. All of this is visible from userspace on the
probing side, with no packet capture:

* FIN      -> ``recv`` returns ``b""`` (orderly shutdown);
* RST      -> ``recv``/``send`` raise ``ConnectionResetError`` (ECONNRESET) or
  ``BrokenPipeError`` (EPIPE after a reset);
* TIMEOUT  -> still open when ``watch_s`` has elapsed since the connect;
* REFUSED  -> the connect itself was refused (RST to our SYN);
* ERROR    -> any other failure to connect (unreachable, unresolvable, connect
  timeout), detailed in ``error``.

``close_after_s`` is measured from connect completion, which is within a round
trip of the server's accept, so a server that closes at "accept + T" shows T.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .probes import Probe

Close = Literal["FIN", "RST", "TIMEOUT", "REFUSED", "ERROR"]
SockFactory = Callable[[int], socket.socket]

DEFAULT_MAX_RESPONSE = 4096
_RECV_CHUNK = 65536


@dataclass
class ProbeResult:
    """What one probe saw. ``response`` keeps only the first ``max_response`` bytes;
    ``response_len`` counts all bytes received, which is what verdicts compare."""

    probe: str
    connected: bool
    response: bytes
    response_len: int
    close: Close
    close_after_s: float | None
    error: str | None = None
    sent: int = 0
    first_data_after_s: float | None = None
    source: str | None = None  # the prober's address for this probe (a pool draws many)

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict (response as hex) for JSON-line output and result rows."""
        d = asdict(self)
        d["response"] = self.response.hex()
        return d


def _default_factory(family: int) -> socket.socket:
    return socket.socket(family, socket.SOCK_STREAM)


def _errname(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{name}: {exc.strerror or exc}" if name else f"{type(exc).__name__}: {exc}"


async def observe(host: str, port: int, probe: Probe, watch_s: float,
                  connect_timeout: float = 5.0, sock_factory: SockFactory | None = None,
                  max_response: int = DEFAULT_MAX_RESPONSE) -> ProbeResult:
    """Connect to (host, port), send ``probe.payload``, then read until the server
    closes or ``watch_s`` seconds after the connect, and classify how it ended.

    ``sock_factory(family)`` returns an unconnected stream socket; the lab uses it to
    create the socket inside the prober's network namespace.
    """
    loop = asyncio.get_running_loop()
    factory = sock_factory or _default_factory

    def result(close: Close, **kw: Any) -> ProbeResult:
        base: dict[str, Any] = {"probe": probe.name, "connected": False, "response": b"",
                                "response_len": 0, "close": close, "close_after_s": None}
        return ProbeResult(**(base | kw))

    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return result("ERROR", error=f"resolve {host!r}: {exc}")
    family, _, _, _, addr = infos[0]

    try:
        sock = factory(family)
    except OSError as exc:
        return result("ERROR", error=str(exc))
    try:
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, addr), connect_timeout)
        except ConnectionRefusedError as exc:
            return result("REFUSED", error=_errname(exc))
        except TimeoutError:
            return result("ERROR", error=f"connect timeout after {connect_timeout} s")
        except OSError as exc:
            return result("ERROR", error=_errname(exc))
        source = sock.getsockname()[0]  # read now: a reset may clear it
        res = await _watch(loop, sock, probe, watch_s, max_response)
        res.source = source
        return res
    finally:
        sock.close()


async def _watch(loop: asyncio.AbstractEventLoop, sock: socket.socket, probe: Probe,
                 watch_s: float, max_response: int) -> ProbeResult:
    """The connected part: send, then read to FIN/RST or the watch deadline."""
    t0 = time.monotonic()
    deadline = t0 + watch_s
    buf = bytearray()
    total = 0
    sent = 0
    first_data: float | None = None

    def done(close: Close, error: str | None = None) -> ProbeResult:
        after = None if close == "TIMEOUT" else round(time.monotonic() - t0, 6)
        return ProbeResult(probe=probe.name, connected=True, response=bytes(buf),
                           response_len=total, close=close, close_after_s=after,
                           error=error, sent=sent, first_data_after_s=first_data)

    try:
        if probe.payload:
            # Sending is bounded by the same deadline: a server that stops reading
            # with full buffers is still a TIMEOUT, not a hang.
            try:
                await asyncio.wait_for(loop.sock_sendall(sock, probe.payload),
                                       max(deadline - time.monotonic(), 0.0))
                sent = len(probe.payload)
            except TimeoutError:
                return done("TIMEOUT", "send did not complete before watch_s")
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return done("TIMEOUT")
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(sock, _RECV_CHUNK), remaining)
            except TimeoutError:
                return done("TIMEOUT")
            if not chunk:
                return done("FIN")
            if first_data is None:
                first_data = round(time.monotonic() - t0, 6)
            total += len(chunk)
            if len(buf) < max_response:
                buf += chunk[: max_response - len(buf)]
    except (ConnectionResetError, BrokenPipeError) as exc:
        return done("RST", _errname(exc))
    except OSError as exc:
        # ETIMEDOUT: the kernel gave up retransmitting to a peer that never ACKs; Frolov
        # et al. (§V-B) counted those as TIMEOUT too. Anything else is an ERROR.
        return done("TIMEOUT" if exc.errno == errno.ETIMEDOUT else "ERROR", _errname(exc))


async def run_suite(host: str, port: int, probes: Sequence[Probe], watch_s: float,
                    concurrency: int = 16, connect_timeout: float = 5.0,
                    sock_factory: SockFactory | None = None,
                    max_response: int = DEFAULT_MAX_RESPONSE) -> list[ProbeResult]:
    """Run every probe against one endpoint, at most ``concurrency`` at a time, and
    return results in probe order. Probes run concurrently so that a whole suite
    costs one ``watch_s`` (Frolov waited 300 s per probe) rather than thirteen."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    gate = asyncio.Semaphore(concurrency)

    async def one(probe: Probe) -> ProbeResult:
        async with gate:
            return await observe(host, port, probe, watch_s, connect_timeout,
                                 sock_factory, max_response)

    return list(await asyncio.gather(*(one(p) for p in probes)))
