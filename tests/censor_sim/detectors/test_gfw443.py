"""The GFW's unconditional port-443 RSTs of 2025-08-20 (GFW Report, §2.1–2.3)."""

from __future__ import annotations

import random

import pytest

from censor_sim.detectors.gfw443 import injections
from censor_sim.engine import Engine
from censor_sim.packet import ACK, PSH, SYN
from censor_sim.profile import load_profile
from tests.support.engine import CLIENT, SERVER, Clock, tcp

CLIENT_ISN, SERVER_ISN = 3193349615, 77_000_000


def engine() -> Engine:
    return Engine(load_profile("gfw-443-rst-2025-08-20"), clock=Clock(), rng=random.Random(0))


def test_a_connection_from_inside_draws_three_rsts_on_its_syn_and_three_on_the_synack():
    eng = engine()
    syn = eng.handle(tcp(CLIENT, SERVER, 52596, 443, SYN, seq=CLIENT_ISN, ack=0), True)
    assert not syn.drop  # on-path: the SYN goes on, the RSTs race it
    assert [(i.src, i.dst, i.sport, i.dport, i.flags, i.seq, i.ack, i.window)
            for i in syn.inject] == [
        (SERVER, CLIENT, 443, 52596, "RA", 0, CLIENT_ISN + 1, w) for w in (1980, 1981, 1982)]
    synack = eng.handle(tcp(SERVER, CLIENT, 443, 52596, SYN | ACK, seq=SERVER_ISN,
                            ack=CLIENT_ISN + 1), False)
    assert [(i.dst, i.seq, i.ack, i.window) for i in synack.inject] == [
        (CLIENT, SERVER_ISN + 1, CLIENT_ISN + 1, w) for w in (3293, 3294, 3295)]
    # Data after the handshake draws nothing more.
    assert not eng.handle(tcp(CLIENT, SERVER, 52596, 443, PSH | ACK, b"x"), True).inject
    assert [d["rule"] for d in eng.packet_censor.detections] == ["syn", "syn+ack"]


def test_a_connection_from_outside_draws_them_on_the_inside_servers_synack_only():
    eng = engine()
    # The outside host opens to an inside server on 443: its SYN comes in on the far side.
    assert not eng.handle(tcp(SERVER, CLIENT, 50000, 443, SYN, seq=CLIENT_ISN), False).inject
    v = eng.handle(tcp(CLIENT, SERVER, 443, 50000, SYN | ACK, seq=SERVER_ISN,
                       ack=CLIENT_ISN + 1), True)
    assert [(i.src, i.dst, i.dport, i.seq, i.window) for i in v.inject] == [
        (CLIENT, SERVER, 50000, SERVER_ISN + 1, w) for w in (3293, 3294, 3295)]


@pytest.mark.parametrize("port", [22, 80, 442, 444, 8443])
def test_other_ports_are_left_alone(port):
    assert not injections(tcp(CLIENT, SERVER, 52596, port, SYN), True)
    assert not injections(tcp(SERVER, CLIENT, port, 52596, SYN | ACK), False)


def test_it_replays_offline_and_says_what_it_would_inject(tmp_path):
    from scapy.layers.inet import IP, TCP
    from scapy.utils import wrpcap

    from censor_sim.offline import replay

    pkts = []
    for dport in (443, 8443):
        pkts += [IP(src=CLIENT, dst=SERVER) / TCP(sport=40000, dport=dport, flags="S"),
                 IP(src=SERVER, dst=CLIENT) / TCP(sport=dport, dport=40000, flags="SA")]
    wrpcap(str(tmp_path / "h.pcap"), pkts)
    got = {v.flow["server_port"]: v for v in replay(load_profile("gfw-443-rst-2025-08-20"),
                                                      tmp_path / "h.pcap")}
    assert got[443].verdict == "rst" and got[443].packet == 1
    # Three on the SYN and three on the SYN+ACK, all to the connection's initiator.
    assert got[443].would == [{"action": "inject", "direction": "to-client", "proto": "tcp",
                               "count": 1, "flags": "RA"}] * 6
    assert got[8443].verdict == "pass" and not got[8443].would
