"""ICE consent that expires after 30 s of silence, not after six slow answers."""

from __future__ import annotations

import asyncio

import pytest
from aioice import stun
from aioice.ice import Connection

from tests.support.aiortcpair import collect, negotiate, peer_pair
from transports.snowflake.consent import (
    CONSENT_TIMEOUT_S,
    RETRANSMISSIONS,
    PatientConsent,
    ice_connection,
    use_patient_consent,
)


class Protocol:
    """Answers (or not) the consent checks; records how they were asked."""

    def __init__(self, answer) -> None:
        self.answer, self.calls, self.retransmissions = answer, 0, []

    async def request(self, request, addr, integrity_key=None, retransmissions=None):
        self.calls += 1
        self.retransmissions.append(retransmissions)
        if not self.answer(self.calls):
            raise stun.TransactionTimeout()
        return None, addr


class Pair:
    remote_addr = ("198.18.0.9", 5000)

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol


def fake_connection(protocol: Protocol, timeout_s: float) -> tuple[PatientConsent, list[float]]:
    conn = PatientConsent.__new__(PatientConsent)
    closed: list[float] = []
    conn._nominated = {1: Pair(protocol)}
    conn.remote_password = "pw"
    conn.build_request = lambda pair, nominate: object()
    conn.consent_interval_s = 0.01
    conn.consent_timeout_s = timeout_s

    async def close():
        closed.append(asyncio.get_running_loop().time())

    conn.close = close
    return conn, closed


def test_the_rfc_timeout_and_retransmissions():
    assert CONSENT_TIMEOUT_S == 30.0  # RFC 7675 §5.1
    assert RETRANSMISSIONS >= 1  # aioice sends one request and gives up after 0.5 s


def test_consent_expires_once_no_check_was_answered_for_the_timeout():
    protocol = Protocol(lambda n: False)
    conn, closed = fake_connection(protocol, timeout_s=0.2)

    async def run():
        t0 = asyncio.get_running_loop().time()
        await asyncio.wait_for(conn.query_consent(), 5)
        return closed[0] - t0

    waited = asyncio.run(run())
    assert 0.2 <= waited < 1.0
    assert protocol.calls > 6  # aioice would have closed after six
    assert set(protocol.retransmissions) == {RETRANSMISSIONS}


def test_an_answer_now_and_then_keeps_consent_fresh():
    protocol = Protocol(lambda n: n % 7 == 0)  # six failures, then an answer, again and again

    async def run():
        conn, closed = fake_connection(protocol, timeout_s=0.5)
        task = asyncio.create_task(conn.query_consent())
        await asyncio.sleep(1.5)
        task.cancel()
        return closed

    assert asyncio.run(run()) == []
    assert protocol.calls >= 14


def test_aioice_still_has_what_the_subclass_overrides_and_reads():
    assert callable(Connection.query_consent)
    assert callable(Connection.build_request)
    conn = Connection(ice_controlling=False)
    for name in ("_nominated", "_query_consent_task", "remote_password"):
        assert hasattr(conn, name), name


@pytest.mark.network
def test_a_real_peer_connection_gets_patient_consent_and_still_connects():
    async def run():
        async with peer_pair() as (a, b):
            opened = asyncio.Event()
            channel = a.createDataChannel("c")
            assert use_patient_consent(a)
            channel.on("open", opened.set)
            _, got = collect(b, 1)
            await negotiate(a, b, lambda b: use_patient_consent(b) or pytest.fail("no ICE"))
            await asyncio.wait_for(opened.wait(), 20)
            channel.send(b"x")
            await asyncio.wait_for(got.wait(), 10)
            conn = ice_connection(b)
            return type(conn), conn._query_consent_task is not None

    kind, consent_running = asyncio.run(run())
    assert kind is PatientConsent and consent_running


def test_a_connection_without_a_transport_is_left_alone():
    class NoSctp:
        sctp = None

    assert ice_connection(NoSctp()) is None
    assert not use_patient_consent(NoSctp())
