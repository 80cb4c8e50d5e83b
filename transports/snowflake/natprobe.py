"""The proxy's NAT test against a probe service, and the probe service itself.

Why: the broker matches clients behind restricted NATs only with proxies that
can take any peer ("unrestricted"), so a proxy must learn its own NAT type.
Tor's proxy asks the probetest service (docs/transports/snowflake.md §3.5) and so do we, with
the same exchange, so either proxy can use either service:

* the proxy makes an offer with a data channel labelled ``test``, gathers, and
  POSTs ``{"Status":"client match","Offer":"<offer JSON>","NAT":"","RelayURL":""}``
  (a poll-response-shaped message) to the probe URL;
* the service answers ``{"Version":"1.3","Sid":"stub-sid","Answer":"<answer JSON>"}``
  (an answer-request-shaped message) and tries to connect from its side;
* the channel opening within the timeout (20 s) means ``unrestricted``, not
  opening means ``restricted``, and a failed exchange means ``unknown``.

The service (``python -m transports.snowflake.natprobe --addr HOST:PORT``) is an
aiortc answerer; bad input gets a 400 with the reason, never a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import ssl
import sys
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from ptcommon.events import EventLog, run_until_stopped
from transports.common.httpbody import read_limited

from . import messages as m
from .sdputil import strip_local_candidates
from .stunroute import routable_stun

log = logging.getLogger("snowflake-natprobe")

TOR_PROBE_URL = "https://snowflake-broker.torproject.net:8443/probe"
PROBE_SID = "stub-sid"
PROBE_LABEL = "test"
READ_LIMIT = 100_000


async def probe_nat(http: aiohttp.ClientSession, url: str, stun: list[str],
                    timeout_s: float = 20.0, keep_local_addresses: bool = False) -> str:
    """Our NAT type as the probe service at ``url`` sees it (see the module doc)."""
    from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection
    from aiortc import RTCSessionDescription as Desc

    urls, _ = await routable_stun(u for u in stun if u)
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[RTCIceServer(u) for u in urls]))
    opened = asyncio.get_running_loop().create_future()
    channel = pc.createDataChannel(PROBE_LABEL)

    @channel.on("open")
    def _open() -> None:
        if not opened.done():
            opened.set_result(True)

    try:
        await pc.setLocalDescription(await pc.createOffer())  # gathers: no trickle
        sdp = pc.localDescription.sdp
        if not keep_local_addresses:
            sdp = strip_local_candidates(sdp)
        body = m.ProxyPollResponse(m.STATUS_MATCH, offer=m.encode_sdp("offer", sdp)).encode()
        try:
            async with http.post(url, data=body,
                                 timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                data = await read_limited(r.content, READ_LIMIT)
                if r.status != 200:
                    raise m.MessageError(f"probe answered HTTP {r.status}")
            answer = m.decode_sdp(m.AnswerRequest.decode(data).answer, "answer")
        except (aiohttp.ClientError, OSError, TimeoutError, m.MessageError) as exc:
            log.warning("NAT probe failed: %s", exc or type(exc).__name__)
            return m.NAT_UNKNOWN
        await pc.setRemoteDescription(Desc(answer, "answer"))
        try:
            await asyncio.wait_for(opened, timeout_s)
        except TimeoutError:
            return m.NAT_RESTRICTED
        return m.NAT_UNRESTRICTED
    finally:
        await pc.close()


@dataclass
class ProbeService:
    """The probe's answerer side: one short-lived peer per request."""

    stun: list[str] = field(default_factory=list)
    keep_local_addresses: bool = False
    channel_timeout_s: float = 20.0
    peers: set[Any] = field(default_factory=set)
    probes: int = 0
    opened: int = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=READ_LIMIT)
        app.router.add_post("/probe", self.probe)
        app.on_shutdown.append(self._close_all)
        return app

    async def probe(self, request: web.Request) -> web.Response:
        from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection
        from aiortc import RTCSessionDescription as Desc

        try:
            body = await request.read()
            poll = m.ProxyPollResponse.decode(body)
            if poll.status != m.STATUS_MATCH:
                raise m.MessageError(f"expected status {m.STATUS_MATCH!r}")
            offer = m.decode_sdp(poll.offer, "offer")
        except m.MessageError as exc:  # (an oversize body is aiohttp's 413)
            return web.json_response({"error": str(exc)}, status=400)
        self.probes += 1
        urls, _ = await routable_stun(u for u in self.stun if u)
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[RTCIceServer(u) for u in urls]))
        self.peers.add(pc)
        try:
            await pc.setRemoteDescription(Desc(offer, "offer"))
            await pc.setLocalDescription(await pc.createAnswer())
        except Exception as exc:  # noqa: BLE001 - aiortc rejects odd SDP in many ways
            await self._close(pc)
            return web.json_response({"error": f"unusable offer: {exc}"}, status=400)
        sdp = pc.localDescription.sdp
        if not self.keep_local_addresses:
            sdp = strip_local_candidates(sdp)

        @pc.on("datachannel")
        def _channel(channel: Any) -> None:
            self.opened += 1

        asyncio.get_running_loop().call_later(self.channel_timeout_s + 5,
                                              lambda: asyncio.ensure_future(self._close(pc)))
        return web.Response(body=m.AnswerRequest(PROBE_SID, m.encode_sdp("answer", sdp)).encode(),
                            content_type="application/json")

    async def _close(self, pc: Any) -> None:
        self.peers.discard(pc)
        with contextlib.suppress(Exception):
            await pc.close()

    async def _close_all(self, _app: web.Application) -> None:
        await asyncio.gather(*(self._close(pc) for pc in list(self.peers)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m transports.snowflake.natprobe",
                                description="The Snowflake NAT probe service (probetest).")
    p.add_argument("--addr", required=True, help="HOST:PORT to listen on")
    p.add_argument("--stun", default="", help="comma-separated STUN URLs")
    p.add_argument("--keep-local-addresses", action="store_true")
    p.add_argument("--cert", help="TLS certificate (PEM); without it, plain HTTP")
    p.add_argument("--key", help="TLS key (PEM)")
    args = p.parse_args(argv)
    host, _, port = args.addr.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        p.error(f"--addr {args.addr!r}: expected HOST:PORT")
    tls = None
    if args.cert or args.key:
        if not (args.cert and args.key):
            p.error("TLS needs both --cert and --key")
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(args.cert, args.key)
        except (OSError, ssl.SSLError) as exc:
            print(f"natprobe: cannot load the TLS key pair: {exc}", file=sys.stderr)
            return 2
    service = ProbeService([s.strip() for s in args.stun.split(",") if s.strip()],
                           args.keep_local_addresses)
    return run_until_stopped("natprobe", lambda stop: _serve(
        service, host.strip("[]") or None, int(port), tls, args.addr, stop))


async def _serve(service: ProbeService, host: str | None, port: int,
                 tls: ssl.SSLContext | None, addr: str, stop: asyncio.Event) -> int:
    runner = web.AppRunner(service.app(), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=tls).start()
    except OSError as exc:
        print(f"natprobe: cannot listen on {addr}: {exc}", file=sys.stderr)
        await runner.cleanup()
        return 2
    events = EventLog("natprobe")
    events.ready(listen=addr, tls=tls is not None)
    await stop.wait()
    events.emit("stats", probes=service.probes, opened=service.opened)
    await runner.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
