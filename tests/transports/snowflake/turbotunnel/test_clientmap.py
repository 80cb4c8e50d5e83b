"""The bridge's sessions under a client buffer: the outgoing queue within its
share, the dead link counted only with a WebSocket attached and at its exact
time, and an ended session that releases what it held at once (issue 48)."""

from __future__ import annotations

import asyncio

from tests.support.clock import ManualClock
from transports.snowflake.turbotunnel import clientbuffer as cb
from transports.snowflake.turbotunnel.clientmap import DEAD_LINK_S, ClientMap


class FakeKCP:
    """What the session asks of its KCP conversation."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.last_progress = clock.t
        self.waiting = False  # data unacknowledged
        self.shut_down = False

    def stalled_for(self, now: float) -> float:
        return now - self.last_progress if self.waiting else 0.0

    def ack(self) -> None:
        self.last_progress = self.clock.t

    def shut(self) -> None:
        self.shut_down = True


class Carrier:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


async def no_streams(stream, session) -> None:  # pragma: no cover - never called here
    raise AssertionError("no stream expected")


def new_map(clock: ManualClock, total: int = 4 * cb.MIN_SHARE, max_streams: int = 4) -> ClientMap:
    return ClientMap(no_streams, clock=clock, buffer=cb.ClientBuffer(total, max_streams,
                                                                     clock=clock))


def test_the_dead_link_time_is_kcp_gos():
    """kcp-go resends a segment for the 20th time 38 s after the first, its back-off
    adding 200 ms a try from its 200 ms initial RTO (docs/transports/turbotunnel.md §3.3)."""
    assert DEAD_LINK_S == sum(200 * k for k in range(1, 20)) / 1000 == 38.0


async def test_a_dead_link_counts_websocket_time_only_and_ends_at_its_time():
    clock = ManualClock()
    cmap = new_map(clock)
    session = cmap.attach(b"A" * 8, "")
    fake = session.kcp = FakeKCP(clock)  # type: ignore[assignment]  # a stand-in conversation
    carrier = Carrier()
    session.carriers.add(carrier)
    fake.waiting = True
    for _ in range(20):  # 20 s attached, unacknowledged
        clock.t += 1.0
        assert cmap.watch_links() == 0
    cmap.detach(session)  # a client between proxies: the clock stops
    for _ in range(100):
        clock.t += 1.0
        assert cmap.watch_links() == 0
    cmap.attach(b"A" * 8, "")
    for _ in range(17):  # 37 s of WebSocket time in all
        clock.t += 1.0
        assert cmap.watch_links() == 0
    clock.t += 0.999
    assert cmap.watch_links() == 0
    clock.t += 0.001  # exactly 38 s
    assert cmap.watch_links() == 1 and cmap.dead_links == 1
    assert session.closed and fake.shut_down and carrier.aborted
    assert b"A" * 8 not in cmap.sessions
    await asyncio.sleep(0)  # the smux close task runs (there is no smux here)


async def test_an_acknowledgement_restarts_the_dead_link_count():
    clock = ManualClock()
    cmap = new_map(clock)
    session = cmap.attach(b"B" * 8, "")
    fake = session.kcp = FakeKCP(clock)  # type: ignore[assignment]  # a stand-in conversation
    fake.waiting = True
    for _ in range(30):
        clock.t += 1.0
        cmap.watch_links()
    clock.t += 0.5
    fake.ack()  # half a second before the look
    clock.t += 0.5
    cmap.watch_links()
    assert session.attached_stall == 0.5
    fake.waiting = False  # all acknowledged
    clock.t += 50.0
    assert cmap.watch_links() == 0 and session.attached_stall == 0.0


async def test_the_outgoing_queue_holds_a_share_and_drops_the_rest():
    """Queued packets are copies of KCP's segments, which KCP sends again: past the
    session's share (or the budget) one is dropped, never waited for."""
    clock = ManualClock()
    cmap = new_map(clock)
    session = cmap.attach(b"C" * 8, "")
    cmap.buffer.open_streams = 4  # the bridge is full: each share is the floor
    share = cmap.buffer.allowance(0)
    assert share == cb.MIN_SHARE
    packet = bytes(1400)
    fits = share // len(packet)
    for _ in range(fits + 5):
        session._enqueue(packet)
    assert session.outgoing.qsize() == fits and session.dropped_out == 5
    assert session.queued.bytes == fits * len(packet) == cmap.buffer.used
    got = session.next_packet()
    assert got == packet and session.queued.bytes == (fits - 1) * len(packet)
    session._enqueue(packet)  # room again
    assert session.outgoing.qsize() == fits


async def test_an_ended_session_releases_what_it_held_at_once():
    clock = ManualClock()
    cmap = new_map(clock)
    session = cmap.attach(b"D" * 8, "")
    session.kcp = FakeKCP(clock)  # type: ignore[assignment]  # a stand-in conversation
    for _ in range(10):
        session._enqueue(bytes(1000))
    session.writing.add(500)
    assert cmap.buffer.used == 10_500
    session.end("a test")
    assert session.closed and session.outgoing.empty()
    # The queue is released now; the message a WebSocket is writing, when it is done.
    assert cmap.buffer.used == 500
    session.end("again")  # a second end does nothing
    await asyncio.sleep(0)
