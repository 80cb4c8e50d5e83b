"""Whose flow an event is about, for a transport on any port and protocol: a
bring-your-own-tool row's server may sit on UDP 443 beside the benign mix's QUIC."""

from __future__ import annotations

from ptlab.common.flowroles import BENIGN_PORTS, TCP, UDP, FlowRoles

CLIENT, BRIDGE, WEB = "198.18.0.2", "198.18.3.2", "198.18.5.2"
ROLES = FlowRoles.build([CLIENT], {(UDP, WEB, 443): "quic", (TCP, WEB, 443): "https"})


def flow(server: str, port: int, proto: str, client_port: int) -> dict:
    return {"client": CLIENT, "server": server, "proto": proto, "client_port": client_port,
            "server_port": port}


def test_a_transport_on_udp_443_is_the_transports_and_the_benign_quic_stays_benign():
    assert ROLES.role_of(flow(BRIDGE, 443, "udp", 2998)) == "transport"
    assert ROLES.role_of(flow(BRIDGE, 443, "udp", BENIGN_PORTS.start)) == "transport"
    assert ROLES.role_of(flow(WEB, 443, "udp", BENIGN_PORTS.start)) == "benign:quic"
    # Even to a benign destination, only the mix's labelled source ports make a flow
    # benign: anything else from the client is the transport's.
    assert ROLES.role_of(flow(WEB, 443, "udp", 40000)) == "transport"


def test_any_server_port_is_the_transports():
    for port, proto in ((9850, "tcp"), (9850, "udp"), (65010, "udp"), (53, "udp"), (1, "tcp")):
        assert ROLES.role_of(flow(BRIDGE, port, proto, 40000)) == "transport", (port, proto)
