"""The webtunnel transport object: what it keeps across the connections of a bridge."""

from __future__ import annotations

from transports.webtunnel.transport import WebTunnel


def test_every_connection_of_a_bridge_shares_one_rotation():
    transport = WebTunnel("webtunnel", randrange=lambda n: 1)
    args = {"url": "https://b.example/p", "servername": "x.example,y.example,z.example"}
    first = transport.client_factory(None, args)
    assert first.rotation.current() == "y.example"
    first.rotation.failed()
    second = transport.client_factory(None, dict(args))
    assert second.rotation is first.rotation and second.rotation.current() == "z.example"
    other = transport.client_factory(None, {**args, "url": "https://c.example/p"})
    assert other.rotation is not first.rotation
