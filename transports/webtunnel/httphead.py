"""Reading and parsing one HTTP/1.x head (start line and header fields).

Why our own parser rather than aiohttp's or ``http.client``'s: WebTunnel needs
exactly one head on a raw TCP (or TLS) stream and then the same stream as a
byte pipe, with whatever the peer sent after the head kept for the pipe. The
parsers also have to accept and refuse what Go's ``net/http`` and
``net/textproto`` do, because that is what a WebTunnel peer or its reverse
proxy is tested against (docs/transports/webtunnel.md §2.3):

* lines end in CRLF or a bare LF; the head ends at the first empty line;
* header names are tokens with no space before the colon; a field with an
  empty name is skipped; values are trimmed of spaces and tabs and may hold
  any byte but the control characters other than tab; a line that starts with
  a space or tab continues the field before it (joined with one space), but
  not as the first field line;
* the version is ``HTTP/x.y`` with one digit each;
* a status line is ``<version> <status>`` with leading spaces of the status
  dropped and a three-digit code first;
* a request line is exactly ``<method> <target> <version>`` with single spaces;
* from HTTP/1.1 on, ``Transfer-Encoding`` may only be one field saying
  ``chunked``; several ``Content-Length`` fields must agree, and where a body
  length counts it must be decimal digits (Go's ``readTransfer``).

Heads are decoded as Latin-1, so every byte maps to one character and nothing
is lost or rejected by decoding. Everything that is wrong raises
:class:`HeadError`, and nothing else (the fuzz tests hold us to that).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

MAX_HEAD_BYTES = 16 * 1024
"""Default cap on one head (start line, fields and the empty line). Ours: Go's
client reads a response head without a limit."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(r"HTTP/[0-9]\.[0-9]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+\-.]*:")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


class HeadError(ValueError):
    """An HTTP head that is malformed, too large, cut short or late."""


@dataclass(frozen=True)
class Fields:
    """Header fields in arrival order, names as sent."""

    items: tuple[tuple[str, str], ...] = ()

    def first(self, name: str) -> str | None:
        """The first value of ``name`` (case-insensitive), as Go's ``Header.Get``."""
        wanted = name.lower()
        for key, value in self.items:
            if key.lower() == wanted:
                return value
        return None


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    version: str
    fields: Fields


@dataclass(frozen=True)
class ResponseHead:
    version: str
    status: str  # code and reason, e.g. "101 Switching Protocols"
    code: int
    fields: Fields


async def read_head(reader: asyncio.StreamReader, max_bytes: int = MAX_HEAD_BYTES) -> bytes:
    """Read up to and including the first empty line; later bytes stay in ``reader``.

    Line by line, so not one byte past the head is consumed: the caller's
    stream goes on with exactly what the peer sent next. A single line is also
    bounded by the reader's own limit (asyncio's 64 KiB by default).
    """
    head = bytearray()
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            raise HeadError("connection closed inside the HTTP head") from None
        except asyncio.LimitOverrunError:
            raise HeadError("HTTP head too large") from None
        head += line
        if len(head) > max_bytes:
            raise HeadError("HTTP head too large")
        if line in (b"\r\n", b"\n"):
            return bytes(head)


def _lines(head: bytes) -> list[str]:
    """The head's lines without their endings, up to (not including) the empty one."""
    text = head.decode("latin-1")
    lines: list[str] = []
    for raw in text.split("\n")[:-1]:  # the piece after the last LF is no line
        line = raw[:-1] if raw.endswith("\r") else raw
        if not line:
            return lines
        lines.append(line)
    raise HeadError("HTTP head without its empty line")


def _fields(lines: list[str]) -> Fields:
    if lines and lines[0][:1] in (" ", "\t"):
        raise HeadError("malformed header: first field line starts with white space")
    joined: list[str] = []
    for line in lines:
        if line[:1] in (" ", "\t"):
            joined[-1] = joined[-1].rstrip(" \t") + " " + line.strip(" \t")
        else:
            joined.append(line)
    items = []
    for line in joined:
        name, colon, value = line.partition(":")
        if not colon:
            raise HeadError("malformed header line: no colon")
        if name and not _TOKEN.fullmatch(name):
            raise HeadError("malformed header line: bad field name")
        if _BAD_VALUE.search(value):
            raise HeadError("malformed header line: control character in a value")
        if name:  # Go skips a field with an empty name
            items.append((name, value.strip(" \t")))
    return Fields(tuple(items))


def _check_framing(fields: Fields, version: str, length_counts: bool) -> None:
    """Refuse the body framing Go's ``readTransfer`` refuses, though WebTunnel never
    reads a body: a head Go would not parse must not be upgraded here either."""
    encodings = [v for k, v in fields.items if k.lower() == "transfer-encoding"]
    chunked = False
    if encodings and version >= "HTTP/1.1":  # Go ignores it before 1.1
        if len(encodings) != 1 or encodings[0].encode("latin-1").lower() != b"chunked":
            raise HeadError("unsupported transfer encoding")
        chunked = True
    lengths = [v for k, v in fields.items if k.lower() == "content-length"]
    if any(v != lengths[0] for v in lengths[1:]):
        raise HeadError("conflicting Content-Length fields")
    if lengths and length_counts and not chunked:
        value = lengths[0]
        if not (value.isascii() and value.isdigit()) or int(value) >= 1 << 63:
            raise HeadError("bad Content-Length")


def _check_version(version: str) -> str:
    if not _VERSION.fullmatch(version):
        raise HeadError("malformed HTTP version")
    return version


def _check_target(target: str) -> str:
    """What Go's ``url.ParseRequestURI`` accepts, near enough: origin form,
    absolute form or ``*``, no control characters, well-formed %-escapes."""
    if not target:
        raise HeadError("empty request target")
    if _CONTROL.search(target):
        raise HeadError("control character in the request target")
    if not (target.startswith("/") or target == "*" or _SCHEME.match(target)):
        raise HeadError("invalid request target")
    if _BAD_ESCAPE.search(target.partition("?")[0]):
        raise HeadError("bad %-escape in the request target")
    return target


def parse_request(head: bytes) -> RequestHead:
    """The request line and fields of a request head (what :func:`read_head` returned)."""
    lines = _lines(head)
    if not lines:
        raise HeadError("empty HTTP request")
    method, sp1, rest = lines[0].partition(" ")
    target, sp2, version = rest.partition(" ")
    if not (sp1 and sp2):
        raise HeadError("malformed request line")
    if not _TOKEN.fullmatch(method):
        raise HeadError("invalid method")
    fields = _fields(lines[1:])
    _check_framing(fields, _check_version(version), length_counts=True)
    return RequestHead(method, _check_target(target), version, fields)


def parse_response(head: bytes) -> ResponseHead:
    """The status line and fields of a response head."""
    lines = _lines(head)
    if not lines:
        raise HeadError("empty HTTP response")
    version, sp, status = lines[0].partition(" ")
    if not sp:
        raise HeadError("malformed status line")
    status = status.lstrip(" ")
    code = status.partition(" ")[0]
    if len(code) != 3 or not code.isascii() or not code.isdigit():
        raise HeadError("malformed status code")
    fields = _fields(lines[1:])
    code_number = int(code)
    _check_framing(fields, _check_version(version),
                   length_counts=code_number // 100 != 1 and code_number not in (204, 304))
    return ResponseHead(version, status, code_number, fields)
