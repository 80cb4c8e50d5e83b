"""The shared server TLS context: both files or neither, and one clear line otherwise."""

from __future__ import annotations

import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from transports.common.servertls import server_tls


@pytest.fixture
def pem_pair(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "server.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


def test_no_files_means_no_tls():
    assert server_tls(None, None, "x") is None
    assert server_tls("", "", "x") is None


def test_a_good_pair_gives_a_server_context(pem_pair):
    ctx = server_tls(*pem_pair, "x")
    assert isinstance(ctx, ssl.SSLContext) and not ctx.check_hostname


@pytest.mark.parametrize("which", ["cert", "key"])
def test_one_file_alone_is_refused_naming_the_server(pem_pair, which):
    cert, key = pem_pair
    args = (cert, None) if which == "cert" else (None, key)
    with pytest.raises(ValueError, match="^meek server: cert and key go together$"):
        server_tls(*args, "meek server")


def test_an_unreadable_pair_is_one_line_not_a_traceback(pem_pair, tmp_path):
    cert, _ = pem_pair
    (tmp_path / "garbage.pem").write_text("not a key\n")
    with pytest.raises(ValueError, match="^webtunnel server: cannot load cert/key"):
        server_tls(cert, str(tmp_path / "garbage.pem"), "webtunnel server")
    with pytest.raises(ValueError, match="cannot load cert/key"):
        server_tls(cert, str(tmp_path / "missing.pem"), "webtunnel server")
