"""The client's TLS: chain pinning (cert=), names (sni-imitation=, cert-domain=,
servername=) and the rotation a TLS failure causes."""

from __future__ import annotations

import asyncio
import base64
import hashlib

import pytest

from transports.base import TransportError
from transports.webtunnel.args import ClientArgs
from transports.webtunnel.client import WebTunnelClientFactory
from transports.webtunnel.tlsdial import CertificateRejected, chain_hash, name_matches
from transports.webtunnel.transport import WebTunnel
from transports.webtunnel.upgrade import RESPONSE


def test_chain_hash_is_lyrebirds_fold():
    a, b, c = b"leaf", b"intermediate", b"root"
    h = hashlib.sha256(a).digest()
    assert chain_hash([a]) == h
    h2 = hashlib.sha256(h + hashlib.sha256(b).digest()).digest()
    assert chain_hash([a, b]) == h2
    assert chain_hash([a, b, c]) == hashlib.sha256(h2 + hashlib.sha256(c).digest()).digest()
    assert chain_hash([b, a]) != h2  # the server's order counts


SAN = {"subjectAltName": (("DNS", "bridge.test"), ("DNS", "*.cdn.test"),
                          ("IP Address", "127.0.0.1"), ("IP Address", "2001:DB8:0:0:0:0:0:1\n"))}


@pytest.mark.parametrize(("name", "ok"), [
    ("bridge.test", True), ("BRIDGE.test.", True), ("a.cdn.test", True),
    ("cdn.test", False), ("a.b.cdn.test", False), ("other.test", False),
    ("127.0.0.1", True), ("127.0.0.2", False), ("2001:db8::1", True), ("[2001:db8::1]", True),
])
def test_certificate_names(name, ok):
    assert name_matches(SAN, name) is ok


def test_the_common_name_does_not_count():
    assert not name_matches({"subject": ((("commonName", "bridge.test"),),)}, "bridge.test")


async def tls_peer(fake_server, pki, seen_sni: list[str | None] | None = None):
    ctx = pki.server_context()
    if seen_sni is not None:
        ctx.sni_callback = lambda _obj, name, _ctx: seen_sni.append(name)

    async def script(reader, writer, peer):
        writer.write(RESPONSE)
        await writer.drain()
    return await fake_server(script, ctx)


def factory(port: int, pki, transport: WebTunnel | None = None, *, trust: bool = True,
            **args: str) -> WebTunnelClientFactory:
    parsed = ClientArgs.parse({"addr": f"127.0.0.1:{port}",
                               **{k.replace("_", "-"): v for k, v in args.items()}})
    rotation = transport.rotation_for(parsed) if transport else None
    return WebTunnelClientFactory(parsed, rotation, cafile=str(pki.ca_file) if trust else None,
                                  handshake_timeout_s=5)


async def dial_ok(f: WebTunnelClientFactory) -> None:
    _, writer = await f.dial("192.0.2.1", 443)
    writer.close()


async def test_a_verified_server_by_its_own_name(fake_server, pki):
    seen: list[str | None] = []
    port, peer = await tls_peer(fake_server, pki, seen)
    await dial_ok(factory(port, pki, url="https://bridge.test/p"))
    await asyncio.wait_for(peer.done.wait(), 5)
    assert seen == ["bridge.test"]
    assert peer.head.startswith(b"GET /p HTTP/1.1\r\nHost: bridge.test\r\n")


async def test_an_unknown_ca_is_refused(fake_server, pki):
    port, peer = await tls_peer(fake_server, pki)
    with pytest.raises(CertificateRejected, match="certificate not accepted"):
        await factory(port, pki, trust=False, url="https://bridge.test/p").dial("x", 1)
    assert peer.head == b""  # no request went out


async def test_sni_imitation_sends_the_cover_name_and_checks_the_url_host(fake_server, pki):
    seen: list[str | None] = []
    port, peer = await tls_peer(fake_server, pki, seen)
    await dial_ok(factory(port, pki, url="https://bridge.test/p",
                          sni_imitation="www.cover.example"))
    await asyncio.wait_for(peer.done.wait(), 5)
    assert seen == ["www.cover.example"]
    assert b"Host: bridge.test\r\n" in peer.head


async def test_cert_domain_is_the_name_checked(fake_server, pki):
    seen: list[str | None] = []
    port, _ = await tls_peer(fake_server, pki, seen)
    await dial_ok(factory(port, pki, url="https://hidden.example/p", cert_domain="a.cdn.test"))
    assert seen == ["hidden.example"]
    with pytest.raises(CertificateRejected, match="not valid for 'elsewhere.test'"):
        await factory(port, pki, url="https://bridge.test/p",
                      cert_domain="elsewhere.test").dial("x", 1)


async def test_a_wrong_name_is_refused(fake_server, pki):
    port, _ = await tls_peer(fake_server, pki)
    with pytest.raises(CertificateRejected):
        await factory(port, pki, url="https://wrong.test/p").dial("x", 1)


async def test_the_pinned_chain_hash_replaces_ca_and_name_checks(fake_server, pki):
    pin = base64.b64encode(chain_hash(pki.chain_der)).decode()
    port, peer = await tls_peer(fake_server, pki)
    # Untrusted CA and a name the certificate lacks: the pin alone decides.
    await dial_ok(factory(port, pki, trust=False, url="https://not-on-the-cert.example/p",
                          cert=pin))
    await asyncio.wait_for(peer.done.wait(), 5)
    assert peer.head.startswith(b"GET /p ")


async def test_a_pin_on_the_leaf_alone_does_not_match_a_two_certificate_chain(fake_server, pki):
    leaf_only = base64.b64encode(chain_hash(pki.chain_der[:1])).decode()
    port, peer = await tls_peer(fake_server, pki)
    with pytest.raises(CertificateRejected, match="pinned certificate chain hash not matched"):
        await factory(port, pki, url="https://bridge.test/p", cert=leaf_only).dial("x", 1)
    await asyncio.wait_for(peer.done.wait(), 5)
    assert peer.head == b""  # nothing was sent to a server that failed the pin


async def test_a_tls_failure_moves_servername_on_and_a_tcp_failure_does_not(fake_server, pki):
    transport = WebTunnel("webtunnel", randrange=lambda n: 0)
    port, _ = await tls_peer(fake_server, pki)
    names = "bad.example,a.cdn.test"  # the certificate is valid for the second only
    first = factory(port, pki, transport, url="https://bridge.test/p", servername=names)
    assert first.rotation.current() == "bad.example"
    with pytest.raises(CertificateRejected):
        await first.dial("x", 1)
    assert first.rotation.current() == "a.cdn.test"
    second = factory(port, pki, transport, url="https://bridge.test/p", servername=names)
    assert second.rotation is first.rotation  # the next connection of the same bridge
    await dial_ok(second)
    await dial_ok(second)
    assert second.rotation.current() == "a.cdn.test"  # kept while it works

    unreachable = WebTunnelClientFactory(
        ClientArgs.parse({"url": "https://bridge.test/p", "addr": "127.0.0.1:1",
                          "servername": names}), first.rotation, handshake_timeout_s=5)
    with pytest.raises(OSError):
        await unreachable.dial("x", 1)  # nothing listens on port 1: a TCP failure
    assert first.rotation.current() == "a.cdn.test"  # not moved on


async def test_an_https_upgrade_refusal_is_a_transport_error(fake_server, pki):
    async def script(reader, writer, peer):
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    port, peer = await fake_server(script, pki.server_context())
    with pytest.raises(TransportError, match="unrecognized reply"):
        await factory(port, pki, url="https://bridge.test/p").dial("x", 1)
    await asyncio.wait_for(peer.done.wait(), 5)
    assert bytes(peer.after) == b""
