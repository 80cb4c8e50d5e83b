"""WireGuard's message layout and the censor's handshake rule (docs/censors/vpn.md §3).

The vectors are a real handshake between two Debian wireguard-go instances (captured
on loopback): the initiation, the response that echoes its sender index
(``7610d144``), and the first transport-data packet.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.detectors import wireguard as wg
from censor_sim.inspectors import DONE, Match, WireGuardInspector
from tests.support.flows import udp_flow

INITIATION = bytes.fromhex(
    "010000007610d14436676cf4392ae1ccab0a6a13b8a42d5854fa997c84fe926513b208e19004050fbee"
    "66afe264839ca4dcca1cfd994fb78c9836ce7c6e44026093201fdf1763011f9ec259248a48c35e9ceae6"
    "a93557b9b69987b259242bf92b44cb0b501d68708d7363fad352e135d9c2314dc4b5176702b42608270"
    "9378a7644ebb4f00000000000000000000000000000000")
RESPONSE = bytes.fromhex(
    "02000000a0f9e23b7610d144f5d1d03e9f45bae8cdda43a5407ff94c01e3a0e1f690e2d0b09faf0f7081"
    "07121619eac5280a03765732472672c7912c9e114b9d0890c48913813cd1cf1deb7c0000000000000000"
    "0000000000000000")
TRANSPORT = bytes.fromhex(
    "04000000a0f9e23b0000000000000000b111e3c9d0ceca4015aca8d52e08d46c7ffe3dd2920c7820c86f"
    "e182fdbf22095f9b1e3c34c1ced0eaf93751fcae3e2ab9bb68e147b560cb2d3c10a4dde72c0035326af4"
    "e3217cc827f8cb1220aa51797ec3df61cddd7f9a80c488cb409445d89501850f2880b1fc2c4c09d82b7c"
    "a8e2")


def test_the_real_handshake_has_the_whitepapers_sizes_and_fields():
    init, resp, data = wg.parse(INITIATION), wg.parse(RESPONSE), wg.parse(TRANSPORT)
    assert (init.name, init.length, init.sender.hex()) == ("initiation", 148, "7610d144")
    assert (resp.name, resp.length, resp.receiver.hex()) == ("response", 92, "7610d144")
    assert (data.name, data.length, data.receiver) == ("transport_data", 128, resp.sender)
    assert wg.is_initiation(INITIATION) and not wg.is_initiation(RESPONSE)
    assert wg.response_answers(INITIATION, RESPONSE)


def test_a_cookie_reply_and_a_keepalive_parse():
    assert wg.parse(b"\x03\x00\x00\x00" + bytes(60)).name == "cookie_reply"
    assert wg.parse(b"\x04\x00\x00\x00" + bytes(28)).name == "transport_data"  # 32: keepalive


def test_one_byte_off_any_fixed_size_or_header_is_not_wireguard():
    for msg in (INITIATION, RESPONSE):
        assert wg.parse(msg[:-1]) is None and wg.parse(msg + b"\x00") is None
        for i in (1, 2, 3):  # the reserved bytes
            assert wg.parse(msg[:i] + b"\x01" + msg[i + 1:]) is None
    assert wg.parse(b"\x05" + INITIATION[1:]) is None
    assert wg.parse(b"\x04\x00\x00\x00" + bytes(27)) is None  # 31 < 32
    assert wg.parse(TRANSPORT + b"\x00") is None  # not a multiple of 16
    assert not wg.response_answers(INITIATION, RESPONSE[:8] + b"\xff" * 4 + RESPONSE[12:])
    assert not wg.response_answers(RESPONSE, INITIATION)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=300))
def test_the_parser_answers_for_any_bytes(a, b):
    msg = wg.parse(a)
    assert msg is None or msg.type in wg.NAMES
    assert isinstance(wg.response_answers(a, b), bool)


def inspect_all(params: dict, packets: list[tuple[bool, bytes]]):
    insp = WireGuardInspector("wg", params)
    flow, results = udp_flow(), []
    for c2s, payload in packets:
        pkt = flow.add(c2s, payload)
        results.append(insp.inspect(flow.flow, pkt, c2s))
        if results[-1] is not None:
            break
    return results


def test_the_inspector_waits_for_the_echoing_response_by_default():
    res = inspect_all({}, [(True, INITIATION), (False, RESPONSE)])
    assert res[0] is None and isinstance(res[1], Match)
    assert res[1].evidence == {"message": "response", "length": 92, "sender": "7610d144"}


def test_the_one_packet_rule_matches_the_initiation():
    (res,) = inspect_all({"confirm": "none"}, [(True, INITIATION)])
    assert isinstance(res, Match) and res.evidence["message"] == "initiation"


def test_other_udp_is_let_go_on_its_first_payload():
    assert inspect_all({}, [(True, TRANSPORT)]) == [DONE]
    assert inspect_all({}, [(True, b"\x01\x00\x00\x00" + bytes(143))]) == [DONE]  # 147


def test_an_unanswered_initiation_is_given_up_after_the_budget():
    res = inspect_all({"max_packets": 3}, [(True, INITIATION)] * 3)
    assert res == [None, None, DONE]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=200)), max_size=8))
def test_the_inspector_never_raises(packets):
    for r in inspect_all({"max_packets": 8}, [(True, b"x")] + packets):
        assert r is None or r == DONE or isinstance(r, Match)


def test_an_unknown_confirm_mode_is_refused_with_its_key():
    with pytest.raises(ValueError, match="detectors.wg.confirm"):
        WireGuardInspector("wg", {"confirm": "both"})
