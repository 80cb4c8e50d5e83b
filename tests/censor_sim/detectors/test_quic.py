"""QUIC Initial decryption (RFC 9001 vectors) and the GFW 2024 parser's Table 3 behaviour."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.detectors import quic
from tests.support import quic_vectors as qv

BLOCK = ["blocked.lab"]


def test_rfc9001_appendix_a1_client_initial_keys():
    key, iv, hp = quic.client_initial_keys(bytes.fromhex("8394c8f03e515708"))
    assert key.hex() == "1f369613dd76d5467730efcbe3b1a22d"
    assert iv.hex() == "fa044b2f42a3fd3b46fb255c"
    assert hp.hex() == "9f50449e04a0e810283a1e9933adedd2"


def test_our_initial_decrypts_to_its_client_hello():
    d = qv.build_initial("www.blocked.lab", seed=3)
    assert len(d) == 1200
    ini = quic.parse_initial(d)
    assert ini and ini.version == quic.V1 and ini.sni == "www.blocked.lab"
    assert ini.client_hello.alpn == ["h3"]


@pytest.mark.parametrize("variant, blocked", sorted(qv.TABLE3.items()))
def test_table3_vectors_are_blocked_exactly_as_the_gfw_did(variant, blocked):
    d = qv.build_initial("blocked.lab", variant)
    assert (quic.gfw2024_should_block(d, 65000, 443, BLOCK) == "blocked.lab") is blocked


def test_the_source_port_rule_is_strictly_above():
    # §3.3 and Fig. 11: blocked only when the source port is above the destination
    # port; the artifact's equal-port trials were blocked 0 times in 1,965.
    d = qv.build_initial("blocked.lab")
    assert quic.gfw2024_should_block(d, 4000, 5000, BLOCK) is None
    assert quic.gfw2024_should_block(d, 442, 443, BLOCK) is None
    assert quic.gfw2024_should_block(d, 443, 443, BLOCK) is None
    assert quic.gfw2024_should_block(d, 444, 443, BLOCK) == "blocked.lab"
    assert quic.gfw2024_should_block(d, 65000, 443, BLOCK) == "blocked.lab"


def test_strict_parser_differs_where_the_gfw_is_quirky():
    assert quic.parse_initial(qv.build_initial("blocked.lab", "crypto-len-0")) is None
    assert quic.parse_initial(qv.build_initial("blocked.lab", "crypto-ping-mix")).sni == \
        "blocked.lab"


@settings(max_examples=300)
@given(st.binary(max_size=1300))
def test_fuzz_never_raises(data):
    quic.parse_initial(data)
    quic.gfw2024_sni(data)


@settings(max_examples=100)
@given(st.integers(0, 1199), st.integers(0, 255))
def test_fuzz_flipped_byte(pos, val):
    d = bytearray(qv.build_initial("blocked.lab"))
    d[pos] = val
    quic.parse_initial(bytes(d))
    quic.gfw2024_sni(bytes(d))
