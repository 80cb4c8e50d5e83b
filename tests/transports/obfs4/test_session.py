"""The obfs4 session layer after a real handshake: bad frames end it cleanly; seeds reseed.

A peer that completed the handshake (or an on-path attacker flipping bytes, which
the frames' Poly1305 tags catch) can send corrupted, truncated, oversize or
malformed frames. Each must end the session: the application's reader gets what
decoded before the bad frame, then EOF or a ConnectionError; the socket is
closed; nothing raises into the event loop's exception handler
(docs/transports/obfs4.md §3.4). The peers here are hand-made from the handshake and framing
modules, so they know the session keys and can send exactly the bytes a test
needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from transports.base import TransportError
from transports.common.elligator2 import Keypair, new_keypair, public_key_from_private
from transports.common.ntor import derive_session_keys
from transports.common.probdist import WeightedDist, iat_seed
from transports.common.relay import relay
from transports.common.replayfilter import ReplayFilter
from transports.obfs4.framing import Decoder, Encoder
from transports.obfs4.handshake import (
    ClientHandshake,
    ServerKey,
    parse_client_hello,
    server_response,
)
from transports.obfs4.packet import (
    PACKET_TYPE_PRNG_SEED,
    PacketDecoder,
    PacketEncoder,
    make_packet,
)
from transports.obfs4.session import MAX_IAT_DELAY, Obfs4Protocol
from transports.obfs4.statefile import ServerState
from transports.obfs4.transport import Obfs4ClientFactory, Obfs4ServerFactory, ServerPolicy

MSS = 1448

def make_key() -> ServerKey:
    state = ServerState.generate()
    return ServerKey(state.node_id, Keypair(state.identity_private,
                                            public_key_from_private(state.identity_private)))


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict]]:
    """Everything that reaches the running loop's exception handler during the test."""
    loop = asyncio.get_running_loop()
    calls: list[dict] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, ctx: calls.append(ctx))
    try:
        yield calls
    finally:
        loop.set_exception_handler(old)


async def assert_loop_clean(calls: list[dict]) -> None:
    # Let pending callbacks run and unreferenced futures report, then look.
    for _ in range(3):
        await asyncio.sleep(0.02)
        gc.collect()
    await asyncio.sleep(0.02)
    assert not calls, [c.get("message") for c in calls]


@dataclass
class AppView:
    """What an application reading one session's inner reader saw."""

    data: bytearray = field(default_factory=bytearray)
    end: str | None = None  # "eof", "ConnectionError", or another exception's class name
    exc: BaseException | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    proto: Obfs4Protocol | None = None

    def clean_end(self) -> bool:
        return self.end in ("eof", "ConnectionError")


async def read_all(reader: asyncio.StreamReader, view: AppView) -> None:
    try:
        while chunk := await reader.read(65536):
            view.data += chunk
        view.end = "eof"
    except ConnectionError as exc:
        view.end, view.exc = "ConnectionError", exc
    except Exception as exc:  # noqa: BLE001 - the tests classify it
        view.end, view.exc = type(exc).__name__, exc
    finally:
        view.done.set()


async def finish(tasks: set[asyncio.Task]) -> None:
    """Let connection handlers end by themselves (cancelling one that start_server
    runs makes asyncio report "Exception in callback" on 3.11); cancel stragglers."""
    if tasks:
        _, pending = await asyncio.wait(list(tasks), timeout=3)
        for t in pending:
            t.cancel()


# -- peers -----------------------------------------------------------------------------

@contextlib.asynccontextmanager
async def our_server(seed: bytes | None = None, iat_mode: int = 0
                     ) -> AsyncIterator[tuple[ServerKey, int, list[AppView]]]:
    """Our obfs4 server; each session's inner reader is read to its end into an AppView."""
    key = make_key()
    factory = Obfs4ServerFactory([key], seed or os.urandom(24), iat_mode,
                                 ServerPolicy(handshake_timeout_s=2.0, unauth_timeout_s=2.0,
                                              unauth_jitter_s=0.0))
    views: list[AppView] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            inner_r, inner_w = await factory.wrap(reader, writer)
        except TransportError:
            return
        view = AppView(proto=inner_w.transport.get_extra_info("obfs4"))
        views.append(view)
        await read_all(inner_r, view)
        inner_w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield key, server.sockets[0].getsockname()[1], views
    finally:
        server.close()


@dataclass
class FakeClient:
    """A client that did a real handshake by hand and now writes raw frames."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    frames: Encoder  # client->server frame encoder (shared with `packets`)
    packets: PacketEncoder
    decoder: PacketDecoder
    seeds: list[bytes]


async def fake_client(key: ServerKey, port: int) -> FakeClient:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    hs = ClientHandshake(key.node_id, key.identity.public, new_keypair(elligator=True))
    writer.write(hs.generate())
    await writer.drain()
    buf = b""
    while (done := hs.parse_server_response(buf)) is None:
        chunk = await asyncio.wait_for(reader.read(8192), 5)
        assert chunk, "server closed during the handshake"
        buf += chunk
    consumed, key_seed = done
    c2s, s2c = derive_session_keys(key_seed)
    frames = Encoder(c2s)
    decoder = PacketDecoder(Decoder(s2c))
    _, seeds = decoder.feed(buf[consumed:])
    return FakeClient(reader, writer, frames, PacketEncoder(frames), decoder, seeds)


@contextlib.asynccontextmanager
async def fake_server(key: ServerKey, seed: bytes, script: Callable[[Encoder], bytes],
                      inline: bool, close_after: bool) -> AsyncIterator[int]:
    """A server that answers one real handshake, then sends ``script(s2c_encoder)``:
    in the same write as its response (``inline``) or a moment later."""
    tasks: set[asyncio.Task] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        buf = b""
        while (hello := parse_client_hello(buf, [key], time.time(), ReplayFilter())) is None:
            chunk = await reader.read(8192)
            if not chunk:
                return
            buf += chunk
        response, key_seed = server_response(hello)
        _, s2c = derive_session_keys(key_seed)
        enc = Encoder(s2c)
        first = response + PacketEncoder(enc).encode_seed(seed)
        if inline:
            writer.write(first + script(enc))
        else:
            writer.write(first)
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.write(script(enc))
        await writer.drain()
        if close_after:
            writer.close()
        else:
            with contextlib.suppress(Exception):
                await reader.read()  # hold the connection open until the client goes
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await finish(tasks)


# -- frame tampering -------------------------------------------------------------------

def flip(frame: bytes, index: int) -> bytes:
    out = bytearray(frame)
    out[index] ^= 0x01
    return bytes(out)


def with_length(frame: bytes, length: int) -> bytes:
    """The same frame with its (masked) length field changed to decode as ``length``."""
    real = len(frame) - 2
    out = bytearray(frame)
    delta = real ^ length
    out[0] ^= delta >> 8
    out[1] ^= delta & 0xFF
    return bytes(out)


def data_frame(enc: Encoder, data: bytes) -> bytes:
    return PacketEncoder(enc).encode(data)


GOOD = b"good bytes before the bad frame"

# name -> (frames after the GOOD one, given the encoder); each must end the session.
BAD_FRAMES: dict[str, Callable[[Encoder], bytes]] = {
    "flipped-tag": lambda e: flip(data_frame(e, b"x" * 100), 2),
    "flipped-ciphertext": lambda e: flip(data_frame(e, b"x" * 100), -1),
    "flipped-length": lambda e: flip(data_frame(e, b"x" * 100), 1) + os.urandom(2 * MSS),
    "random-garbage": lambda e: os.urandom(3000),
    "oversize-1447": lambda e: with_length(data_frame(e, b"x" * 100), 1447) + bytes(2 * MSS),
    "oversize-65535": lambda e: with_length(data_frame(e, b"x" * 100), 0xFFFF) + bytes(2 * MSS),
    "undersize-15": lambda e: with_length(data_frame(e, b"x" * 100), 15) + bytes(2 * MSS),
    "packet-under-3-bytes": lambda e: e.encode(b"\x00\x00"),
    "packet-length-lies": lambda e: e.encode(b"\x00\x05\x00abc"),
}


async def wait_closed_by_peer(reader: asyncio.StreamReader, within: float = 3.0) -> None:
    """The peer closed the TCP connection (FIN or RST), and sent nothing more that decodes."""
    with contextlib.suppress(ConnectionError):
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass


# -- server side: a fake client sends bad frames to our server -------------------------------

async def server_case(case: str) -> AppView:
    """Our server's session gets GOOD, then the bad frames; returns once it has hung up."""
    async with our_server() as (key, port, views):
        peer = await fake_client(key, port)
        peer.writer.write(data_frame(peer.frames, GOOD) + BAD_FRAMES[case](peer.frames))
        await peer.writer.drain()
        await wait_closed_by_peer(peer.reader)  # the server hung up on us
        assert len(views) == 1
        await asyncio.wait_for(views[0].done.wait(), 3)
        peer.writer.close()
        return views[0]


@pytest.mark.parametrize("case", list(BAD_FRAMES))
async def test_server_session_bad_frames_close_the_connection(case: str, loop_errors) -> None:
    view = await server_case(case)
    assert bytes(view.data) == GOOD  # what decoded before the bad frame got through
    assert view.end is not None and view.proto is not None and view.proto.raw.is_closing()
    await assert_loop_clean(loop_errors)


@pytest.mark.parametrize("case", list(BAD_FRAMES))
async def test_server_session_bad_frames_give_the_reader_eof_or_connection_error(
        case: str) -> None:
    view = await server_case(case)
    assert view.clean_end(), f"reader raised {view.end}: {view.exc!r}"


async def test_server_session_truncated_frame_then_fin_is_eof(loop_errors) -> None:
    async with our_server() as (key, port, views):
        peer = await fake_client(key, port)
        good = data_frame(peer.frames, GOOD)
        half = data_frame(peer.frames, b"y" * 500)[:250]
        peer.writer.write(good + half)
        await peer.writer.drain()
        peer.writer.write_eof()
        await wait_closed_by_peer(peer.reader)
        await asyncio.wait_for(views[0].done.wait(), 3)
        assert (bytes(views[0].data), views[0].end) == (GOOD, "eof")
        peer.writer.close()
        await assert_loop_clean(loop_errors)


async def test_server_ignores_unknown_packets_and_client_seeds(loop_errors) -> None:
    """Unknown packet types and a seed from the client are decrypted and dropped."""
    seed = os.urandom(24)
    async with our_server(seed=seed) as (key, port, views):
        peer = await fake_client(key, port)
        assert peer.seeds == [seed]  # the server's PRNG seed came with its response
        wire = (peer.frames.encode(make_packet(0x7F, b"unknown type"))
                + peer.frames.encode(make_packet(PACKET_TYPE_PRNG_SEED, os.urandom(24)))
                + peer.frames.encode(make_packet(PACKET_TYPE_PRNG_SEED, b"short seed"))
                + data_frame(peer.frames, GOOD))
        peer.writer.write(wire)
        await peer.writer.drain()
        for _ in range(100):
            if views and bytes(views[0].data) == GOOD:
                break
            await asyncio.sleep(0.02)
        assert bytes(views[0].data) == GOOD and not views[0].done.is_set()
        proto = views[0].proto
        assert proto is not None
        assert proto.shaping.len_dist.values == WeightedDist(seed, 0, MSS).values
        peer.writer.close()
        await asyncio.wait_for(views[0].done.wait(), 3)
        assert views[0].end in ("eof", "ConnectionError")
        await assert_loop_clean(loop_errors)


# -- client side: a fake server sends bad frames to our client -------------------------------

CLIENT_CASES = ["flipped-tag", "random-garbage", "oversize-65535", "packet-length-lies"]


async def client_case(case: str, inline: bool) -> tuple[AppView, asyncio.StreamWriter]:
    """Our client's session gets GOOD then bad frames, with the response or a bit later."""
    key = make_key()
    script = BAD_FRAMES[case]
    async with fake_server(key, os.urandom(24), lambda e: data_frame(e, GOOD) + script(e),
                           inline=inline, close_after=False) as port:
        client = Obfs4ClientFactory(key.node_id, key.identity.public, 0, timeout_s=5)
        reader, writer = await client.dial("127.0.0.1", port)
        view = AppView()
        await asyncio.wait_for(read_all(reader, view), 3)
        writer.close()
        return view, writer


@pytest.mark.parametrize("inline", [True, False], ids=["with-response", "later"])
@pytest.mark.parametrize("case", CLIENT_CASES)
async def test_client_session_bad_frames_close_the_connection(case: str, inline: bool,
                                                              loop_errors) -> None:
    view, writer = await client_case(case, inline)
    assert GOOD.startswith(bytes(view.data))
    assert view.end is not None and writer.transport.is_closing()
    await assert_loop_clean(loop_errors)


@pytest.mark.parametrize("inline", [True, False], ids=["with-response", "later"])
@pytest.mark.parametrize("case", CLIENT_CASES)
async def test_client_session_bad_frames_deliver_good_data_then_eof_or_connection_error(
        case: str, inline: bool) -> None:
    view, _ = await client_case(case, inline)
    assert view.clean_end(), f"reader raised {view.end}: {view.exc!r}"
    # Decoded before the bad frame, so delivered first (obfs4proxy's Read does the same);
    # StreamReader.read() raises a set exception before returning buffered bytes.
    assert bytes(view.data) == GOOD


async def test_client_session_truncated_frame_then_fin_is_eof(loop_errors) -> None:
    key = make_key()
    async with fake_server(key, os.urandom(24),
                           lambda e: data_frame(e, GOOD) + data_frame(e, b"z" * 900)[:400],
                           inline=False, close_after=True) as port:
        client = Obfs4ClientFactory(key.node_id, key.identity.public, 0, timeout_s=5)
        reader, writer = await client.dial("127.0.0.1", port)
        view = AppView()
        await asyncio.wait_for(read_all(reader, view), 3)
        assert (bytes(view.data), view.end) == (GOOD, "eof")
        writer.close()
        await assert_loop_clean(loop_errors)


async def test_client_handshake_answer_with_bad_mac_is_a_transport_error(loop_errors) -> None:
    """A response whose MAC_S fails (a tampered first flight) fails the dial, cleanly."""
    key = make_key()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buf = b""
        while (hello := parse_client_hello(buf, [key], time.time(), None)) is None:
            buf += await reader.read(8192)
        response, _ = server_response(hello, pad_len=100)
        writer.write(flip(response, len(response) - 1))
        await writer.drain()
        await reader.read()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        client = Obfs4ClientFactory(key.node_id, key.identity.public, 0, timeout_s=3)
        with pytest.raises(TransportError, match="MAC_S"):
            await client.dial("127.0.0.1", port)
    finally:
        server.close()
    await assert_loop_clean(loop_errors)


# -- both ends ours, with an on-path tamperer between them -----------------------------------

@contextlib.asynccontextmanager
async def tampering_relay(target_port: int, tamper_from: int) -> AsyncIterator[int]:
    """A TCP relay that flips one bit in client->server byte ``tamper_from``."""
    tasks: set[asyncio.Task] = set()

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, tamper: bool) -> None:
        seen = 0
        try:
            while data := await src.read(65536):
                if tamper and seen <= tamper_from < seen + len(data):
                    data = flip(data, tamper_from - seen)
                seen += len(data)
                dst.write(data)
                await dst.drain()
        except ConnectionError:
            pass
        finally:
            dst.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        up_r, up_w = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(pump(reader, up_w, True), pump(up_r, writer, False))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await finish(tasks)


async def test_tampered_stream_between_our_client_and_server_ends_cleanly(loop_errors) -> None:
    """An on-path bit flip after the handshake: both ends hang up, nothing escapes.

    The server side relays the session to an upstream exactly as ``python -m
    transports.pt`` does (``transports.common.relay.relay`` inside a start_server callback,
    no try/except), so an exception out of the session would reach the loop's
    exception handler ("Unhandled exception in client_connected_cb").
    """
    key = make_key()
    factory = Obfs4ServerFactory([key], os.urandom(24), 0,
                                 ServerPolicy(handshake_timeout_s=2.0, unauth_timeout_s=2.0,
                                              unauth_jitter_s=0.0))
    upstream_got = bytearray()
    upstream_done = asyncio.Event()

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                upstream_got.extend(data)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            upstream_done.set()

    up_server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    up_port = up_server.sockets[0].getsockname()[1]

    async def bridge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        inner = await factory.wrap(reader, writer)
        await relay(inner, await asyncio.open_connection("127.0.0.1", up_port))

    br_server = await asyncio.start_server(bridge, "127.0.0.1", 0)
    br_port = br_server.sockets[0].getsockname()[1]
    try:
        # The client's request is at most 8192 bytes: flip a bit in its first frame.
        async with tampering_relay(br_port, 8192 + 40) as relay_port:
            client = Obfs4ClientFactory(key.node_id, key.identity.public, 0, timeout_s=5)
            reader, writer = await client.dial("127.0.0.1", relay_port)
            writer.write(b"A" * 20000)
            await writer.drain()
            view = AppView()
            await asyncio.wait_for(read_all(reader, view), 5)
            await asyncio.wait_for(upstream_done.wait(), 5)
            # Everything the server let through is a prefix of what we sent.
            assert bytes(upstream_got) == b"A" * len(upstream_got) and len(upstream_got) < 20000
            assert bytes(view.data) == b"A" * len(view.data)
            writer.close()
            await assert_loop_clean(loop_errors)
            assert view.clean_end(), (view.end, view.exc)
    finally:
        br_server.close()
        up_server.close()


# -- the client mimics the server's shape -----------------------------------------------------

@pytest.mark.parametrize("iat_mode", [0, 1, 2])
async def test_client_reseeds_its_distributions_from_the_server_seed(iat_mode: int) -> None:
    seed = os.urandom(24)
    async with our_server(seed=seed) as (key, port, views):
        client = Obfs4ClientFactory(key.node_id, key.identity.public, iat_mode, timeout_s=5)
        reader, writer = await client.dial("127.0.0.1", port)
        proto = writer.transport.get_extra_info("obfs4")
        assert isinstance(proto, Obfs4Protocol) and not proto.is_server
        want = WeightedDist(seed, 0, MSS)
        for _ in range(100):  # the seed frame normally arrives with the response
            if proto.shaping.len_dist.values == want.values:
                break
            await asyncio.sleep(0.02)
        got = proto.shaping.len_dist
        assert (got.values, got.weights, got.prob, got.alias) == \
            (want.values, want.weights, want.prob, want.alias)
        if iat_mode:
            want_iat = WeightedDist(iat_seed(seed), 0, MAX_IAT_DELAY)
            assert proto.shaping.iat_dist is not None
            assert proto.shaping.iat_dist.values == want_iat.values
            assert proto.shaping.iat_dist.prob == want_iat.prob
        else:
            assert proto.shaping.iat_dist is None
        # The server shapes with the same table.
        for _ in range(100):
            if views:
                break
            await asyncio.sleep(0.02)
        server_proto = views[0].proto
        assert server_proto is not None and server_proto.is_server
        assert server_proto.shaping.len_dist.values == want.values
        writer.close()


@pytest.mark.parametrize("iat_mode", [1, 2])
async def test_paced_writes_apply_backpressure(iat_mode: int) -> None:
    async with our_server() as (key, port, _views):
        client = Obfs4ClientFactory(key.node_id, key.identity.public, iat_mode, timeout_s=5)
        _, writer = await client.dial("127.0.0.1", port)
        try:
            writer.write(bytes(1 << 20))  # seconds of pacing at 1448 B per 0-10 ms
            try:
                await asyncio.wait_for(writer.drain(), 0.2)
            except TimeoutError:
                return  # drain() waits for the pacer: backpressure works
            high = writer.transport.get_write_buffer_limits()[1]
            assert writer.transport.get_write_buffer_size() <= high, \
                "drain() returned with 1 MB still queued for pacing"
        finally:
            writer.transport.abort()


async def test_paranoid_writes_survive_a_length_table_of_only_zero() -> None:
    """obfs4proxy panics when iat-mode 2 draws length 0; we resample, then send full segments."""
    async with our_server() as (key, port, views):
        client = Obfs4ClientFactory(key.node_id, key.identity.public, 2, timeout_s=5)
        _, writer = await client.dial("127.0.0.1", port)
        proto = writer.transport.get_extra_info("obfs4")
        await asyncio.sleep(0.1)  # the server's seed frame has reseeded the tables
        lens = proto.shaping.len_dist
        lens.values, lens.prob, lens.alias = [0], [1.0], [0]
        data = os.urandom(20_000)
        writer.write(data)
        await writer.drain()
        for _ in range(200):
            if views and len(views[0].data) >= len(data):
                break
            await asyncio.sleep(0.02)
        assert views and bytes(views[0].data) == data
        writer.close()


async def test_handshake_writer_sees_the_session_end(loop_errors) -> None:
    """attach() gives the socket to the session's protocol, but a server's connection
    handler still holds the handshake's StreamWriter and closes it when done: its
    wait_closed() must return once the session is over, whichever side ends it
    (it used to wait forever, so every managed-mode handler outlived its connection)."""
    key = make_key()
    factory = Obfs4ServerFactory([key], os.urandom(24), 0)
    outcomes: asyncio.Queue[str] = asyncio.Queue()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        inner_r, inner_w = await factory.wrap(reader, writer)
        if await inner_r.read(1) == b"s":
            inner_w.write(b"bye")
            inner_w.write_eof()  # the server ends the session
        else:
            await inner_r.read()  # the client ends it
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 2)
            await outcomes.put("closed")
        except TimeoutError:
            await outcomes.put("wait_closed() hung")

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    client = Obfs4ClientFactory(key.node_id, key.identity.public, 0, timeout_s=5)
    try:
        for who in (b"s", b"c"):
            reader, writer = await client.dial("127.0.0.1", server.sockets[0].getsockname()[1])
            writer.write(who)
            if who == b"s":
                assert await asyncio.wait_for(reader.read(), 2) == b"bye"
            writer.close()
            assert await asyncio.wait_for(outcomes.get(), 3) == "closed"
        await assert_loop_clean(loop_errors)
    finally:
        server.close()


async def test_session_end_waits_for_the_peer_so_a_late_segment_loses_nothing(loop_errors) -> None:
    """The application ends the session (``write_eof``) with a long response still
    queued while the peer is still sending: the tail of a padded burst whose first
    segment carried the request (seen on shaped links, about 1 flow in 300). The
    socket used to close at once; Linux then answered the late bytes (unread, or
    reaching a closed socket) with a RST that threw away the response still in the
    kernel's send queue, and the peer saw its data cut short. Now the session
    sends its FIN, drops what still comes and closes on the peer's FIN."""
    key = make_key()
    factory = Obfs4ServerFactory([key], os.urandom(24), 0)
    body = os.urandom(8 << 20)  # more than the socket buffers hold: most still queued
    ended = asyncio.Event()
    handlers: set[asyncio.Task] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        inner_r, inner_w = await factory.wrap(reader, writer)
        await inner_r.readexactly(3)
        inner_w.write(body)
        inner_w.write_eof()  # the upstream answered "Connection: close" and closed
        ended.set()
        await inner_r.read()  # as relay does: the other direction runs to its end
        inner_w.close()
        await inner_w.wait_closed()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    client = Obfs4ClientFactory(key.node_id, key.identity.public, 0, timeout_s=5)
    try:
        reader, writer = await client.dial("127.0.0.1", server.sockets[0].getsockname()[1])
        writer.write(b"GET")
        await asyncio.wait_for(ended.wait(), 5)
        await asyncio.sleep(0.05)  # the server's close has run; nothing read yet here
        writer.write(b"late padding" * 100)
        got = bytearray()
        try:
            async with asyncio.timeout(20):
                while chunk := await reader.read(1 << 20):
                    got += chunk
        except ConnectionError as exc:
            pytest.fail(f"{type(exc).__name__} after {len(got)} of {len(body)} bytes")
        assert len(got) == len(body) and got == body
        writer.close()
        await finish(handlers)
        await assert_loop_clean(loop_errors)
    finally:
        server.close()
