"""The bridge's per-ClientID state: what lets a Turbo Tunnel session outlive
the WebSocket (and so the proxy) it arrived on (docs/transports/turbotunnel.md §6).

Tor's bridge keeps, per ClientID, a 512-packet outgoing queue that any
WebSocket carrying that ClientID drains, and a KCP session keyed by the
ClientID, like a UDP listener keyed by address. We do the same:

* :meth:`ClientMap.attach` is called for each WebSocket; it records the
  ``client_ip`` the proxy reported (the newest one wins, as in Tor's ring map);
* :meth:`ClientSession.incoming` feeds a batch of decapsulated packets to the
  session's KCP conversation, creating it from the first packet's conv. A
  different conv replaces the session only when it starts at sn 0 (kcp-go's
  rule); anything else is dropped;
* packets KCP emits wait in the outgoing queue; when it is full they are
  dropped (KCP retransmits), and while no WebSocket is attached for
  ``queue_timeout_s`` the queue is emptied;
* a session ends when its smux session ends (keepalive timeout, bad frames),
  and then leaves the map;
* ours, under hostile load (docs/transports/budgets.md §2): a ClientID that
  never started KCP is forgotten once it has had no WebSocket for
  ``queue_timeout_s``, and the map holds at most ``max_clients``; past that a
  new ClientID ends the one detached the longest (one without KCP first).

Each smux stream the client opens goes to ``on_stream(stream, session)``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from . import kcp, smux

QUEUE_LEN = 512
QUEUE_TIMEOUT_S = 60.0
SERVER_KEEPALIVE_TIMEOUT_S = 240.0
CLIENT_IP_CAPACITY = 98304
# ClientIDs the map keeps: each may hold a 512-packet queue (about 0.7 MB at worst).
MAX_CLIENTS = 4096

log = logging.getLogger(__name__)

StreamHandler = Callable[[smux.Stream, "ClientSession"], Awaitable[None]]


class ClientSession:
    """One ClientID: its outgoing queue, KCP conversation and smux session."""

    def __init__(self, cmap: ClientMap, client_id: bytes) -> None:
        self.cmap = cmap
        self.client_id = client_id
        self.client_ip = ""
        self.outgoing: asyncio.Queue[bytes] = asyncio.Queue(cmap.queue_len)
        self.attached = 0
        self.last_attached = cmap.clock()
        self.kcp: kcp.KCPConn | None = None
        self.smux: smux.Session | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self.dropped_out = 0
        self.dropped_in = 0
        # The tasks serving this ClientID's open smux streams, oldest first (the bridge
        # caps them per ClientID, and ends the oldest when another needs room).
        self.stream_tasks: list[asyncio.Task] = []
        self.closed = False

    @property
    def streams(self) -> int:
        return len(self.stream_tasks)

    def _enqueue(self, packet: bytes) -> None:
        try:
            self.outgoing.put_nowait(packet)
        except asyncio.QueueFull:
            self.dropped_out += 1

    def incoming(self, packets: list[bytes]) -> None:
        """A batch of KCP packets that arrived on some WebSocket for this ClientID."""
        if self.closed or not packets:
            return
        first = packets[0]
        if len(first) < kcp.HEADER_LEN:
            self.dropped_in += len(packets)
            return
        conv = kcp.conversation_of(first)
        if self.kcp is None or (conv != self.kcp.conv and kcp.first_sn(first) == 0):
            self._new_conversation(conv)
        assert self.kcp is not None
        if conv != self.kcp.conv:
            self.dropped_in += len(packets)
            return
        self.kcp.input(packets)

    def _new_conversation(self, conv: int) -> None:
        if self.smux is not None:
            asyncio.get_running_loop().create_task(self.smux.close())
        if self._acceptor is not None:
            self._acceptor.cancel()
        self.kcp = kcp.KCPConn(conv, self._enqueue, clock=self.cmap.clock)
        self.smux = smux.Session(self.kcp, client=False, config=self.cmap.smux_config).start()
        self._acceptor = asyncio.get_running_loop().create_task(self._accept(self.smux))

    async def _accept(self, session: smux.Session) -> None:
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                stream = await session.accept_stream()
                t = asyncio.create_task(self._handle(stream))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
        except smux.SmuxError as exc:
            log.info("client %s: smux session over: %s", self.client_id.hex(), exc)
        finally:
            if session is self.smux:
                await self.close()

    async def _handle(self, stream: smux.Stream) -> None:
        try:
            await self.cmap.on_stream(stream, self)
        except Exception:  # one bad stream must not end the bridge
            log.exception("client %s: stream %d handler failed", self.client_id.hex(), stream.sid)
            with contextlib.suppress(Exception):
                await stream.close()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.cmap._forget(self)
        if self.smux is not None:
            await self.smux.close()  # closes the KCP conversation under it
        if self._acceptor is not None and self._acceptor is not asyncio.current_task():
            self._acceptor.cancel()


class ClientMap:
    """All ClientIDs this bridge (one KCP "listener") knows."""

    def __init__(self, on_stream: StreamHandler, *, queue_len: int = QUEUE_LEN,
                 queue_timeout_s: float = QUEUE_TIMEOUT_S,
                 keepalive_timeout_s: float = SERVER_KEEPALIVE_TIMEOUT_S,
                 max_clients: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.on_stream = on_stream
        self.max_clients = max_clients
        self.evicted = 0
        self.forgotten = 0
        self.queue_len = queue_len
        self.queue_timeout_s = queue_timeout_s
        self.smux_config = smux.Config(keepalive_timeout_s=keepalive_timeout_s)
        self.clock = clock
        self.sessions: dict[bytes, ClientSession] = {}
        self.client_ips: collections.OrderedDict[bytes, str] = collections.OrderedDict()

    def attach(self, client_id: bytes, client_ip: str) -> ClientSession:
        """A WebSocket for ``client_id`` arrived (from a proxy reporting ``client_ip``)."""
        if client_ip:
            self.client_ips[client_id] = client_ip
            self.client_ips.move_to_end(client_id)
            while len(self.client_ips) > CLIENT_IP_CAPACITY:
                self.client_ips.popitem(last=False)
        session = self.sessions.get(client_id)
        if session is None:
            if len(self.sessions) >= self.max_clients:
                self._evict()
            session = self.sessions[client_id] = ClientSession(self, client_id)
        session.client_ip = self.client_ips.get(client_id, "")
        session.attached += 1
        session.last_attached = self.clock()
        return session

    def detach(self, session: ClientSession) -> None:
        session.attached -= 1
        session.last_attached = self.clock()

    def _evict(self) -> None:
        """End the ClientID detached the longest, preferring one that never started
        KCP; none is ended while every one has a WebSocket."""
        idle = [s for s in self.sessions.values() if s.attached == 0]
        if not idle:
            return
        victim = min(idle, key=lambda s: (s.kcp is not None, s.last_attached))
        self.evicted += 1
        if victim.kcp is None:
            self._forget(victim)
        else:
            asyncio.get_running_loop().create_task(victim.close())
            self._forget(victim)

    def expire(self) -> int:
        """Empty the outgoing queues of ClientIDs with no WebSocket for
        ``queue_timeout_s``, and forget those of them that never started KCP; the
        number emptied. Call it periodically."""
        now = self.clock()
        emptied = 0
        for s in list(self.sessions.values()):
            if s.attached == 0 and now - s.last_attached > self.queue_timeout_s:
                if not s.outgoing.empty():
                    while not s.outgoing.empty():
                        s.outgoing.get_nowait()
                    emptied += 1
                if s.kcp is None:  # never started a conversation: nothing to keep
                    self._forget(s)
                    self.forgotten += 1
        return emptied

    def _forget(self, session: ClientSession) -> None:
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]

    async def close(self) -> None:
        for s in list(self.sessions.values()):
            await s.close()
