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
  new ClientID ends the one detached the longest (one without KCP first);
* ours, issue 48 (docs/transports/budgets.md §2.1): with a
  :class:`.clientbuffer.ClientBuffer`, what a session holds for its client
  (its KCP conversation's unacknowledged segments, its outgoing queue, the
  messages being written to its WebSockets and its streams' write queues and
  upstream reads) is metered; its KCP conversation takes no more once the
  session holds its streams' shares or the budget is spent, and the queue drops
  a packet that would not fit (KCP sends it again). A session whose client
  acknowledges nothing for ``dead_link_s`` of WebSocket time is ended: kcp-go
  marks such a conversation dead (ikcp's ``dead_link``) and never acts on it.
  Time without a WebSocket does not count: a client between proxies is not
  refusing to read, and Tor's bridge keeps it for its smux keepalive.

Each smux stream the client opens goes to ``on_stream(stream, session)``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from transports.common.budget import describe_error

from . import kcp, smux
from .clientbuffer import ClientBuffer, Meter

QUEUE_LEN = 512
QUEUE_TIMEOUT_S = 60.0
SERVER_KEEPALIVE_TIMEOUT_S = 240.0
CLIENT_IP_CAPACITY = 98304
# ClientIDs the map keeps: each may hold a 512-packet queue (about 0.7 MB at worst,
# less under a client buffer).
MAX_CLIENTS = 4096
# kcp-go's dead-link time: with no ACK it sends a segment for the 20th time (ikcp's
# IKCP_DEADLINK) 38 s after the first, at its 200 ms initial RTO and its back-off of
# +200 ms a try (docs/transports/turbotunnel.md §3.3: 200, 400, 600, ... ms apart).
DEAD_LINK_S = 38.0

log = logging.getLogger(__name__)

StreamHandler = Callable[[smux.Stream, "ClientSession"], Awaitable[None]]


class Carrier(Protocol):
    """A connection a session's packets travel on (the WebSocket's transport)."""

    def abort(self) -> None: ...


class Failures(Protocol):
    """Where expected failures are counted (transports.common.budget.QuietErrors)."""

    def report(self, kind: str, message: str) -> None: ...


class _Unlogged:
    def report(self, kind: str, message: str) -> None:
        log.info("%s", message)


class ClientSession:
    """One ClientID: its outgoing queue, KCP conversation and smux session."""

    def __init__(self, cmap: ClientMap, client_id: bytes) -> None:
        self.cmap = cmap
        self.client_id = client_id
        self.client_ip = ""
        self.outgoing: asyncio.Queue[bytes] = asyncio.Queue(cmap.queue_len)
        self.attached = 0
        self.last_attached = cmap.clock()
        # What this session holds for its client, and its parts (clientbuffer.Meter).
        budget = cmap.buffer.meter if cmap.buffer is not None else None
        self.meter = Meter(budget)
        self.queued = Meter(self.meter)  # the outgoing queue's packets
        self.writing = Meter(self.meter)  # messages being written to WebSockets
        self.carriers: set[Carrier] = set()
        # Seconds with a WebSocket attached and data unacknowledged (the dead link).
        self.attached_stall = 0.0
        self._watched = cmap.clock()
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

    @property
    def held(self) -> int:
        """Bytes this session holds for its client."""
        return self.meter.bytes

    def stalled_for(self, now: float) -> float:
        return self.kcp.stalled_for(now) if self.kcp is not None else 0.0

    @property
    def in_flight(self) -> int:
        """Bytes of packets queued for or being written to a WebSocket: copies of
        KCP's segments (a resent segment is emitted again)."""
        return self.queued.bytes + self.writing.bytes

    def _fits(self, part: int, n: int) -> bool:
        """Whether ``n`` more bytes fit in ``part`` (either the session's data or
        its packets in flight may hold its streams' shares) and in the budget;
        when only the budget is spent, a stalled session may be ended for room."""
        buf = self.cmap.buffer
        if buf is None:
            return True
        if part + n > buf.allowance(self.streams):
            return False
        if buf.room(n):
            return True
        return buf.relieve(self.cmap.sessions.values(), self) and buf.room(n)

    def _kcp_fits(self, n: int) -> bool:
        return self._fits(self.held - self.in_flight, n)

    def _enqueue(self, packet: bytes) -> None:
        if self.closed or not self._fits(self.in_flight, len(packet)):
            self.dropped_out += 1  # KCP sends it again
            return
        try:
            self.outgoing.put_nowait(packet)
        except asyncio.QueueFull:
            self.dropped_out += 1
            return
        self.queued.add(len(packet))

    async def get_packet(self) -> bytes:
        """:meth:`next_packet`, waiting for one."""
        packet = await self.outgoing.get()
        self.queued.add(-len(packet))
        return packet

    def next_packet(self) -> bytes:
        """The next outgoing packet, no longer counted as queued; the caller counts
        it in :attr:`writing` until the WebSocket has taken it."""
        packet = self.outgoing.get_nowait()
        self.queued.add(-len(packet))
        return packet

    def empty_queue(self) -> bool:
        """Drop every queued packet; whether there were any."""
        if self.outgoing.empty():
            return False
        while not self.outgoing.empty():
            self.outgoing.get_nowait()
        self.queued.clear()
        return True

    def watch_link(self, now: float) -> bool:
        """Count WebSocket time with data unacknowledged; whether the link is dead."""
        if self.kcp is None or self.closed:
            return False
        stalled = self.kcp.stalled_for(now)
        if stalled == 0:
            self.attached_stall = 0.0
        elif self.kcp.last_progress >= self._watched:  # acknowledged since the last look
            self.attached_stall = stalled if self.attached else 0.0
        elif self.attached:
            self.attached_stall += now - self._watched
        self._watched = now
        return self.attached_stall >= self.cmap.dead_link_s

    def end(self, why: str) -> None:
        """Close this session now, and its WebSockets (:class:`.clientbuffer.Holder`):
        what it held is released at once; its smux session closes a moment later."""
        if self.closed:
            return
        self.cmap.failures.report("session-ended", f"a Turbo Tunnel session was ended: {why}")
        self._shut()
        asyncio.get_running_loop().create_task(self._close_smux())

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
        self.kcp = kcp.KCPConn(conv, self._enqueue, clock=self.cmap.clock,
                               meter=Meter(self.meter) if self.cmap.buffer else None,
                               may_send=self._kcp_fits if self.cmap.buffer else None)
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
            # Normal for a session (a keepalive timeout, the client gone, a peer's bad
            # frame): counted, never a line each.
            self.cmap.failures.report("smux-over", f"a Turbo Tunnel session is over: {exc}")
        finally:
            if session is self.smux:
                await self.close()

    async def _handle(self, stream: smux.Stream) -> None:
        try:
            await self.cmap.on_stream(stream, self)
        except (smux.SmuxError, ConnectionError) as exc:  # the session or stream ended
            self.cmap.failures.report("stream-ended", "a stream ended on an error: "
                                                      f"{describe_error(exc)}")
            with contextlib.suppress(Exception):
                await stream.close()
        except Exception:  # a bug of ours; one bad stream must not end the bridge
            log.exception("stream handler failed")
            with contextlib.suppress(Exception):
                await stream.close()

    async def close(self) -> None:
        if self.closed:
            return
        self._shut()
        await self._close_smux()

    def _shut(self) -> None:
        self.closed = True
        self.cmap._forget(self)
        for carrier in list(self.carriers):
            carrier.abort()  # its WebSocket handler sees the close and detaches
        self.empty_queue()
        if self.kcp is not None:
            self.kcp.shut()

    async def _close_smux(self) -> None:
        if self.smux is not None:
            await self.smux.close()  # and the KCP conversation under it
        if self._acceptor is not None and self._acceptor is not asyncio.current_task():
            self._acceptor.cancel()


class ClientMap:
    """All ClientIDs this bridge (one KCP "listener") knows."""

    def __init__(self, on_stream: StreamHandler, *, queue_len: int = QUEUE_LEN,
                 queue_timeout_s: float = QUEUE_TIMEOUT_S,
                 keepalive_timeout_s: float = SERVER_KEEPALIVE_TIMEOUT_S,
                 max_clients: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic,
                 buffer: ClientBuffer | None = None, dead_link_s: float = DEAD_LINK_S,
                 failures: Failures | None = None) -> None:
        self.on_stream = on_stream
        self.buffer = buffer
        self.dead_link_s = dead_link_s
        self.failures: Failures = failures or _Unlogged()
        self.dead_links = 0
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
                if s.empty_queue():
                    emptied += 1
                if s.kcp is None:  # never started a conversation: nothing to keep
                    self._forget(s)
                    self.forgotten += 1
        return emptied

    def watch_links(self) -> int:
        """End the sessions whose link is dead (:meth:`ClientSession.watch_link`);
        how many. Call it every second or so."""
        now = self.clock()
        dead = [s for s in self.sessions.values() if s.watch_link(now)]
        for s in dead:
            self.dead_links += 1
            s.end(f"its client acknowledged nothing for {self.dead_link_s:g} s "
                  "with a WebSocket attached (dead link)")
        return len(dead)

    def _forget(self, session: ClientSession) -> None:
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]

    async def close(self) -> None:
        for s in list(self.sessions.values()):
            await s.close()
