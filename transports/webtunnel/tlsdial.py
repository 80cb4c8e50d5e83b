"""The client's TLS: Python's ssl, with the certificate checks the bridge line asks for.

Why not simply ``ssl.create_default_context()``: lyrebird lets a bridge line
send one name as SNI and check the certificate for another (``sni-imitation=``,
``cert-domain=``), or replace CA checks by a hash of the certificate chain the
server sent (``cert=``). OpenSSL checks the certificate only for the name it
also sends, so for a different name we let it verify the chain and check the
name ourselves, and for a pin we turn verification off and compare the hash
(docs/transports/webtunnel.md §3.2).

Differences from Go's crypto/tls (§5.1): the checks run once the handshake
has finished, so a rejected server has seen a whole handshake, then a close;
the ClientHello is OpenSSL's, without ALPN. For the chain we need every
certificate the server sent, which Python exposes publicly only from 3.13
(``get_unverified_chain``); on 3.10-3.12 the same call exists on the private
``_sslobj``, and if neither is there we hash the leaf alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import ssl
from collections.abc import Sequence
from typing import Any

from transports.base import TransportError

_DER = 2  # _ssl.ENCODING_DER, the encoding argument of the private Certificate API


class CertificateRejected(TransportError):
    """The server's certificate did not pass the check the bridge line asks for."""


def chain_hash(chain: Sequence[bytes]) -> bytes:
    """lyrebird's pin: h = SHA-256(first DER); then h = SHA-256(h || SHA-256(next DER))
    for each later certificate, in the order the server sent them."""
    digest = b""
    for der in chain:
        one = hashlib.sha256(der).digest()
        digest = hashlib.sha256(digest + one).digest() if digest else one
    return digest


def peer_chain(ssl_object: Any) -> list[bytes]:
    """The DER certificates the server sent, leaf first (see the module docstring)."""
    getter = getattr(ssl_object, "get_unverified_chain", None)
    if getter is None:
        getter = getattr(getattr(ssl_object, "_sslobj", None), "get_unverified_chain", None)
    certs = getter() if getter is not None else None
    if certs:
        return [c.public_bytes(_DER) if hasattr(c, "public_bytes") else bytes(c) for c in certs]
    leaf = ssl_object.getpeercert(binary_form=True)
    return [leaf] if leaf else []


def _dns_matches(pattern: str, name: str) -> bool:
    """RFC 6125 matching as Go does it: case-insensitive, a wildcard only as the
    whole left-most label, standing for exactly one label."""
    pattern, name = pattern.lower().rstrip("."), name.lower().rstrip(".")
    if not pattern or not name:
        return False
    if pattern.startswith("*."):
        label, dot, rest = name.partition(".")
        return bool(label) and bool(dot) and rest == pattern[2:] and "*" not in rest
    return "*" not in pattern and pattern == name


def name_matches(cert: dict[str, Any], name: str) -> bool:
    """Whether a verified certificate (``getpeercert()``) is valid for ``name``,
    by its subjectAltName entries only (as Go; the common name does not count)."""
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        address = None
    for kind, value in cert.get("subjectAltName", ()):
        if address is not None and kind == "IP Address":
            try:
                if ipaddress.ip_address(value.strip()) == address:
                    return True
            except ValueError:
                continue
        elif address is None and kind == "DNS" and _dns_matches(value, name):
            return True
    return False


def client_context(*, pinned: bool, check_hostname: bool,
                   cafile: str | None = None) -> ssl.SSLContext:
    """The context for one dial. ``cafile`` replaces the system's CAs (tests, the lab;
    ``SSL_CERT_FILE`` works too). No ALPN, as lyrebird's default hello has none."""
    if pinned:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = check_hostname
    return ctx


def check_peer(ssl_object: Any, pin: bytes | None, verify_name: str | None) -> None:
    """The checks OpenSSL did not do for us; :class:`CertificateRejected` if one fails."""
    if pin is not None:
        if not hmac.compare_digest(chain_hash(peer_chain(ssl_object)), pin):
            raise CertificateRejected("webtunnel: pinned certificate chain hash not matched")
    elif verify_name is not None and not name_matches(ssl_object.getpeercert() or {},
                                                      verify_name):
        raise CertificateRejected(f"webtunnel: certificate is not valid for {verify_name!r}")


async def start_tls(writer: asyncio.StreamWriter, sni: str, pin: bytes | None,
                    verify_name: str | None, cafile: str | None = None) -> None:
    """Run the TLS handshake on a connected stream and the checks after it.

    ``sni`` is what the ClientHello names (nothing, for an IP address);
    ``verify_name`` the name the certificate must be valid for, None meaning
    ``sni`` (then OpenSSL checks it); ``pin`` replaces both checks.
    """
    own_check = verify_name is not None and verify_name != sni
    ctx = client_context(pinned=pin is not None, check_hostname=not own_check, cafile=cafile)
    try:
        await writer.start_tls(ctx, server_hostname=sni)
    except ssl.SSLCertVerificationError as exc:
        raise CertificateRejected(f"webtunnel: certificate not accepted: "
                                  f"{exc.verify_message or exc.reason}") from None
    check_peer(writer.get_extra_info("ssl_object"), pin, verify_name if own_check else None)
