"""Bundled SCTP chunks: the same bytes, in order, in far fewer packets."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from aiortc.rtcsctptransport import (
    SCTP_MAX_PACKET_LENGTH,
    DataChunk,
    InitChunk,
    RTCSctpTransport,
    SackChunk,
    parse_packet,
    serialize_packet,
)

from tests.support.aiortcpair import collect, negotiate, peer_pair
from transports.snowflake.sctpbundle import BundlingSctp, bundle_packet, use_bundling
from transports.snowflake.sctpsack import DelayedSackSctp


def _data(tsn: int, payload: bytes) -> DataChunk:
    chunk = DataChunk(flags=0x03)
    chunk.tsn, chunk.stream_id, chunk.stream_seq, chunk.protocol = tsn, 1, tsn, 53
    chunk.user_data = payload
    return chunk


def test_a_bundle_parses_back_to_its_chunks_and_one_chunk_matches_aiortc():
    chunks = [_data(1, b"a" * 26), _data(2, b"b" * 3), SackChunk()]
    packet = bundle_packet(5000, 5000, 0xDEADBEEF, [bytes(c) for c in chunks])
    _, _, tag, parsed = parse_packet(packet)  # checks the CRC32c
    assert tag == 0xDEADBEEF
    assert [type(c) for c in parsed] == [DataChunk, DataChunk, SackChunk]
    assert [c.user_data for c in parsed[:2]] == [b"a" * 26, b"b" * 3]
    one = _data(9, b"xyz")
    assert bundle_packet(1, 2, 3, [bytes(one)]) == serialize_packet(1, 2, 3, one)


class Recorder(BundlingSctp):
    """A bundling association with no network: records each packet it sends."""

    def __init__(self) -> None:  # noqa: D107 - only what _send_chunk and _send_packet read
        self.packets: list[bytes] = []
        self._local_port = self._remote_port = 5000
        self._remote_verification_tag = 7
        self._RTCSctpTransport__log_debug = lambda *args: None
        recorder = self

        class Dtls:
            async def _send_data(self, data: bytes) -> None:
                recorder.packets.append(data)

        self._RTCSctpTransport__transport = Dtls()


def test_chunks_of_one_pass_share_packets_up_to_the_size_limit():
    async def run(sctp: Recorder) -> None:
        async def one_pass() -> None:
            for i in range(60):
                await sctp._send_chunk(_data(i, b"k" * 26))

        await sctp._ptl_pass(one_pass)

    sctp = Recorder()
    asyncio.run(run(sctp))
    assert 1 < len(sctp.packets) <= 3  # 60 x 44 bytes in 1,189-byte packets
    assert all(len(p) <= SCTP_MAX_PACKET_LENGTH for p in sctp.packets)
    tsns = [c.tsn for p in sctp.packets for c in parse_packet(p)[3]]
    assert tsns == list(range(60))


def test_handshake_chunks_go_alone_and_outside_a_pass_nothing_waits():
    async def run(sctp: Recorder) -> None:
        await sctp._send_chunk(_data(1, b"lone"))  # no pass: sent at once
        assert len(sctp.packets) == 1

        async def one_pass() -> None:
            await sctp._send_chunk(_data(2, b"x"))
            await sctp._send_chunk(InitChunk())
            await sctp._send_chunk(_data(3, b"y"))

        await sctp._ptl_pass(one_pass)

    sctp = Recorder()
    asyncio.run(run(sctp))
    kinds = [[type(c).__name__ for c in parse_packet(p)[3]] for p in sctp.packets]
    assert kinds == [["DataChunk"], ["DataChunk"], ["InitChunk"], ["DataChunk"]]


async def transfer(bundling: bool, messages: int = 300) -> tuple[bool, int]:
    """Tiny messages between two aiortc peers on this host: whether they arrived
    exact and in order, and how many packets the sender's association sent."""
    async with peer_pair() as (a, b):
        opened = asyncio.Event()
        channel = a.createDataChannel("acks", ordered=True)
        channel.on("open", opened.set)
        if bundling:
            assert use_bundling(a)
        else:
            a.sctp.__class__ = Counting
        got, done = collect(b, messages)
        await negotiate(a, b, lambda b: use_bundling(b) or pytest.fail("no association"))
        await asyncio.wait_for(opened.wait(), 20)
        before = a.sctp.packets_sent
        sent = [i.to_bytes(2, "big") * 13 for i in range(messages)]  # 26 bytes each
        for m in sent:
            channel.send(m)
        await asyncio.wait_for(done.wait(), 30)
        exact = hashlib.sha256(b"".join(got)).digest() == hashlib.sha256(b"".join(sent)).digest()
        return exact, a.sctp.packets_sent - before


class Counting(DelayedSackSctp):
    """aiortc's one-chunk-per-packet sending, counted the same way."""

    packets_sent = 0

    async def _send_chunk(self, chunk) -> None:
        self.packets_sent += 1
        await super()._send_chunk(chunk)


@pytest.mark.network
def test_a_real_pair_moves_tiny_messages_exactly_in_far_fewer_packets():
    exact_plain, packets_plain = asyncio.run(transfer(bundling=False))
    exact_bundled, packets_bundled = asyncio.run(transfer(bundling=True))
    assert exact_plain and exact_bundled
    assert packets_plain >= 300  # one per message, at least
    assert packets_bundled <= packets_plain / 5  # measured: 301 against 15


def test_only_aiortcs_classes_are_swapped():
    class NoSctp:
        sctp = None

    assert not use_bundling(NoSctp())
    assert issubclass(BundlingSctp, RTCSctpTransport)
    assert issubclass(BundlingSctp, DelayedSackSctp)
