"""Iran's profiles of 2022–2026 through the engine (docs/censors/iran.md §3.2–3.3)."""

from __future__ import annotations

import random

import pytest

from censor_sim import datapath
from censor_sim.detectors import tls
from censor_sim.engine import Engine
from censor_sim.packet import SYN
from censor_sim.profile import load_profile
from tests.support.engine import CLIENT, SERVER, Clock, connect, tcp, udp
from tests.support.quic_vectors import long_header
from tests.support.tlsrecords import client_hello


def engine(name: str, overrides: dict | None = None) -> Engine:
    return Engine(load_profile(name, overrides), clock=Clock(), rng=random.Random(0))


def test_the_sni_filter_applies_to_about_half_of_pairs_and_always_the_same_ones():
    names = [f"site{i}.blocked.lab" for i in range(2000)]
    hit = [tls.sticky_draw(CLIENT, n) < 0.5 for n in names]
    assert 0.47 < sum(hit) / len(hit) < 0.53  # the report: 49.9 % and 50.2 %
    assert hit == [tls.sticky_draw(CLIENT, n) < 0.5 for n in names]  # the same pairs
    # Each pair is fixed; another client gets its own draw.
    assert [tls.sticky_draw("198.18.0.9", n) < 0.5 for n in names] != hit


def test_a_filtered_pair_is_reset_at_the_client_every_time_and_others_never():
    names = [f"s{i}.blocked.lab" for i in range(40)]
    filtered = [n for n in names if tls.sticky_draw(CLIENT, n) < 0.5]
    passed = [n for n in names if n not in filtered]
    assert filtered and passed
    eng = engine("iran-2026", {"detectors": {"ip_allowlist": {"addresses": [SERVER]}}})
    for port, name in enumerate(filtered * 3):
        v = connect(eng, 40000 + port, 443, client_hello(name))
        assert v.drop and [(i.dst, i.flags) for i in v.inject] == [(CLIENT, "RA")]
    for port, name in enumerate(passed * 3):
        assert not connect(eng, 41000 + port, 443, client_hello(name)).inject
    assert not connect(eng, 42000, 443, client_hello("random-unknown.lab")).inject


def test_the_allowlist_is_a_kernel_rule_on_the_client_side():
    al = datapath.Blocklist.from_params({"addresses": ["198.18.7.2", "2001:db8:7::2"]})
    rules = datapath.ruleset(None, allowlist=al, inside="ptlc-in")
    assert 'iifname "ptlc-in" ip daddr != @allowlist4 counter name allowlist_drop drop' in rules
    assert "set allowlist4 { type ipv4_addr; flags interval; elements = { 198.18.7.2/32 }; }" \
        in rules
    assert "elements = { 2001:db8:7::2/128 }" in rules
    assert 'iifname "ptlc-in" ip6 daddr != @allowlist6 counter name allowlist_drop drop' in rules
    with pytest.raises(datapath.DatapathError, match="inside interface"):
        datapath.ruleset(None, allowlist=al)


@pytest.mark.parametrize(("isp", "acts"), [("irancell", ["drop"]), ("ztel", ["drop"]),
                                           ("lossy", ["loss"]), ("mci", None),
                                           ("none", None)])
def test_udp_by_isp(isp, acts):
    eng = engine("iran-udp-2022", {"detectors": {"udp": {"isp": isp}}})
    v = eng.handle(udp(CLIENT, SERVER, 50000, 3478, b"\x00" * 40), True)
    assert v.flow == (acts[0] if acts else "accept")
    # DNS is never touched.
    assert eng.handle(udp(CLIENT, SERVER, 50001, 53, b"\x12\x34" + bytes(30)), True).flow \
        == "accept"


@pytest.mark.parametrize(("as_of", "dropped"), [("2025-06-24", False), ("2025-06-25", True)])
def test_quic_is_off_on_every_isp_from_the_june_2025_shutdown(as_of, dropped):
    eng = engine("iran-udp-2022", {"detectors": {"udp": {"isp": "mci", "as_of": as_of}}})
    v = eng.handle(udp(CLIENT, SERVER, 50000, 443, long_header(1200)), True)
    assert v.drop is dropped


def test_an_unknown_isp_is_one_clear_error():
    with pytest.raises(ValueError, match=r"detectors\.udp\.isp: one of irancell"):
        engine("iran-udp-2022", {"detectors": {"udp": {"isp": "shatel"}}})


def test_the_loss_rule_drops_the_configured_share():
    rules = datapath.ruleset(None, loss_percent=50)
    assert "ct mark & 0x70 == 0x50 numgen random mod 1000 < 500 counter name loss_drop drop" \
        in rules


def test_a_new_connection_on_a_reused_port_is_judged_afresh():
    """A client that reuses its source port after a reset opens a new connection: its
    ClientHello is inspected again (it once passed as the old, decided flow)."""
    eng = engine("iran-2026", {"detectors": {"ip_allowlist": {"addresses": [SERVER]},
                                             "tls": {"sni": ["blocked.lab"],
                                                     "sticky_share": 1.0}}})
    for _ in range(3):
        v = connect(eng, 40000, 443, client_hello("www.blocked.lab"))
        assert v.drop and [(i.dst, i.flags) for i in v.inject] == [(CLIENT, "RA")]
    assert eng.stats["flows"] == 3
    # A retransmitted SYN, before any data, stays in its flow.
    eng.handle(tcp(CLIENT, SERVER, 40001, 443, SYN), True)
    eng.handle(tcp(CLIENT, SERVER, 40001, 443, SYN), True)
    assert eng.stats["flows"] == 4
