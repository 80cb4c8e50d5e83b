"""One receive budget shared by the clients' associations."""

from __future__ import annotations

import asyncio

import pytest
from aiortc.rtcsctptransport import RTCSctpTransport

from transports.snowflake.rwndshare import BUDGET, CEILING, FLOOR, SharedReceiveWindow


class Assoc:
    _advertised_rwnd = 1 << 20


def test_a_lone_client_keeps_aiortcs_full_window():
    windows, a = SharedReceiveWindow(), Assoc()
    windows.join(a)
    assert a._advertised_rwnd == CEILING == 1 << 20


def test_the_budget_is_split_and_given_back_as_clients_come_and_go():
    windows = SharedReceiveWindow(budget=2 << 20, floor=64 << 10, ceiling=1 << 20)
    members = [Assoc() for _ in range(20)]
    for a in members:
        windows.join(a)
    assert {a._advertised_rwnd for a in members} == {(2 << 20) // 20}
    for a in members[2:]:
        windows.leave(a)
    assert {a._advertised_rwnd for a in members[:2]} == {1 << 20}  # at the ceiling again


def test_the_share_never_falls_below_the_floor():
    windows = SharedReceiveWindow()
    members = [Assoc() for _ in range(BUDGET // FLOOR + 10)]
    for a in members:
        windows.join(a)
    assert windows.share() == FLOOR
    assert {a._advertised_rwnd for a in members} == {FLOOR}


def test_joining_twice_leaving_a_stranger_and_none_change_nothing():
    windows, a = SharedReceiveWindow(budget=1 << 20), Assoc()
    windows.join(a)
    windows.join(a)
    windows.join(None)
    windows.leave(Assoc())
    assert windows.share() == 1 << 20 and a._advertised_rwnd == 1 << 20


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="floor <= ceiling"):
        SharedReceiveWindow(floor=2 << 20, ceiling=1 << 20)


def test_aiortc_advertises_the_window_it_is_given():
    """Pins the private attribute: aiortc must read ``_advertised_rwnd`` when it
    builds a SACK, or the share would silently stop reaching the sender."""
    sent = []

    async def run():
        sctp = RTCSctpTransport.__new__(RTCSctpTransport)
        sctp._sack_misordered, sctp._sack_duplicates = set(), []
        sctp._last_received_tsn = 7

        async def capture(chunk):
            sent.append(chunk)

        sctp._send_chunk = capture
        SharedReceiveWindow(budget=300_000).join(sctp)
        await sctp._send_sack()

    asyncio.run(run())
    assert sent[0].advertised_rwnd == 300_000
