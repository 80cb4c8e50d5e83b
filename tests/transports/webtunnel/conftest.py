"""Fixtures for the WebTunnel tests: a small PKI (root, intermediate, leaf) on disk,
and loopback servers that play one side of the handshake."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

LEAF_NAMES = ("bridge.test", "*.cdn.test")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str,
          issuer_key: ec.EllipticCurvePrivateKey, ca: bool,
          names: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> x509.Certificate:
    import ipaddress

    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(days=1))
               .not_valid_after(now + dt.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    if names or ips:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName(n) for n in names]
            + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]), critical=False)
    if issuer_key is not key:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@dataclass
class Pki:
    """A root CA, an intermediate and a leaf for ``bridge.test``, ``*.cdn.test`` and
    127.0.0.1; the server sends leaf then intermediate."""

    ca_file: Path
    chain_file: Path
    key_file: Path
    chain_der: list[bytes] = field(default_factory=list)

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.chain_file, self.key_file)
        return ctx


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    out = tmp_path_factory.mktemp("pki")
    root_key, mid_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    root = _cert("Test Root", root_key, "Test Root", root_key, ca=True)
    mid = _cert("Test Intermediate", mid_key, "Test Root", root_key, ca=True)
    leaf = _cert("bridge.test", leaf_key, "Test Intermediate", mid_key, ca=False,
                 names=LEAF_NAMES, ips=("127.0.0.1",))
    pem = serialization.Encoding.PEM
    (out / "ca.pem").write_bytes(root.public_bytes(pem))
    (out / "chain.pem").write_bytes(leaf.public_bytes(pem) + mid.public_bytes(pem))
    (out / "key.pem").write_bytes(leaf_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    der = serialization.Encoding.DER
    return Pki(out / "ca.pem", out / "chain.pem", out / "key.pem",
               [leaf.public_bytes(der), mid.public_bytes(der)])


@dataclass
class FakePeer:
    """What a loopback peer saw: the head it read and every byte after it."""

    head: bytes = b""
    after: bytearray = field(default_factory=bytearray)
    done: asyncio.Event = field(default_factory=asyncio.Event)


Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, FakePeer], Awaitable[None]]


@pytest.fixture
async def fake_server() -> AsyncIterator[Callable[..., Awaitable[tuple[int, FakePeer]]]]:
    """Start a server that reads one request head, runs ``script`` (which answers),
    then records everything the client sends until it closes."""
    servers: list[asyncio.Server] = []

    async def start(script: Script,
                    ssl_context: ssl.SSLContext | None = None) -> tuple[int, FakePeer]:
        peer = FakePeer()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                peer.head = await reader.readuntil(b"\r\n\r\n")
                await script(reader, writer, peer)
                while data := await reader.read(65536):
                    peer.after += data
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()
                peer.done.set()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ssl_context)
        servers.append(server)
        return server.sockets[0].getsockname()[1], peer

    yield start
    for server in servers:
        server.close()
