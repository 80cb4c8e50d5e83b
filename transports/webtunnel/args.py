"""A WebTunnel bridge line's arguments, resolved into where to dial and what to send.

Why a module of its own: lyrebird's client takes eight arguments that interact
(``url=`` sets the default of four things that ``addr=``, ``sni-imitation=``,
``servername=`` and ``cert-domain=`` each override), and a bad value must be
refused before any byte goes out (docs/transports/webtunnel.md §3). The
bridge line's own address is a placeholder (§4) and is not used here.
"""

from __future__ import annotations

import base64
import binascii
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from transports.base import TransportError
from transports.common.hostport import split_hostport

from .upgrade import escaped_path, request_target

DEFAULT_PORTS = {"https": 443, "http": 80}
UTLS_NONE = "none"
_HOST_CHARS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:\[\]%]+")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")


def _error(message: str) -> TransportError:
    return TransportError(f"webtunnel: {message}")


def _split_authority(netloc: str) -> tuple[str, str]:
    """(hostname, port) as Go's ``URL.Hostname``/``Port``: case kept, brackets
    dropped, an empty or missing port given as ""."""
    host = netloc.rpartition("@")[2]
    port = ""
    colon = host.rfind(":")
    tail = host[colon + 1:]
    if colon >= 0 and (tail == "" or (tail.isascii() and tail.isdigit())):
        host, port = host[:colon], tail
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def _check_utls(value: str) -> None:
    """Only Python's own ClientHello is available (docs/transports/webtunnel.md §5.1)."""
    if value and value.lower() != UTLS_NONE:
        raise _error(f"utls={value} is not supported: this client sends Python's OpenSSL "
                     "ClientHello only (give utls=none, or no utls=)")


def _decode_pin(value: str) -> bytes:
    try:
        pin = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _error("failed to decode approved certificate chain hash (cert=)") from None
    if not pin:
        raise _error("failed to decode approved certificate chain hash (cert=)")
    return pin


@dataclass(frozen=True)
class ClientArgs:
    """Everything a dial needs, checked."""

    url: str
    tls: bool
    dial_host: str
    dial_port: int
    host_header: str  # the url's host, without port
    target: str  # the request line's target
    server_names: tuple[str, ...]  # SNI candidates (several only with servername=a,b)
    verify_name: str | None  # the name to check the certificate for; None: the SNI in use
    pin: bytes | None  # cert=: the certificate chain hash that replaces CA checks

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> ClientArgs:
        """From the SOCKS-carried bridge-line arguments; TransportError says what is wrong.

        ``ver=`` is accepted and ignored, as lyrebird does; unknown keys are
        ignored too, so newer bridge lines still work.
        """
        url = args.get("url", "")
        if not url:
            raise _error("missing argument 'url'")
        if _CONTROL.search(url):
            raise _error("url must not contain spaces or control characters")
        parts = urlsplit(url)
        if parts.scheme not in DEFAULT_PORTS:
            raise _error(f"url scheme must be https or http, not {parts.scheme or '(none)'!r}")
        host, port_text = _split_authority(parts.netloc)
        if not host:
            raise _error("url has no host")
        if not host.isascii() or not _HOST_CHARS.fullmatch(host):
            raise _error(f"url host {host!r} has characters a Host header cannot carry "
                         "(write an international name in its xn-- form)")
        if port_text and not 0 < int(port_text) < 65536:
            raise _error(f"url port {port_text} is out of range")
        port = int(port_text) if port_text else DEFAULT_PORTS[parts.scheme]
        try:
            target = request_target(escaped_path(parts.path))
        except ValueError as exc:
            raise _error(str(exc)) from None

        dial_host, dial_port = host, port
        if addr := args.get("addr", ""):
            try:
                dial_host, dial_port = split_hostport(addr)
            except ValueError as exc:
                raise _error(f"addr: {exc}") from None

        _check_utls(args.get("utls", ""))
        sni, verify_name = host, None
        if imitated := args.get("sni-imitation", ""):
            sni, verify_name = imitated, host
        names: tuple[str, ...] = (sni,)
        if servername := args.get("servername", ""):
            names = tuple(n.strip() for n in servername.split(",") if n.strip())
            if not names:
                raise _error("servername= names no server")
        if cert_domain := args.get("cert-domain", ""):
            verify_name = cert_domain
        pin = _decode_pin(args["cert"]) if args.get("cert") else None
        return cls(url, parts.scheme == "https", dial_host, dial_port, host, target, names,
                   verify_name, pin)


class ServerNameRotation:
    """Which ``servername=`` entry to send as SNI.

    lyrebird picks a random start once and keeps it while it works; a failed
    TLS handshake or upgrade moves to the next entry (wrapping round), a failed
    TCP connection does not. ``randrange`` is injectable for tests.
    """

    def __init__(self, names: tuple[str, ...],
                 randrange: Callable[[int], int] = random.randrange) -> None:
        if not names:
            raise ValueError("no server names")
        self.names = names
        self.index = randrange(len(names)) % len(names)

    def current(self) -> str:
        return self.names[self.index]

    def failed(self) -> None:
        self.index = (self.index + 1) % len(self.names)
