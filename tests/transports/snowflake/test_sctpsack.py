"""Delayed SACKs: every second packet, a lone one within 200 ms, gaps at once; and a
real aiortc pair moves data byte-exact with about half the SACKs."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from aiortc.rtcsctptransport import RTCSctpTransport, SackChunk

from tests.support.aiortcpair import collect, negotiate, peer_pair
from transports.snowflake import sctpsack
from transports.snowflake.sctpsack import DelayedSackSctp, use_association_class


class Spy:
    """Stands in for aiortc's own _send_sack, so the decision alone is tested."""

    def __init__(self) -> None:
        self.sent = 0

    async def __call__(self, transport) -> None:
        self.sent += 1
        transport._sack_needed = False
        transport._sack_duplicates.clear()


def bare_association() -> DelayedSackSctp:
    t = DelayedSackSctp.__new__(DelayedSackSctp)
    t._sack_misordered = set()
    t._sack_duplicates = []
    t._sack_needed = False
    t._association_state = RTCSctpTransport.State.ESTABLISHED
    return t


@pytest.fixture
def spy(monkeypatch) -> Spy:
    s = Spy()
    monkeypatch.setattr(RTCSctpTransport, "_send_sack", lambda self: s(self))
    monkeypatch.setattr(sctpsack, "SACK_DELAY_S", 0.05)
    return s


async def packet_with_data(t: DelayedSackSctp) -> None:
    t._sack_needed = True  # what aiortc's DATA handling sets before asking
    await t._send_sack()


def test_every_second_packet_is_acknowledged(spy):
    async def run():
        t = bare_association()
        for _ in range(10):
            await packet_with_data(t)
        return spy.sent

    assert asyncio.run(run()) == 5


def test_a_lone_packet_is_acknowledged_after_the_delay(spy):
    async def run():
        t = bare_association()
        await packet_with_data(t)
        assert spy.sent == 0 and t._sack_needed
        await asyncio.sleep(0.03)
        assert spy.sent == 0  # not before the delay
        await asyncio.sleep(0.05)
        return spy.sent, t._sack_needed

    assert asyncio.run(run()) == (1, False)


def test_out_of_order_or_duplicate_data_is_acknowledged_at_once(spy):
    async def run():
        t = bare_association()
        t._sack_misordered.add(7)
        await packet_with_data(t)
        after_gap = spy.sent
        t._sack_misordered.clear()
        t._sack_duplicates.append(3)
        await packet_with_data(t)
        return after_gap, spy.sent

    assert asyncio.run(run()) == (1, 2)


def test_no_sack_after_the_association_closed(spy):
    async def run():
        t = bare_association()
        await packet_with_data(t)
        t._association_state = RTCSctpTransport.State.CLOSED
        await asyncio.sleep(0.1)
        return spy.sent

    assert asyncio.run(run()) == 0


async def transfer(delayed: bool, messages: int = 400, size: int = 1000) -> tuple[bool, int]:
    """A data channel between two aiortc peers on this host's interfaces: whether the
    bytes arrived exact and in order, and how many SACKs the receiver sent."""
    sacks = 0

    def prepare(b) -> None:
        if delayed:
            assert use_association_class(b, DelayedSackSctp)
        send_chunk = b.sctp._send_chunk

        async def counting(chunk):
            nonlocal sacks
            sacks += isinstance(chunk, SackChunk)
            await send_chunk(chunk)

        b.sctp._send_chunk = counting

    async with peer_pair() as (a, b):
        opened = asyncio.Event()
        channel = a.createDataChannel("bulk", ordered=True)
        channel.on("open", opened.set)
        got, done = collect(b, messages)
        await negotiate(a, b, prepare)
        await asyncio.wait_for(opened.wait(), 20)
        sent = [bytes([i % 251]) * size for i in range(messages)]
        for m in sent:
            channel.send(m)
        await asyncio.wait_for(done.wait(), 30)
        exact = hashlib.sha256(b"".join(got)).digest() == hashlib.sha256(b"".join(sent)).digest()
        return exact, sacks


@pytest.mark.network
def test_a_real_pair_moves_data_exactly_with_half_the_sacks():
    exact_plain, sacks_plain = asyncio.run(transfer(delayed=False))
    exact_delayed, sacks_delayed = asyncio.run(transfer(delayed=True))
    assert exact_plain and exact_delayed
    # aiortc alone: one SACK per packet with DATA (400 messages, ~400 packets).
    assert sacks_plain >= 350
    assert sacks_delayed <= 0.6 * sacks_plain


def test_a_connection_without_an_association_is_left_alone():
    class NoSctp:
        sctp = None

    assert not use_association_class(NoSctp(), DelayedSackSctp)
