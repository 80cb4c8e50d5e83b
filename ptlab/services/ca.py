"""The lab certificate authority.

Every TLS endpoint in the lab (the CDN edge, HTTPS benign sites, the broker)
gets a certificate from one self-signed root so lab clients can verify real
TLS without touching the host's trust store. Files live in one directory:
``ca.pem``/``ca.key`` for the root and ``<stem>.pem`` (leaf + root chain) and
``<stem>.key`` per server. Creation is guarded by a lock file so several
services started at once in different namespaces can share the directory.

CLI: ``python -m ptlab.services.ca --dir D [--name N ...] [--ip I ...] [--stem S]``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import ipaddress
import json
import os
import re
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CN = "ptlab lab CA"
CA_VALIDITY = dt.timedelta(days=3650)
LEAF_VALIDITY = dt.timedelta(days=825)
# Reissue a leaf this close to expiry instead of reusing it.
RENEW_MARGIN = dt.timedelta(days=7)
# Backdate notBefore so a clock that lags slightly still accepts fresh certs.
BACKDATE = dt.timedelta(hours=1)

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_STEM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def normalize_dns_name(name: str) -> str:
    """Lower-case and check a DNS SAN; ``*`` is allowed only as the whole leftmost label."""
    norm = name.strip().lower().rstrip(".")
    labels = norm.split(".")
    if not norm or len(norm) > 253:
        raise ValueError(f"bad DNS name {name!r}")
    for i, label in enumerate(labels):
        if label == "*" and i == 0 and len(labels) > 1:
            continue
        if not _LABEL.match(label):
            raise ValueError(f"bad DNS name {name!r}")
    return norm


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write via a temp file and rename, so readers never see half a PEM."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class LabCA:
    """A self-signed root plus the leaf certificates it has issued in one directory."""

    def __init__(self, directory: Path, cert: x509.Certificate,
                 key: ec.EllipticCurvePrivateKey) -> None:
        self.directory = directory
        self.cert = cert
        self.key = key

    # -- root -------------------------------------------------------------

    @classmethod
    def load_or_create(cls, directory: Path | str) -> LabCA:
        """Load ``ca.pem``/``ca.key`` from ``directory``, creating a fresh root if absent."""
        directory = Path(directory).absolute()
        directory.mkdir(parents=True, exist_ok=True)
        with _locked(directory):
            cert_path, key_path = directory / "ca.pem", directory / "ca.key"
            if cert_path.exists() and key_path.exists():
                cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
                key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
                if not isinstance(key, ec.EllipticCurvePrivateKey):
                    raise ValueError(f"{key_path}: not an EC private key")
                if cert.public_key() != key.public_key():
                    raise ValueError(f"{cert_path} does not match {key_path}")
                return cls(directory, cert, key)
            key = ec.generate_private_key(ec.SECP256R1())
            cert = _make_root(key)
            _write_atomic(key_path, _key_pem(key), 0o600)
            _write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM))
            return cls(directory, cert, key)

    @property
    def ca_path(self) -> Path:
        """The root certificate clients should trust."""
        return self.directory / "ca.pem"

    def client_ssl_context(self) -> ssl.SSLContext:
        """A TLS client context that trusts only this lab CA."""
        return ssl.create_default_context(cafile=str(self.ca_path))

    # -- leaves -----------------------------------------------------------

    def issue(self, names: list[str], ips: list[str], stem: str) -> tuple[Path, Path]:
        """Write ``<stem>.pem`` (leaf + root) and ``<stem>.key`` for a TLS server.

        Note that OpenSSL never matches a wildcard directly under a single label
        (``*.lab`` does not cover ``x.lab``); list such names explicitly.

        Reuses the existing files when they already carry exactly these SANs, were
        signed by this root and are not about to expire, so restarts keep keys.
        """
        if not _STEM.match(stem) or stem == "ca":
            raise ValueError(f"bad certificate stem {stem!r}")
        dns = sorted({normalize_dns_name(n) for n in names})
        try:
            addrs = sorted({ipaddress.ip_address(i.strip("[]")) for i in ips},
                           key=lambda a: (a.version, int(a)))
        except ValueError as exc:
            raise ValueError(f"bad IP address: {exc}") from None
        if not dns and not addrs:
            raise ValueError("a certificate needs at least one DNS name or IP address")
        cert_path = self.directory / f"{stem}.pem"
        key_path = self.directory / f"{stem}.key"
        with _locked(self.directory):
            if self._reusable(cert_path, key_path, set(dns), set(addrs)):
                return cert_path, key_path
            key = ec.generate_private_key(ec.SECP256R1())
            leaf = self._make_leaf(key, dns, addrs)
            chain = (leaf.public_bytes(serialization.Encoding.PEM)
                     + self.cert.public_bytes(serialization.Encoding.PEM))
            _write_atomic(key_path, _key_pem(key), 0o600)
            _write_atomic(cert_path, chain)
        return cert_path, key_path

    def _reusable(self, cert_path: Path, key_path: Path, dns: set[str],
                  addrs: set[IPAddress]) -> bool:
        if not (cert_path.exists() and key_path.exists()):
            return False
        try:
            leaf = x509.load_pem_x509_certificates(cert_path.read_bytes())[0]
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            leaf.verify_directly_issued_by(self.cert)
        except (ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
            return False
        have_dns = set(san.get_values_for_type(x509.DNSName))
        have_ips = set(san.get_values_for_type(x509.IPAddress))
        return (have_dns == dns and have_ips == addrs
                and leaf.public_key() == key.public_key()
                and leaf.not_valid_after_utc - RENEW_MARGIN > _now())

    def _make_leaf(self, key: ec.EllipticCurvePrivateKey, dns: list[str],
                   addrs: list[IPAddress]) -> x509.Certificate:
        now = _now()
        cn = dns[0] if dns else str(addrs[0])
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
        sans += [x509.IPAddress(a) for a in addrs]
        ca_ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn[:64])]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(min(now + LEAF_VALIDITY, self.cert.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False)
            .sign(self.key, hashes.SHA256())
        )


def _make_root(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    now = _now()
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ptlab"),
        x509.NameAttribute(NameOID.COMMON_NAME, CA_CN),
    ])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True,
            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                       critical=False)
        .sign(key, hashes.SHA256())
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on ``directory/.lock`` (shared CA dirs, parallel starters)."""
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ptlab.services.ca",
        description="Create the lab CA and issue server certificates; prints the paths as JSON.")
    parser.add_argument("--dir", required=True, type=Path, help="CA directory")
    parser.add_argument("--name", action="extend", nargs="+", default=[], metavar="N",
                        help="DNS SAN (repeatable; wildcards like *.cdn.lab allowed)")
    parser.add_argument("--ip", action="extend", nargs="+", default=[], metavar="I",
                        help="IP SAN (repeatable)")
    parser.add_argument("--stem", default="server",
                        help="file stem for <stem>.pem/<stem>.key (default: server)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        ca = LabCA.load_or_create(args.dir)
        out: dict[str, str] = {"ca": str(ca.ca_path)}
        if args.name or args.ip:
            cert, key = ca.issue(args.name, args.ip, args.stem)
            out.update(cert=str(cert), key=str(key))
    except (ValueError, OSError) as exc:
        print(f"ca: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
