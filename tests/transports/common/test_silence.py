"""The unauthenticated pool's eviction order (transports/common/silence.py).

A full pool must displace the connection least likely to be a client: a proved
stranger, then one whose bytes hold no handshake, then one not yet examined;
within a tier the one with the fewest bytes waiting to be read, the oldest on a tie.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import pytest

from transports.common.silence import EVICTION_SCAN, Gatekeeper, ServerPolicy


class FakeWriter:
    """The two things the gatekeeper asks of a writer: its socket, and close()."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        self.sock, self.closed = sock, False

    def get_extra_info(self, name: str):
        return self.sock if name == "socket" else None

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


@contextlib.contextmanager
def pool(cap: int) -> Iterator[tuple[Gatekeeper, contextlib.ExitStack]]:
    with contextlib.ExitStack() as stack:
        yield Gatekeeper(ServerPolicy(max_unauthenticated=cap)), stack


def admit(gate: Gatekeeper, stack: contextlib.ExitStack, writer: FakeWriter,
          reader: asyncio.StreamReader | None = None) -> FakeWriter:
    stack.enter_context(gate.admitted(writer, reader))  # type: ignore[arg-type]
    return writer


def test_under_the_cap_nobody_is_closed_and_leaving_frees_the_place() -> None:
    with pool(3) as (gate, stack):
        ws = [admit(gate, stack, FakeWriter()) for _ in range(3)]
        assert len(gate) == 3 and not any(w.closed for w in ws)
        gate.examined(ws[1])
        assert len(gate.unauthenticated) == 3
    assert len(gate) == 0 and not gate.unauthenticated


def test_pending_connections_go_oldest_first() -> None:
    with pool(2) as (gate, stack):
        a, b = admit(gate, stack, FakeWriter()), admit(gate, stack, FakeWriter())
        c = admit(gate, stack, FakeWriter())
        assert (a.closed, b.closed, c.closed) == (True, False, False)
        assert gate.evicted == {"pending": 1}


def test_an_examined_connection_goes_before_an_older_pending_one() -> None:
    with pool(3) as (gate, stack):
        older, stranger, young = (admit(gate, stack, FakeWriter()) for _ in range(3))
        gate.examined(stranger)
        admit(gate, stack, FakeWriter())
        assert (older.closed, stranger.closed, young.closed) == (False, True, False)
        assert gate.evicted == {"examined": 1}


async def test_a_proved_stranger_goes_before_anyone_else() -> None:
    with pool(3) as (gate, stack):
        pending, examined, proved = (admit(gate, stack, FakeWriter()) for _ in range(3))
        gate.examined(examined)
        gate.examined(proved)
        reader = asyncio.StreamReader()
        silence = asyncio.create_task(gate.stay_silent(reader, proved, 0.0))  # type: ignore
        await asyncio.sleep(0)  # stay_silent has moved it to the silent tier and waits
        admit(gate, stack, FakeWriter())
        assert (pending.closed, examined.closed, proved.closed) == (False, False, True)
        assert gate.evicted == {"silent": 1}
        reader.feed_eof()
        await asyncio.wait_for(silence, 1.0)


def test_a_connection_with_bytes_waiting_in_the_kernel_is_passed_over() -> None:
    """The oldest pending connection's handshake has arrived but not been read: the
    next oldest, which has sent nothing, goes instead."""
    with pool(2) as (gate, stack):
        ours, theirs = socket.socketpair()
        stack.callback(ours.close)
        stack.callback(theirs.close)
        theirs.sendall(b"a client hello")
        client = admit(gate, stack, FakeWriter(ours))
        silent = admit(gate, stack, FakeWriter())
        admit(gate, stack, FakeWriter())
        assert (client.closed, silent.closed) == (False, True)


async def test_a_connection_with_bytes_in_its_stream_reader_is_passed_over() -> None:
    with pool(2) as (gate, stack):
        reader = asyncio.StreamReader()
        reader.feed_data(b"a client hello")
        client = admit(gate, stack, FakeWriter(), reader)
        silent = admit(gate, stack, FakeWriter(), asyncio.StreamReader())
        admit(gate, stack, FakeWriter())
        assert (client.closed, silent.closed) == (False, True)


async def test_the_one_with_the_fewest_bytes_waiting_goes() -> None:
    """A burst of short probes, each with its bytes waiting, accepted after a client
    whose longer hello is waiting too: a probe goes, not the older client."""
    with pool(3) as (gate, stack):
        sizes = [141, 37, 37]  # obfs4's shortest hello, then two 37-byte probes
        readers = [asyncio.StreamReader() for _ in sizes]
        for r, n in zip(readers, sizes, strict=True):
            r.feed_data(bytes(n))
        client, probe1, probe2 = (admit(gate, stack, FakeWriter(), r) for r in readers)
        admit(gate, stack, FakeWriter(), asyncio.StreamReader())
        assert (client.closed, probe1.closed, probe2.closed) == (False, True, False)


async def test_when_everyone_has_as_many_bytes_waiting_the_oldest_goes() -> None:
    with pool(2) as (gate, stack):
        readers = [asyncio.StreamReader() for _ in range(2)]
        for r in readers:
            r.feed_data(b"x")
        a, b = (admit(gate, stack, FakeWriter(), r) for r in readers)
        admit(gate, stack, FakeWriter())
        assert (a.closed, b.closed) == (True, False)


async def test_the_scan_for_a_quiet_victim_is_bounded() -> None:
    """Past EVICTION_SCAN connections eviction looks no further, so a flood cannot
    make each admission walk the whole pool: the quietest of the first 32 goes."""
    cap = EVICTION_SCAN + 1
    with pool(cap) as (gate, stack):
        busy = []
        for i in range(EVICTION_SCAN):
            r = asyncio.StreamReader()
            r.feed_data(bytes(2 if i == 5 else 3))
            busy.append(admit(gate, stack, FakeWriter(), r))
        quiet = admit(gate, stack, FakeWriter())
        admit(gate, stack, FakeWriter())
        assert busy[5].closed and not quiet.closed
        assert sum(w.closed for w in busy) == 1


@pytest.mark.parametrize("cap", [1, 5])
def test_the_pool_never_exceeds_its_cap(cap: int) -> None:
    with pool(cap) as (gate, stack):
        ws = [admit(gate, stack, FakeWriter()) for _ in range(3 * cap)]
        for w in ws[::2]:
            gate.examined(w)
        assert len(gate) == cap
        assert sum(not w.closed for w in ws) == cap


def test_a_policy_from_server_options():
    policy = ServerPolicy.from_options({"handshake-timeout": "5", "unauth-timeout": "7.5",
                                        "unauth-jitter": "0", "max-unauthenticated": "12",
                                        "iat-mode": "1"})
    assert (policy.handshake_timeout_s, policy.unauth_timeout_s, policy.unauth_jitter_s,
            policy.max_unauthenticated) == (5.0, 7.5, 0.0, 12)
    assert ServerPolicy.from_options({}) == ServerPolicy()
    with pytest.raises(ValueError):
        ServerPolicy.from_options({"max-unauthenticated": "1.5"})
