"""The obfs4 client and server factories on loopback: echo, probe resistance, the cap, key sets.

The server runs with short timers (ServerPolicy is a parameter so tests need not
wait 300 s): every probe must get zero bytes and a FIN no earlier than
``unauth_timeout_s`` and no later than ``unauth_timeout_s + unauth_jitter_s`` (plus
scheduling slack), or right after the prober itself closes (docs/transports/obfs4.md §2.6, and the
stricter policy in transports/obfs4/transport.py's docstring).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import time
from collections.abc import AsyncIterator

import pytest

from censor_sim.prober.observe import observe, run_suite
from censor_sim.prober.probes import Probe, http_get, replay_probe
from transports.base import TransportError
from transports.common.elligator2 import Keypair, new_keypair, public_key_from_private
from transports.obfs4.handshake import ClientHandshake, ServerKey
from transports.obfs4.statefile import ClientArgs, ServerState, encode_cert
from transports.obfs4.transport import (
    TRANSPORT,
    Obfs4ClientFactory,
    Obfs4ServerFactory,
    ServerPolicy,
)

UNAUTH_S = 1.0
JITTER_S = 0.5
HANDSHAKE_S = 0.5
SLACK_S = 0.5  # scheduling on a loaded 2-vCPU VM
WATCH_S = UNAUTH_S + JITTER_S + SLACK_S + 0.5  # a bit above the policy's maximum


def short_policy(**kw: float) -> ServerPolicy:
    base = {"unauth_timeout_s": UNAUTH_S, "unauth_jitter_s": JITTER_S,
            "handshake_timeout_s": HANDSHAKE_S}
    return ServerPolicy(**(base | kw))


def make_key() -> ServerKey:
    state = ServerState.generate()
    return ServerKey(state.node_id, Keypair(state.identity_private,
                                            public_key_from_private(state.identity_private)))


def client_for(key: ServerKey, iat_mode: int = 0, timeout_s: float = 5.0) -> Obfs4ClientFactory:
    return Obfs4ClientFactory(key.node_id, key.identity.public, iat_mode, timeout_s=timeout_s)


class EchoBridge:
    """An asyncio listener that wraps each connection with an obfs4 server factory and
    echoes the inner stream; records what happened to each connection."""

    def __init__(self, factory: Obfs4ServerFactory) -> None:
        self.factory = factory
        self.accepted = 0
        self.rejected: list[str] = []
        self.echoed: list[int] = []
        self.errors: list[BaseException] = []
        self.server: asyncio.Server | None = None
        self.port = 0
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> EchoBridge:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        if self._tasks:  # handlers end by themselves once their peers are gone
            _, pending = await asyncio.wait(list(self._tasks), timeout=3)
            for t in pending:
                t.cancel()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                inner_r, inner_w = await self.factory.wrap(reader, writer)
            except TransportError as exc:
                self.rejected.append(str(exc))
                writer.close()
                return
            self.accepted += 1
            total = 0
            try:
                while data := await inner_r.read(65536):
                    inner_w.write(data)
                    total += len(data)
                    await inner_w.drain()
            except ConnectionError:
                pass
            except Exception as exc:  # noqa: BLE001 - recorded and asserted on
                self.errors.append(exc)
            finally:
                inner_w.close()
                self.echoed.append(total)
        finally:
            self._tasks.discard(task)


@contextlib.asynccontextmanager
async def bridge(keys: list[ServerKey] | None = None, iat_mode: int = 0,
                 policy: ServerPolicy | None = None) -> AsyncIterator[EchoBridge]:
    factory = Obfs4ServerFactory(keys or [make_key()], os.urandom(24), iat_mode,
                                 policy or short_policy())
    b = await EchoBridge(factory).start()
    try:
        yield b
    finally:
        await b.stop()


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
               payload: bytes) -> bytes:
    async def send() -> None:
        writer.write(payload)
        await writer.drain()

    _, back = await asyncio.gather(send(), reader.readexactly(len(payload)))
    return back


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


# -- valid clients ---------------------------------------------------------------------

SIZES_IAT0 = [0, 1, 1427, 1428, 1 << 20]
SIZES_IAT12 = [0, 1, 1427, 1428, 100_000]


@pytest.mark.parametrize(("client_iat", "server_iat", "size"),
                         [(0, 0, n) for n in SIZES_IAT0]
                         + [(1, 1, n) for n in SIZES_IAT12]
                         + [(2, 2, n) for n in SIZES_IAT12]
                         + [(0, 2, 100_000), (2, 0, 100_000), (1, 2, 100_000)])
async def test_echo_is_byte_exact(client_iat: int, server_iat: int, size: int) -> None:
    payload = random.Random(size * 7 + client_iat).randbytes(size)
    async with bridge(iat_mode=server_iat) as b:
        key = b.factory.keys[0]
        reader, writer = await asyncio.wait_for(
            client_for(key, client_iat).dial("127.0.0.1", b.port), 5)
        try:
            back = await asyncio.wait_for(echo(reader, writer, payload), 20)
        finally:
            await close(writer)
        assert back == payload
        # The server sees our close as EOF and echoed exactly what we sent.
        for _ in range(250):
            if b.echoed:
                break
            await asyncio.sleep(0.02)
        assert b.echoed == [size]
        assert b.accepted == 1 and not b.rejected and not b.errors


async def test_empty_session_writes_nothing_and_ends_with_eof() -> None:
    """A 0-byte write sends no frame: the client reads nothing until the server closes."""
    async with bridge() as b:
        reader, writer = await client_for(b.factory.keys[0]).dial("127.0.0.1", b.port)
        writer.write(b"")
        await writer.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 0.3)
        await close(writer)
        for _ in range(250):
            if b.echoed:
                break
            await asyncio.sleep(0.02)
        assert b.echoed == [0]


async def test_server_factory_from_state_dir_publishes_cert_and_policy(tmp_path) -> None:
    factory = TRANSPORT.server_factory(tmp_path, {"iat-mode": "1", "unauth-timeout": "2.5",
                                                  "unauth-jitter": "0.25",
                                                  "handshake-timeout": "0.75",
                                                  "max-unauthenticated": "7"})
    assert isinstance(factory, Obfs4ServerFactory)
    assert factory.policy == ServerPolicy(handshake_timeout_s=0.75, unauth_timeout_s=2.5,
                                          unauth_jitter_s=0.25, max_unauthenticated=7)
    args = factory.smethod_args()
    assert set(args) == {"cert", "iat-mode"} and args["iat-mode"] == "1"
    assert len(args["cert"]) == 70
    client = TRANSPORT.client_factory(None, args)
    b = await EchoBridge(factory).start()
    try:
        reader, writer = await client.dial("127.0.0.1", b.port)
        try:
            assert await asyncio.wait_for(echo(reader, writer, b"x" * 5000), 10) == b"x" * 5000
        finally:
            await close(writer)
    finally:
        await b.stop()
    # The same state directory gives the same bridge.
    again = TRANSPORT.server_factory(tmp_path, {})
    assert again.smethod_args()["cert"] == args["cert"]


async def test_server_picks_the_right_key_from_a_set() -> None:
    """One listener, several identities (Conjure): each client's cert selects its key."""
    keys = [make_key() for _ in range(5)]
    async with bridge(keys=keys) as b:
        for i in (0, 2, 4, 3):
            reader, writer = await client_for(keys[i]).dial("127.0.0.1", b.port)
            try:
                msg = f"key {i}".encode() * 100
                assert await asyncio.wait_for(echo(reader, writer, msg), 5) == msg
            finally:
                await close(writer)
        # An identity that is not in the set gets silence.
        with pytest.raises(TransportError, match="timed out"):
            await client_for(make_key(), timeout_s=0.6).dial("127.0.0.1", b.port)
        assert b.accepted == 4


# -- client errors ----------------------------------------------------------------------

@pytest.mark.parametrize(("args", "words"), [
    ({"cert": "not base64!", "iat-mode": "0"}, "cert"),
    ({"cert": "AAAA", "iat-mode": "0"}, "cert length"),
    ({"iat-mode": "0"}, "missing argument 'cert'"),
    ({"cert": "A" * 70, "iat-mode": "3"}, "iat-mode"),
    ({"cert": "A" * 70}, "missing argument 'iat-mode'"),
])
def test_bad_client_args_are_a_clear_transport_error(args: dict[str, str], words: str) -> None:
    with pytest.raises(TransportError, match="obfs4 client arguments") as info:
        TRANSPORT.client_factory(None, args)
    assert words in str(info.value)


def test_good_client_args_parse() -> None:
    key = make_key()
    cert = encode_cert(key.node_id, key.identity.public)
    factory = TRANSPORT.client_factory(None, {"cert": cert, "iat-mode": "2"})
    assert isinstance(factory, Obfs4ClientFactory)
    assert (factory.node_id, factory.id_public, factory.iat_mode) == \
        ClientArgs(key.node_id, key.identity.public, 2)


async def test_wrong_cert_dial_fails_within_its_timeout() -> None:
    async with bridge() as b:
        real = b.factory.keys[0]
        wrong = Obfs4ClientFactory(real.node_id, make_key().identity.public, 0, timeout_s=0.8)
        t0 = time.monotonic()
        with pytest.raises(TransportError, match="timed out"):
            await wrong.dial("127.0.0.1", b.port)
        elapsed = time.monotonic() - t0
        assert 0.75 <= elapsed < 0.8 + SLACK_S


async def test_dial_to_a_closed_port_is_an_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises((TransportError, OSError)):
        await client_for(make_key(), timeout_s=2).dial("127.0.0.1", port)


# -- probes -----------------------------------------------------------------------------

def handshake_bytes(key: ServerKey, pad_len: int = 300) -> bytes:
    hs = ClientHandshake(key.node_id, key.identity.public, new_keypair(elligator=True))
    return hs.generate(pad_len=pad_len)


async def send_for_real(port: int, hello: bytes) -> bytes:
    """Send one client handshake and read the server's first flight (proves it was valid)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(hello)
        await writer.drain()
        got = b""
        while len(got) < 141:  # the smallest response + seed frame
            data = await asyncio.wait_for(reader.read(65536), 3)
            assert data, "the server closed instead of answering a valid handshake"
            got += data
        return got
    finally:
        await close(writer)


def probe_set(key: ServerKey, captured: bytes) -> list[Probe]:
    rng = random.Random(4)
    return [
        Probe("empty", b""),
        *(Probe(f"rand-{n}", rng.randbytes(n)) for n in (23, 8191, 8192, 20000)),
        Probe("http", http_get()),
        Probe("valid+1", handshake_bytes(key, pad_len=200) + b"\x00"),
        Probe("wrong-key", handshake_bytes(make_key())),
        replay_probe("replay", captured),
    ]


async def test_every_probe_gets_silence_then_fin_after_the_timeout() -> None:
    async with bridge() as b:
        key = b.factory.keys[0]
        captured = handshake_bytes(key)
        assert len(await send_for_real(b.port, captured)) >= 141
        accepted_before = b.accepted
        probes = probe_set(key, captured)
        results = await run_suite("127.0.0.1", b.port, probes, WATCH_S, concurrency=len(probes))
        lines = [(r.probe, r.close, r.close_after_s, r.response_len) for r in results]
        for r in results:
            assert r.connected and r.response_len == 0, lines
            assert r.close == "FIN", lines
            assert r.close_after_s is not None
            assert UNAUTH_S - 0.01 <= r.close_after_s <= UNAUTH_S + JITTER_S + SLACK_S, lines
        assert b.accepted == accepted_before  # no probe got past the handshake
        assert len(b.rejected) == len(probes)
        assert all("obfs4 handshake failed" in m for m in b.rejected)
        assert b.factory.failures["replayed MAC_C"] == 1
        assert not b.factory.unauthenticated


@pytest.mark.parametrize("payload", [b"", os.urandom(100), os.urandom(20000)],
                         ids=["silent", "rand-100", "rand-20000"])
async def test_server_closes_right_after_the_prober_closes(payload: bytes) -> None:
    async with bridge() as b:
        reader, writer = await asyncio.open_connection("127.0.0.1", b.port)
        writer.write(payload)
        await writer.drain()
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        writer.write_eof()  # our FIN; the server must answer with its own, and no data
        got = await asyncio.wait_for(reader.read(), 0.5)
        assert got == b""
        assert time.monotonic() - t0 < 0.5 < UNAUTH_S
        await close(writer)


async def test_unauthenticated_cap_closes_the_oldest() -> None:
    cap = 3
    async with bridge(policy=short_policy(max_unauthenticated=cap, unauth_timeout_s=5.0,
                                          handshake_timeout_s=5.0)) as b:
        conns = []
        for i in range(cap):
            conns.append(await asyncio.open_connection("127.0.0.1", b.port))
            for _ in range(100):
                if len(b.factory.unauthenticated) == i + 1:
                    break
                await asyncio.sleep(0.01)
            assert len(b.factory.unauthenticated) == i + 1
        # Nobody is closed while we are at the cap.
        for r, _ in conns:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(r.read(1), 0.1)
        conns.append(await asyncio.open_connection("127.0.0.1", b.port))
        oldest = await asyncio.wait_for(conns[0][0].read(), 1.0)
        assert oldest == b""  # FIN, no data
        for r, _ in conns[1:]:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(r.read(1), 0.2)
        assert len(b.factory.unauthenticated) == cap
        for _, w in conns:
            await close(w)


async def test_observe_sees_a_fin_for_a_silent_probe_at_the_timeout() -> None:
    """The prober's own view of one probe, as a cross-check of run_suite's numbers."""
    async with bridge(policy=short_policy(unauth_jitter_s=0.0)) as b:
        r = await observe("127.0.0.1", b.port, Probe("empty", b""), WATCH_S)
    assert (r.close, r.response_len) == ("FIN", 0)
    assert r.close_after_s is not None and UNAUTH_S - 0.01 <= r.close_after_s <= UNAUTH_S + SLACK_S


def test_server_factory_honours_identity_options(tmp_path) -> None:
    state = ServerState.generate()
    opts = {"node-id": state.node_id.hex(), "private-key": state.identity_private.hex(),
            "drbg-seed": state.drbg_seed.hex()}
    factory = TRANSPORT.server_factory(tmp_path, opts)
    assert isinstance(factory, Obfs4ServerFactory)
    assert factory.smethod_args()["cert"] == state.cert
    assert factory.len_seed == state.drbg_seed
