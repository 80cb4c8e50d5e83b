"""The Snowflake volunteer proxy (aiortc): poll the broker, answer offers, relay.

Behaviour follows Tor's standalone proxy as of 2.14.1 (``proxy/lib``;
docs/transports/snowflake.md §3, §9): 1.3 polls, each with a new Sid; after
each answer, a match included, a wait of the broker's ``NextPoll`` (at least
1 s; 5 s without one); polling only while the default relay accepts a
WebSocket (when ``check_relay_reachable``, as the command line sets); an answer
only after ICE gathering completes (no trickle), with local candidates
stripped; the relay URL checked first (:mod:`.relaycheck`); the data channel
must open within 20 s, and a relay silent toward the client for 30 s ends the
session. Sessions run concurrently, like 2.14's, up to ``capacity``, in this process
or spread over worker processes (:mod:`.proxyworkers`).

Its settings are a :class:`~.proxyconfig.ProxyConfig` (Tor's public ones by
default) and its counters a :class:`~.proxystats.ProxyStats`. Client addresses
never reach the log unless ``unsafe_logging`` is set. aiortc's DTLS and SDP
differ from pion's (aiortc offers other ciphers and groups, three
fingerprints, real ports in ``m=``): a censor can tell this proxy from Tor's
(docs/lab/transports.md §3.4).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
import time
from typing import Any, Protocol

import aiohttp

from transports.common.httpbody import read_limited

from . import messages as m
from .datachannel import ChannelSender
from .natprobe import probe_nat
from .proxyconfig import ProxyConfig
from .proxystats import ProxyStats
from .relaycheck import RelayRefused, check_relay
from .rwndshare import SharedReceiveWindow
from .sdputil import client_ip, strip_local_candidates
from .stunroute import routable_stun
from .summary import summary_line

log = logging.getLogger("snowflake-proxy")


class SessionServer(Protocol):
    """Serves matched clients somewhere else (the worker processes of
    :mod:`.proxyworkers`, which sit above this module and hand it in)."""

    async def session(self, sid: str, match: m.ProxyPollResponse) -> None:
        """Serve one match; return when its session has ended."""
        ...


try:  # aiohttp 3.11+ takes its WebSocket timeouts as one object, earlier a float
    from aiohttp import ClientWSTimeout

    _QUICK_CLOSE: dict[str, Any] = {"timeout": ClientWSTimeout(ws_close=0.2)}
except ImportError:  # pragma: no cover - old aiohttp
    _QUICK_CLOSE = {"timeout": 0.2}


def new_sid() -> str:
    return base64.b64encode(secrets.token_bytes(16)).decode().rstrip("=")


class SnowflakeProxy:
    """Run with :meth:`run`; :attr:`stats` counts what it did."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.stats = ProxyStats()
        self.sessions: set[asyncio.Task[None]] = set()
        self._http: aiohttp.ClientSession | None = None
        self.nat = config.nat  # what the polls report
        self._unroutable_logged: set[str] = set()  # each such STUN server logged once
        self._windows = SharedReceiveWindow()  # one receive budget for all clients
        # Worker processes that serve the sessions (.proxyworkers); None: this one does.
        self.workers: SessionServer | None = None
        self.relay_reachable = True  # until a check (check_relay_reachable) says not

    def _addr(self, addr: str | None) -> str:
        return (addr or "none") if self.config.unsafe_logging else "[scrubbed]"

    @property
    def clients(self) -> int:
        return len(self.sessions)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=None, sock_read=self.config.broker_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            self._http = http
            retest: asyncio.Task[None] | None = None
            if self.config.nat_probe_url:
                await self.check_nat()  # as Tor's proxy does, before the first poll
                if self.config.nat_retest_interval_s > 0:
                    retest = asyncio.create_task(self._retest_nat(stop))
            summaries = (asyncio.create_task(self._summaries(stop))
                         if self.config.summary_interval_s > 0 else None)
            relay_watch = None
            if self.config.check_relay_reachable:
                await self.check_relay_reachable()  # before the first poll, as Tor's
                relay_watch = asyncio.create_task(self._watch_relay(stop))
            failures = 0
            try:
                while not stop.is_set():
                    t0 = time.monotonic()
                    wait = self.config.poll_interval_s
                    if self.config.capacity and self.clients >= self.config.capacity:
                        await _sleep_or_stop(stop, 1.0)
                        continue
                    if not self.relay_reachable:  # Tor's proxy skips the poll
                        await _sleep_or_stop(stop, wait)
                        continue
                    sid = new_sid()  # 2.14: every poll has its own (2.5.1 kept one)
                    try:
                        resp = await self.poll(sid)
                    except (aiohttp.ClientError, OSError, m.MessageError, TimeoutError) as exc:
                        failures += 1
                        self.stats.broker_errors += 1
                        if failures & (failures - 1) == 0:  # 1, 2, 4, 8, ...: no log flood
                            log.warning("error polling broker (%d in a row): %s", failures, exc)
                        wait = min(self.config.poll_interval_s * 2 ** min(failures, 20),
                                   max(self.config.backoff_max_s, self.config.poll_interval_s))
                        await _sleep_or_stop(stop, max(0.0, wait - (time.monotonic() - t0)))
                        continue
                    if failures:
                        log.info("broker reachable again after %d failed polls", failures)
                        failures = 0
                    if resp is not None:
                        if resp.next_poll_ms is not None and resp.next_poll_ms > 0:
                            wait = resp.next_poll_ms / 1000
                        wait = max(self.config.min_poll_interval_s, wait)
                        if resp.status == m.STATUS_MATCH:
                            serve = self.workers.session if self.workers else self.session
                            task = asyncio.create_task(serve(sid, resp))
                            self.sessions.add(task)
                            task.add_done_callback(self.sessions.discard)
                        elif resp.status != m.STATUS_NO_MATCH:
                            log.warning("broker: %s", resp.status)
                    # 2.14 resets its ticker when the answer comes: the wait starts now.
                    await _sleep_or_stop(stop, wait)
            finally:
                helpers = [t for t in (retest, summaries, relay_watch) if t is not None]
                for t in [*self.sessions, *helpers]:
                    t.cancel()
                await asyncio.gather(*self.sessions, *helpers, return_exceptions=True)

    async def check_relay_reachable(self) -> bool:
        """Open and close a WebSocket to the default relay (2.12's
        ``checkBridgeReachability``); :attr:`relay_reachable` says how it went."""
        assert self._http is not None
        try:
            async with asyncio.timeout(self.config.broker_timeout_s):
                ws = await self._http.ws_connect(self.config.relay, autoping=False,
                                                 **_QUICK_CLOSE)
                # Tor's proxy drops the connection without a closing handshake; a relay
                # waiting for a Turbo Tunnel preamble would not answer one for seconds.
                await ws.close()
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            if self.relay_reachable:
                log.warning("connection to the relay failed: %s; not polling until it "
                            "answers", exc)
            self.relay_reachable = False
            return False
        if not self.relay_reachable:
            log.info("the relay is reachable again")
        self.relay_reachable = True
        return True

    async def _watch_relay(self, stop: asyncio.Event) -> None:
        """Tor's ``ExpBackoff``: after a failure 5 min, doubling to 24 h; after a
        success 24 h."""
        wait = self.config.relay_recheck_max_s
        failed = not self.relay_reachable
        if failed:
            wait = self.config.relay_recheck_min_s
        while not stop.is_set():
            await _sleep_or_stop(stop, wait)
            if stop.is_set():
                return
            if await self.check_relay_reachable():
                failed = False
                wait = self.config.relay_recheck_max_s
            else:
                wait = (min(wait * 2, self.config.relay_recheck_max_s) if failed
                        else self.config.relay_recheck_min_s)
                failed = True

    async def _summaries(self, stop: asyncio.Event) -> None:
        """Tor's summary line every summary_interval_s (see :mod:`.summary`)."""
        s = self.stats
        last = (s.completed, s.outbound_bytes, s.inbound_bytes)
        while not stop.is_set():
            await _sleep_or_stop(stop, self.config.summary_interval_s)
            if stop.is_set():
                return
            now = (s.completed, s.outbound_bytes, s.inbound_bytes)
            log.info(summary_line(self.config.summary_interval_s,
                                  *(b - a for a, b in zip(last, now, strict=True))))
            last = now

    async def check_nat(self) -> str:
        """Ask the probe service; an ``unknown`` result keeps the type we had."""
        assert self._http is not None
        found = await probe_nat(self._http, self.config.nat_probe_url, self.config.stun,
                                self.config.nat_probe_timeout_s,
                                self.config.keep_local_addresses)
        if found != m.NAT_UNKNOWN:
            self.nat = found
        log.info("NAT type: %s", self.nat)
        return self.nat

    async def _retest_nat(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _sleep_or_stop(stop, self.config.nat_retest_interval_s)
            if not stop.is_set():
                await self.check_nat()

    async def poll(self, sid: str) -> m.ProxyPollResponse:
        assert self._http is not None
        clients = self.clients // 8 * 8  # Tor rounds down to a multiple of 8
        body = m.ProxyPoll(sid, self.config.proxy_type, self.nat, clients,
                           self.config.allowed_relay_pattern).encode()
        self.stats.polls += 1
        async with self._http.post(self.config.broker.rstrip("/") + "/proxy", data=body) as r:
            data = await read_limited(r.content, 100_000)
            if r.status != 200:
                raise m.MessageError(f"broker answered HTTP {r.status}")
        return m.ProxyPollResponse.decode(data)

    async def session(self, sid: str, match: m.ProxyPollResponse) -> None:
        """One client: check the relay, answer, wait for the channel, relay bytes."""
        from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection
        from aiortc import RTCSessionDescription as Desc

        from .consent import use_patient_consent
        from .sctpbundle import use_bundling
        from .udpbuffer import enlarge_ice_receive_buffer

        enlarge_ice_receive_buffer()
        relay = match.relay_url or self.config.relay
        try:
            await check_relay(relay, self.config.allowed_relay_pattern,
                              allow_non_tls=self.config.allow_non_tls_relay,
                              allow_private=self.config.allow_private_relay)
            offer_sdp = m.decode_sdp(match.offer, "offer")
        except (RelayRefused, m.MessageError) as exc:
            self.stats.refused_relays += isinstance(exc, RelayRefused)
            log.warning("bad offer from broker: %s", exc)
            return
        stun, unroutable = await routable_stun(u for u in self.config.stun if u)
        for url in set(unroutable) - self._unroutable_logged:
            self._unroutable_logged.add(url)
            log.info("STUN server %s has no route from here: gathering without it", url)
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[RTCIceServer(u) for u in stun]))
        opened = asyncio.get_running_loop().create_future()
        # The client writes its Turbo Tunnel preamble as soon as the channel opens,
        # before the relay WebSocket exists: queue from the first message on.
        upstream: asyncio.Queue[bytes | None] = asyncio.Queue()

        @pc.on("datachannel")
        def _on_channel(channel: Any) -> None:
            if opened.done():
                return
            opened.set_result(channel)

            @channel.on("message")
            def _up(msg: Any) -> None:
                upstream.put_nowait(msg.encode() if isinstance(msg, str) else msg)

            @channel.on("close")
            def _closed() -> None:
                upstream.put_nowait(None)

        try:
            await pc.setRemoteDescription(Desc(offer_sdp, "offer"))
            use_bundling(pc)  # delayed SACKs and bundled chunks
            use_patient_consent(pc)
            self._windows.join(pc.sctp)
            await pc.setLocalDescription(await pc.createAnswer())  # gathers: no trickle
            sdp = pc.localDescription.sdp
            if not self.config.keep_local_addresses:
                sdp = strip_local_candidates(sdp)
            if not await self.answer(sid, m.encode_sdp("answer", sdp)):
                return
            try:
                channel = await asyncio.wait_for(opened, self.config.datachannel_timeout_s)
            except TimeoutError:
                self.stats.timeouts += 1
                log.info("timed out waiting for the data channel")
                return
            self.stats.connections += 1
            await self.relay(channel, upstream, relay, client_ip(offer_sdp))
            self.stats.completed += 1
        except Exception as exc:  # noqa: BLE001 - one bad client must not stop the proxy
            log.warning("session failed: %s: %s", type(exc).__name__, exc)
        finally:
            self._windows.leave(pc.sctp)
            await pc.close()

    async def answer(self, sid: str, answer: str) -> bool:
        assert self._http is not None
        url = self.config.broker.rstrip("/") + "/answer"
        async with self._http.post(url, data=m.AnswerRequest(sid, answer).encode()) as r:
            data = await read_limited(r.content, 100_000)
        try:
            status: str | None = m.decode_answer_response(data)
        except m.MessageError:
            status = None
        if r.status != 200 or status != m.STATUS_SUCCESS:
            log.info("answer not taken: HTTP %s %s", r.status, status)
            return False
        return True

    async def relay(self, channel: Any, upstream: asyncio.Queue[bytes | None],
                    relay_url: str, client: str | None) -> None:
        """Pipe the data channel to a WebSocket until either side ends, or until the
        relay has sent nothing toward the client for the inactivity timeout."""
        assert self._http is not None
        url = relay_url
        if client:
            url += ("&" if "?" in url else "?") + f"client_ip={client}"
        log.info("relaying for client %s", self._addr(client))
        last_down = time.monotonic()
        sender = ChannelSender(channel)
        async with self._http.ws_connect(url, autoping=True, max_msg_size=0) as ws:
            async def up() -> None:
                while (data := await upstream.get()) is not None:
                    self.stats.inbound_bytes += len(data)
                    await ws.send_bytes(data)

            async def down() -> None:
                nonlocal last_down
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        last_down = time.monotonic()
                        self.stats.outbound_bytes += len(msg.data)
                        await sender.send(msg.data)

            async def quiet() -> None:
                while (idle := time.monotonic() - last_down) < self.config.inactivity_timeout_s:
                    await asyncio.sleep(self.config.inactivity_timeout_s - idle)
                log.info("no data from the relay for %.0f s: closing",
                         self.config.inactivity_timeout_s)

            tasks = [asyncio.create_task(c()) for c in (up, down, quiet)]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                channel.close()


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
