"""The Snowflake client: WebRTC peers from the broker, Turbo Tunnel over them
(docs/transports/snowflake.md §4; Tor's ``client/lib``).

Per connection (one SOCKS request, as in Tor's 2.5.1 client):

* a :class:`Peers` pool collects up to ``max_peers`` WebRTC data channels in
  the background. A collect makes an aiortc offer (gathering finished; local
  candidates stripped unless ``keep_local``), exchanges it through the broker
  (direct, fronted or AMP), and waits ``channel_timeout_s`` for the channel to
  open; a failed collect waits ``reconnect_s`` before the next;
* a :class:`~.turbotunnel.redial.TurboTunnelSession` takes peers from the pool
  one at a time and moves its KCP packets over the current one. A peer that
  closes, or from which nothing arrives for ``stale_s`` while it is in use, is
  dropped and the next one taken; the smux stream above does not notice.

Deviation from Tor: the staleness clock of a spare peer starts when it is put
into use, not when it opens, since a spare carries no traffic and Tor's rule
would throw every spare away after 20 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from transports.base import Streams, TransportError

from . import messages as m
from .carriers import SNOWFLAKE_TIMEOUT_S, DataChannelCarrier
from .rendezvous import Rendezvous, RendezvousConfig, RendezvousError
from .sdputil import strip_local_candidates
from .stunroute import routable_stun
from .turbotunnel.redial import TurboTunnelSession

log = logging.getLogger(__name__)

RECONNECT_TIMEOUT_S = 10.0
DATA_CHANNEL_TIMEOUT_S = 10.0


@dataclass
class ClientConfig:
    rendezvous: RendezvousConfig
    ice: list[str] = field(default_factory=list)
    max_peers: int = 1
    keep_local: bool = False
    reconnect_s: float = RECONNECT_TIMEOUT_S
    channel_timeout_s: float = DATA_CHANNEL_TIMEOUT_S
    stale_s: float = SNOWFLAKE_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.max_peers < 1:
            raise ValueError("max must be at least 1")
        for url in self.ice:
            if not url.startswith(("stun:", "stuns:", "turn:", "turns:")):
                raise ValueError(f"ICE server {url!r} is not a stun:/turn: URL")

    def ice_servers(self) -> list[str]:
        """Tor's client shuffles its ICE list and keeps ceil(n/2) when n > 2."""
        urls = list(self.ice)
        random.shuffle(urls)
        return urls[:(len(urls) + 1) // 2] if len(urls) > 2 else urls


async def connect_peer(cfg: ClientConfig, rendezvous: Rendezvous,
                       clock: Callable[[], float] = time.monotonic) -> DataChannelCarrier:
    """One WebRTC data channel to a proxy the broker matched us with."""
    from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription

    from .consent import use_patient_consent
    from .sctpbundle import use_bundling
    from .udpbuffer import enlarge_ice_receive_buffer

    enlarge_ice_receive_buffer()

    urls, unroutable = await routable_stun(cfg.ice_servers())
    if unroutable:
        log.info("STUN servers with no route from here, left out: %s", " ".join(unroutable))
    ice = [RTCIceServer(u) for u in urls]
    pc = RTCPeerConnection(RTCConfiguration(iceServers=ice))
    try:
        channel = pc.createDataChannel(f"snowflake-{secrets.token_hex(8)}", ordered=True)
        use_bundling(pc)  # delayed SACKs and bundled chunks
        use_patient_consent(pc)
        opened = asyncio.Event()
        channel.on("open", opened.set)
        await pc.setLocalDescription(await pc.createOffer())  # aiortc: gathering done
        offer = pc.localDescription.sdp
        if not cfg.keep_local:
            offer = strip_local_candidates(offer)
        answer = await rendezvous.exchange(offer)
        try:
            await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        except Exception as exc:  # aiortc raises ValueError and others on bad SDP
            raise RendezvousError(f"unusable answer SDP: {exc}") from None
        try:
            await asyncio.wait_for(opened.wait(), cfg.channel_timeout_s)
        except TimeoutError:
            raise RendezvousError(
                f"data channel did not open within {cfg.channel_timeout_s} s") from None
        return DataChannelCarrier(pc, channel, stale_s=cfg.stale_s, clock=clock)
    except BaseException:
        with contextlib.suppress(Exception):
            await pc.close()
        raise


class Peers:
    """Up to ``max_peers`` open data channels, collected in the background."""

    def __init__(self, cfg: ClientConfig, *, connect=connect_peer,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.rendezvous = Rendezvous(cfg.rendezvous)
        self._connect = connect
        self._clock = clock
        self._ready: asyncio.Queue[DataChannelCarrier] = asyncio.Queue()
        self.live: set[DataChannelCarrier] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.collected = 0
        self.failures = 0
        self.last_error = ""

    def start(self) -> Peers:
        self._task = asyncio.create_task(self._collect_loop())
        return self

    async def _collect_loop(self) -> None:
        while True:
            self.live = {c for c in self.live if not c.closed}
            if len(self.live) >= self.cfg.max_peers:
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), self.cfg.reconnect_s)
                continue
            try:
                carrier = await self._connect(self.cfg, self.rendezvous, self._clock)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failed collect (broker, ICE,
                # aiortc) means "try again later"; the loop must outlive it
                self.failures += 1
                self.last_error = str(exc)
                log.info("collecting a snowflake failed: %s", exc)
                await asyncio.sleep(self.cfg.reconnect_s)
                continue
            carrier.on_close = self._closed
            self.collected += 1
            self.live.add(carrier)
            self._ready.put_nowait(carrier)

    def _closed(self, carrier: DataChannelCarrier) -> None:
        self.live.discard(carrier)
        self._changed.set()

    async def pop(self) -> DataChannelCarrier:
        """The next open peer, waiting for one if need be."""
        while True:
            carrier = await self._ready.get()
            if carrier.closed or carrier.channel.readyState != "open":
                await carrier.close()
                continue
            carrier.last_recv = self._clock()  # staleness counts from first use
            return carrier

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for c in list(self.live):
            await c.close()
        while not self._ready.empty():
            await self._ready.get_nowait().close()


class SnowflakeConnection:
    """One Turbo Tunnel session over its own pool of peers."""

    def __init__(self, cfg: ClientConfig, *, connect=connect_peer) -> None:
        self.peers = Peers(cfg, connect=connect)
        self.session = TurboTunnelSession(self.peers.pop)

    async def open(self) -> Streams:
        self.peers.start()
        self.session.start()
        return await self.session.open_stream(on_close=self._closed)

    def _closed(self) -> None:
        asyncio.get_running_loop().create_task(self.close())

    async def close(self) -> None:
        await self.session.close()
        await self.peers.close()


def _flag(args: Mapping[str, str], key: str) -> bool:
    return args.get(key, "").lower() in ("1", "true", "yes")


def config_from_args(args: Mapping[str, str]) -> ClientConfig:
    """A client config from bridge-line / SOCKS arguments (Tor's names)."""
    url = args.get("url")
    if not url:
        raise TransportError("snowflake needs url= (the broker URL)")
    try:
        rv = RendezvousConfig(url, front=args.get("front") or None,
                              amp_cache=args.get("ampcache") or None,
                              fingerprint=args.get("fingerprint")
                              or m.DEFAULT_BRIDGE_FINGERPRINT)
        ice = [u for u in args.get("ice", "").split(",") if u]
        return ClientConfig(
            rv, ice=ice, max_peers=int(args.get("max", "1")),
            keep_local=_flag(args, "keep-local-addresses"),
            reconnect_s=float(args.get("reconnect-timeout", RECONNECT_TIMEOUT_S)),
            stale_s=float(args.get("stale-timeout", SNOWFLAKE_TIMEOUT_S)),
            channel_timeout_s=float(args.get("channel-timeout", DATA_CHANNEL_TIMEOUT_S)))
    except ValueError as exc:
        raise TransportError(f"snowflake: {exc}") from None


class SnowflakeClientFactory:
    def __init__(self, cfg: ClientConfig) -> None:
        self.cfg = cfg

    async def dial(self, host: str, port: int) -> Streams:
        # host:port is the bridge line's placeholder address; the broker picks.
        conn = SnowflakeConnection(self.cfg)
        return await conn.open()
