"""The bridge's client buffer: meters that add up, shares at and across their
bounds, and relief that ends only a session stalled long enough (issue 48)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.support.clock import ManualClock
from transports.common import relay
from transports.common.upstream import read_bound
from transports.snowflake.turbotunnel import clientbuffer as cb
from transports.snowflake.turbotunnel import kcp, smux


def test_a_meter_passes_every_change_up_to_its_parents():
    top = cb.Meter()
    session = cb.Meter(top)
    a, b = cb.Meter(session), cb.Meter(session)
    a.add(100)
    b.set(50)
    assert (a.bytes, b.bytes, session.bytes, top.bytes) == (100, 50, 150, 150)
    a.set(30)
    assert (session.bytes, top.bytes) == (80, 80)
    b.clear()
    a.clear()
    assert (session.bytes, top.bytes) == (0, 0)


def test_the_budget_lowers_the_stream_cap_to_keep_the_smallest_share():
    assert cb.stream_cap(96 << 20, 480) == 480  # descriptors bind: 204.8 KiB each
    assert cb.stream_cap(96 << 20, 32736) == (96 << 20) // cb.MIN_SHARE == 512
    assert cb.stream_cap(cb.MIN_SHARE, 100) == 1
    # At and across the boundary: exactly MIN_SHARE each, then one stream fewer.
    assert cb.stream_cap(10 * cb.MIN_SHARE, 10) == 10
    assert cb.stream_cap(10 * cb.MIN_SHARE - 1, 10) == 9


def test_a_share_lies_between_the_floor_and_the_most_a_stream_needs():
    buf = cb.ClientBuffer(96 << 20, 480)
    assert buf.floor == (96 << 20) // 480
    assert buf.share() == cb.MAX_SHARE  # no stream open: the most a stream needs
    buf.open_streams = 48  # 2 MiB each: still MAX_SHARE
    assert buf.share() == cb.MAX_SHARE
    buf.open_streams = 49
    assert buf.share() == (96 << 20) // 49 < cb.MAX_SHARE
    buf.open_streams = 480
    assert buf.share() == buf.floor
    buf.open_streams = 5000  # never below the floor the stream cap guarantees
    assert buf.share() == buf.floor
    assert buf.allowance(0) == buf.allowance(1) == buf.floor
    assert buf.allowance(3) == 3 * buf.floor


def test_room_is_exact_at_the_total():
    buf = cb.ClientBuffer(cb.MIN_SHARE * 4, 4)
    cb.Meter(buf.meter).add(buf.total - 10)
    assert buf.room(10) and not buf.room(11)
    assert buf.peak == buf.total - 10


def test_a_budget_smaller_than_one_share_is_refused():
    with pytest.raises(ValueError, match="client-buffer must be at least"):
        cb.ClientBuffer(cb.MIN_SHARE - 1, 4)


def test_the_smallest_share_always_lets_a_stream_move_one_frame():
    """Else a stream whose upstream read side and write queue are full could never
    move its write into KCP: a deadlock, not backpressure. The write stays counted
    in the queue until smux has taken all of it, a relay read's worth of frames."""
    frame = smux.Config().max_frame_size
    frame_cost = -(-frame // (kcp.MTU - kcp.HEADER_LEN)) * kcp.MTU
    frames = -(-relay.CHUNK // frame)
    assert cb.MIN_SHARE >= read_bound() + relay.CHUNK + frames * frame_cost


@dataclass(eq=False)
class Holder:
    held: int
    stalled: float
    ended: str = ""

    def stalled_for(self, now: float) -> float:
        return self.stalled

    def end(self, why: str) -> None:
        self.ended = why


def test_relief_ends_the_session_stalled_longest_and_only_past_the_stall_time():
    clock = ManualClock()
    buf = cb.ClientBuffer(cb.MIN_SHARE * 4, 4, stall_s=5.0, clock=clock)
    needy = Holder(held=10, stalled=60.0)  # never its own victim
    reading = Holder(held=1 << 20, stalled=0.2)
    empty = Holder(held=0, stalled=99.0)  # holds nothing: ending it frees nothing
    short = Holder(held=100, stalled=4.999)
    at_bound, longest = Holder(held=100, stalled=5.0), Holder(held=100, stalled=30.0)
    sessions = [needy, reading, empty, short, at_bound, longest]
    assert buf.relieve(sessions, needy)
    assert longest.ended.startswith("client-buffer spent") and "30 s" in longest.ended
    longest.held = 0  # ended: it holds nothing now
    assert buf.relieve(sessions, needy) and at_bound.ended  # exactly the stall time counts
    at_bound.held = 0
    assert not buf.relieve(sessions, needy)  # 4.999 s is not enough
    assert not (short.ended or reading.ended or needy.ended or empty.ended)
    assert buf.relieved == 2
    # A look that found nobody is not repeated for RELIEF_PAUSE_S.
    short.stalled = 10.0
    clock.t += cb.RELIEF_PAUSE_S * 0.9
    assert not buf.relieve(sessions, needy)
    clock.t += cb.RELIEF_PAUSE_S * 0.2
    assert buf.relieve(sessions, needy) and short.ended
