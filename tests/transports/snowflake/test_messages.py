"""Rendezvous messages: Tor's bytes, Go's decoding leniency, and fuzzing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transports.snowflake import messages as m

TEXT = st.text(max_size=40)


def test_debian_client_poll_shape_and_defaults():
    wire = m.ClientPoll(m.encode_sdp("offer", "v=0\r\n"), "unknown").encode()
    head, body = wire.split(b"\n", 1)
    assert head == b"1.0" and list(json.loads(body)) == ["offer", "nat", "fingerprint"]
    p = m.ClientPoll.decode(b'1.0\n{"offer":"x"}')
    assert p.nat == "unknown" and p.fingerprint == m.DEFAULT_BRIDGE_FINGERPRINT


def test_go_leniency_case_insensitive_keys_and_nulls():
    p = m.ProxyPoll.decode(b'{"sid":"a","version":"1.9","nat":null,"clients":8,"extra":1}')
    assert (p.sid, p.nat, p.clients, p.relay_pattern) == ("a", "unknown", 8, None)
    assert m.ProxyPoll.decode(b'{"Sid":"a","Version":"1.3","Type":"robot"}').proxy_type \
        == "unknown"


def test_responses_keep_all_keys_or_omit_empty_ones_as_go_does():
    assert m.ProxyPollResponse(m.STATUS_NO_MATCH).encode() == \
        b'{"Status":"no match","Offer":"","NAT":"","RelayURL":""}'
    assert m.ClientPollResponse(error=m.ERR_NO_PROXIES).encode() == \
        b'{"error":"no snowflake proxies currently available"}'
    assert m.ProxyPollResponse("x", next_poll_ms=5).encode().endswith(b',"NextPoll":5}')


def test_go_escapes_html_characters():
    assert m.AnswerRequest("s", "<a&b>").encode() == \
        b'{"Version":"1.3","Sid":"s","Answer":"\\u003ca\\u0026b\\u003e"}'
    answer = m.encode_sdp("answer", "v=0\r\na=x:<a&b>\r\n")
    assert m.AnswerRequest.decode(m.AnswerRequest("s", answer).encode()).answer == answer


@pytest.mark.parametrize("text, ok", [
    ('{"type":"answer","sdp":"v=0"}', True),
    ('{"type":"pranswer","sdp":""}', True),      # 2.14.1 checks the JSON, not the SDP
    ('{"type":"rollback","sdp":"x","extra":1}', True),
    ('{"type":"answer"}', False),
    ('{"Type":"answer","sdp":"v=0"}', False),    # a map in Go: keys are exact
    ('{"type":"answer","sdp":5}', False),
    ('{"type":"reply","sdp":"v=0"}', False),
    ('["answer"]', False),
    ("v=0", False),
])
def test_session_description_check_is_2_14_1s(text, ok):
    if ok:
        m.check_description(text)
    else:
        with pytest.raises(m.MessageError, match="malformed session description"):
            m.check_description(text)


@given(sid=TEXT.filter(bool), ptype=st.sampled_from(m.PROXY_TYPES),
       nat=st.sampled_from(m.NAT_TYPES), clients=st.integers(0, 2**31),
       pattern=st.none() | TEXT)
def test_proxy_poll_round_trip(sid, ptype, nat, clients, pattern):
    p = m.ProxyPoll(sid, ptype, nat, clients, pattern)
    assert m.ProxyPoll.decode(p.encode()) == p


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_escape_as_anything_but_message_error(data):
    for decode in (m.ProxyPoll.decode, m.ProxyPollResponse.decode, m.AnswerRequest.decode,
                   m.ClientPoll.decode, m.ClientPollResponse.decode):
        try:
            decode(data)
        except m.MessageError:
            pass


@given(st.text(max_size=100))
def test_sdp_strings_are_checked(text):
    try:
        sdp = m.decode_sdp(text, "offer")
    except m.MessageError:
        return
    assert sdp.startswith("v=0")


@pytest.mark.parametrize("bad", [b"[]", b'{"Sid":1,"Version":"1.3"}', b'{"Sid":"a"}',
                                 b'{"Sid":"a","Version":"1.3","Clients":true}',
                                 b'{"Sid":"a","Version":"1.3","AcceptedRelayPattern":5}'])
def test_bad_proxy_polls(bad):
    with pytest.raises(m.MessageError):
        m.ProxyPoll.decode(bad)
