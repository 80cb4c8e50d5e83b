"""Session tickets: issue and redeem, once only, within their lifetime, on a clock."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.scramblesuit.handshake import HandshakeError
from transports.scramblesuit.tickets import (
    KEYS_FILE,
    LIFETIME_S,
    MAX_PAD,
    TICKET_LENGTH,
    TicketIssuer,
    parse_ticket_hello,
    ticket_handshake,
)

NOW = 1_795_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def test_a_ticket_round_trips_its_master_key_and_is_opaque():
    issuer = TicketIssuer(clock=Clock())
    master, ticket = issuer.new_ticket()
    assert len(ticket) == TICKET_LENGTH and master not in ticket
    assert issuer.open(ticket) == master
    assert TicketIssuer(clock=Clock()).open(ticket) is None  # another server's keys
    assert issuer.open(ticket[:-1] + bytes([ticket[-1] ^ 1])) is None


@pytest.mark.parametrize("pad", [0, 300, MAX_PAD])
def test_redemption_gives_both_ends_the_same_master_key_once(pad):
    clock = Clock()
    issuer = TicketIssuer(clock=clock)
    master, ticket = issuer.new_ticket()
    hello = ticket_handshake(ticket, master, clock.now, pad_len=pad)
    got = parse_ticket_hello(hello, issuer, clock.now)
    assert got is not None and got.master == master and got.consumed == len(hello)
    with pytest.raises(HandshakeError, match="replayed"):
        parse_ticket_hello(ticket_handshake(ticket, master, clock.now), issuer, clock.now)


def test_tickets_expire_after_their_lifetime():
    clock = Clock()
    issuer = TicketIssuer(clock=clock)
    master, ticket = issuer.new_ticket()
    clock.now += LIFETIME_S - 1
    assert issuer.open(ticket) == master
    clock.now += 2
    assert issuer.open(ticket) is None
    assert parse_ticket_hello(ticket_handshake(ticket, master, clock.now), issuer,
                              clock.now) is None  # not a ticket any more: try UniformDH


def test_incomplete_and_forged_redemptions():
    clock = Clock()
    issuer = TicketIssuer(clock=clock)
    master, ticket = issuer.new_ticket()
    hello = ticket_handshake(ticket, master, clock.now, pad_len=100)
    assert parse_ticket_hello(hello[:-1], issuer, clock.now) is None
    forged = ticket_handshake(ticket, os.urandom(32), clock.now, pad_len=0)
    assert parse_ticket_hello(forged, issuer, clock.now) is None  # no mark under the key
    late = ticket_handshake(ticket, master, clock.now + 3 * 3600, pad_len=0)
    with pytest.raises(HandshakeError, match="does not verify"):
        parse_ticket_hello(late, issuer, clock.now)


def test_keys_persist_in_the_state_directory(tmp_path):
    a = TicketIssuer.load_or_create(tmp_path)
    assert stat.S_IMODE((tmp_path / KEYS_FILE).stat().st_mode) == 0o600
    master, ticket = a.new_ticket()
    assert TicketIssuer.load_or_create(tmp_path).open(ticket) == master
    (tmp_path / KEYS_FILE).write_text("{broken")
    with pytest.raises(ValueError, match="unreadable ticket keys"):
        TicketIssuer.load_or_create(tmp_path)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=1600))
def test_garbage_is_not_a_ticket(data):
    assert parse_ticket_hello(data, TicketIssuer(), NOW) is None
