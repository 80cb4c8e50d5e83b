"""The lab CA issues certificates that real TLS clients verify."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ptlab.services import ca as ca_mod
from ptlab.services.ca import LabCA


async def _handshake(cert: Path, key: Path, cafile: Path, server_hostname: str) -> str:
    """Run a loopback TLS server with (cert, key) and return the client's TLS version."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        client_ctx = ssl.create_default_context(cafile=str(cafile))
        client_ctx.verify_flags |= ssl.VERIFY_X509_STRICT
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                                  server_hostname=server_hostname)
        version = writer.get_extra_info("ssl_object").version()
        writer.close()
        return version
    finally:
        server.close()
        await server.wait_closed()


async def test_issued_cert_verifies_for_names_and_ips_only(tmp_path: Path) -> None:
    lab_ca = LabCA.load_or_create(tmp_path)
    cert, key = lab_ca.issue(["front.lab", "*.cdn.lab"], ["127.0.0.1"], "edge")
    assert cert == tmp_path / "edge.pem" and key == tmp_path / "edge.key"
    assert await _handshake(cert, key, lab_ca.ca_path, "front.lab") == "TLSv1.3"
    assert await _handshake(cert, key, lab_ca.ca_path, "a.cdn.lab") == "TLSv1.3"
    assert await _handshake(cert, key, lab_ca.ca_path, "127.0.0.1") == "TLSv1.3"
    for wrong in ("other.lab", "cdn.lab", "a.b.cdn.lab"):
        with pytest.raises(ssl.SSLCertVerificationError):
            await _handshake(cert, key, lab_ca.ca_path, wrong)


async def test_other_ca_does_not_verify(tmp_path: Path) -> None:
    lab_ca = LabCA.load_or_create(tmp_path / "a")
    other = LabCA.load_or_create(tmp_path / "b")
    cert, key = lab_ca.issue(["front.lab"], [], "s")
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(cert, key, other.ca_path, "front.lab")


def test_root_properties_and_reload(tmp_path: Path) -> None:
    lab_ca = LabCA.load_or_create(tmp_path)
    root = x509.load_pem_x509_certificate(lab_ca.ca_path.read_bytes())
    assert root.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "ptlab lab CA"
    bc = root.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert bc.ca
    life = root.not_valid_after_utc - root.not_valid_before_utc
    assert dt.timedelta(days=3649) < life < dt.timedelta(days=3652)
    assert (tmp_path / "ca.key").stat().st_mode & 0o077 == 0
    again = LabCA.load_or_create(tmp_path)
    assert again.cert == lab_ca.cert


def test_leaf_contents(tmp_path: Path) -> None:
    lab_ca = LabCA.load_or_create(tmp_path)
    cert_path, _ = lab_ca.issue(["Web.Lab", "*.lab"], ["198.18.7.2", "2001:db8::7"], "web")
    chain = x509.load_pem_x509_certificates(cert_path.read_bytes())
    assert len(chain) == 2 and chain[1] == lab_ca.cert
    leaf = chain[0]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(san.get_values_for_type(x509.DNSName)) == ["*.lab", "web.lab"]
    assert {str(i) for i in san.get_values_for_type(x509.IPAddress)} == {
        "198.18.7.2", "2001:db8::7"}
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_issue_is_idempotent(tmp_path: Path) -> None:
    lab_ca = LabCA.load_or_create(tmp_path)
    cert, key = lab_ca.issue(["a.lab", "b.lab"], ["127.0.0.1"], "s")
    first = (cert.read_bytes(), key.read_bytes())
    # Same SAN set in another order and case: files are reused untouched.
    LabCA.load_or_create(tmp_path).issue(["B.lab", "a.lab"], ["127.0.0.1"], "s")
    assert (cert.read_bytes(), key.read_bytes()) == first
    # Different SANs: a new key and cert.
    lab_ca.issue(["a.lab"], ["127.0.0.1"], "s")
    assert cert.read_bytes() != first[0] and key.read_bytes() != first[1]


def test_new_root_forces_reissue(tmp_path: Path) -> None:
    lab_ca = LabCA.load_or_create(tmp_path)
    cert, _ = lab_ca.issue(["a.lab"], [], "s")
    before = cert.read_bytes()
    (tmp_path / "ca.pem").unlink()
    fresh = LabCA.load_or_create(tmp_path)
    assert fresh.cert != lab_ca.cert
    fresh.issue(["a.lab"], [], "s")
    leaf = x509.load_pem_x509_certificates(cert.read_bytes())[0]
    assert cert.read_bytes() != before
    leaf.verify_directly_issued_by(fresh.cert)


@pytest.mark.parametrize("names,ips,stem", [
    ([], [], "s"), (["bad name"], [], "s"), (["a.*.lab"], [], "s"),
    (["a.lab"], ["not-an-ip"], "s"), (["a.lab"], [], "../x"), (["a.lab"], [], "ca"),
])
def test_issue_rejects_bad_input(tmp_path: Path, names: list[str], ips: list[str],
                                 stem: str) -> None:
    with pytest.raises(ValueError):
        LabCA.load_or_create(tmp_path).issue(names, ips, stem)


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "ca"
    rc = ca_mod.main(["--dir", str(d), "--name", "front.lab", "hidden.lab",
                      "--name", "*.cdn.lab", "--ip", "127.0.0.1", "--stem", "edge"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"ca": str(d / "ca.pem"), "cert": str(d / "edge.pem"),
                   "key": str(d / "edge.key")}
    assert all(Path(p).exists() for p in out.values())
    assert ca_mod.main(["--dir", str(d), "--ip", "nope"]) == 2
    assert "ca: bad IP address" in capsys.readouterr().err
