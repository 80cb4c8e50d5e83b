"""The WebTunnel handshake: one HTTP/1.1 upgrade request, one ``101`` answer, then raw bytes.

Why these exact bytes: a WebTunnel bridge hides behind an ordinary web server
that forwards one secret path as a WebSocket upgrade, so the request must look
like the Go client's and the answer like the Go server's, byte for byte; after
the answer both sides write raw bytes, with no WebSocket framing
(docs/transports/webtunnel.md §2).

Neither side may lose what the peer sent right after its head: the heads are
read line by line (:func:`~transports.webtunnel.httphead.read_head`), so
those bytes stay in the stream reader and become the start of the tunnel.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re

from transports.base import TransportError
from transports.pt.messages import format_addr

from .httphead import (
    HeadError,
    RequestHead,
    ResponseHead,
    parse_request,
    parse_response,
    read_head,
)

RESPONSE = (b"HTTP/1.1 101 Switching Protocols\r\n"
            b"Connection: upgrade\r\nUpgrade: websocket\r\n\r\n")
ACCEPTED_STATUS = "101 Switching Protocols"
FORWARDED_PORT = 60000  # the port Tor's server reports for an X-Forwarded-For address

# What Go's url package leaves alone in a path ("validEncoded"), and what its
# escape() leaves alone when it has to re-escape one.
_PATH_VALID = re.compile(r"[A-Za-z0-9\-_.~!$&'()*+,;=:@\[\]%/]*")
_PATH_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                       b"-_.~$&+,/:;=@")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


class UpgradeError(TransportError):
    """The peer's head was not a WebTunnel upgrade (or never came)."""


def escaped_path(raw_path: str) -> str:
    """A URL's path as Go's ``URL.EscapedPath`` gives it.

    A path that is already validly escaped is kept verbatim (``%2F`` stays
    ``%2F``); any other is unescaped and escaped again, byte by byte of its
    UTF-8, with upper-case hex. ValueError for a malformed %-escape, which Go's
    url parser refuses.
    """
    if _BAD_ESCAPE.search(raw_path):
        raise ValueError("invalid %-escape in the url path")
    if _PATH_VALID.fullmatch(raw_path):
        return raw_path
    raw = raw_path.encode("utf-8")
    decoded = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == 0x25:  # '%', followed by two hex digits (checked above)
            decoded.append(int(raw[i + 1:i + 3], 16))
            i += 3
        else:
            decoded.append(raw[i])
            i += 1
    return "".join(chr(b) if b in _PATH_KEEP else f"%{b:02X}" for b in decoded)


def request_target(path: str) -> str:
    """The request line's target for an escaped url path.

    The Go client builds ``"/" + path-without-its-first-slash`` and parses
    that as a URL again, so an empty path gives ``/`` and a target that begins
    with ``//`` loses what the second parse takes for an authority: ``//a/b``
    is sent as ``/b`` and ``//a`` as ``/``. We reproduce that quirk.
    """
    target = "/" + path.removeprefix("/")
    if target.startswith("//"):
        rest = target[2:]
        slash = rest.find("/")
        target = rest[slash:] if slash >= 0 else "/"
    return target


def request_bytes(target: str, host: str) -> bytes:
    """The client's request, in the order Go's ``Request.Write`` puts it on the wire."""
    return (f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: Go-http-client/1.1\r\n"
            f"Connection: upgrade\r\nUpgrade: websocket\r\n\r\n").encode("ascii")


def _lower(value: str | None) -> str | None:
    """ASCII lower case (Go lower-cases Unicode too; no WebTunnel peer sends any)."""
    return None if value is None else value.encode("latin-1").lower().decode("latin-1")


def response_accepted(response: ResponseHead) -> bool:
    """The Go client's test: status text exactly ``101 Switching Protocols``, and the
    first ``Upgrade`` and ``Connection`` fields ``websocket`` and ``upgrade`` in any case."""
    return (response.status == ACCEPTED_STATUS
            and _lower(response.fields.first("Upgrade")) == "websocket"
            and _lower(response.fields.first("Connection")) == "upgrade")


def request_is_upgrade(request: RequestHead) -> bool:
    """The Go server's test: the first ``Connection`` and ``Upgrade`` fields, lower-cased.
    Method, target and Host are not checked; the web server in front routes by them."""
    return (_lower(request.fields.first("Connection")) == "upgrade"
            and _lower(request.fields.first("Upgrade")) == "websocket")


def forwarded_address(request: RequestHead, peer: str) -> str:
    """The client's ``host:port`` for the Extended ORPort: the first element of
    ``X-Forwarded-For`` with port 60000, or ``peer`` when that is absent or no address."""
    header = request.fields.first("X-Forwarded-For")
    if header:
        first = header.split(",", 1)[0].strip()
        if "%" not in first:  # Go's ParseIP takes no IPv6 zone
            try:
                return format_addr(str(ipaddress.ip_address(first)), FORWARDED_PORT)
            except ValueError:
                pass
    return peer


async def client_upgrade(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         target: str, host: str, max_head_bytes: int) -> None:
    """Send the request and read the answer; :class:`UpgradeError` unless it is the 101.

    Nothing else is written before the answer has been read in full, so a
    refused upgrade has carried no payload.
    """
    writer.write(request_bytes(target, host))
    await writer.drain()
    try:
        head = await read_head(reader, max_head_bytes)
    except HeadError as exc:
        raise UpgradeError(f"webtunnel: no reply to the upgrade ({exc})") from None
    try:
        accepted = response_accepted(parse_response(head))
    except HeadError:
        accepted = False
    if not accepted:
        raise UpgradeError("webtunnel: unrecognized reply")


async def server_upgrade(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         max_head_bytes: int) -> RequestHead:
    """Read the request and, if it asks for the upgrade, answer 101; the request.

    :class:`HeadError` or :class:`UpgradeError` otherwise, with nothing written:
    the caller closes, as Tor's server does.
    """
    request = parse_request(await read_head(reader, max_head_bytes))
    if not request_is_upgrade(request):
        raise UpgradeError("webtunnel: unrecognized request")
    writer.write(RESPONSE)
    await writer.drain()
    return request
