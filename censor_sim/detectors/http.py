"""HTTP/1.x request-head parsing and keyword matching, as a censor sees a plaintext request.

Why: keyword censorship of HTTP (the GFW's oldest mechanism) decides on the first
request of a TCP stream. Rambert, Weinberg, Barradas and Christin (2021, "Chinese Wall
or Swiss Cheese? Keyword filtering in the Great Firewall of China"; docs/censors/keywords.md §1.1)
report that the GFW inspects only the **request path and the Host header** for
keywords, on any TCP port. :func:`keyword_match` models exactly those two places.

Grammar: RFC 9112 §3 (request-line ``method SP request-target SP HTTP-version``), §5
(field lines ``name ":" OWS value OWS``), §2.2 (a bare LF may be accepted as a line
terminator; obsolete line folding replaced by SP). Only the head is parsed; the body is
not the censor's concern here.

Stream contract: :func:`parse_request` raises :class:`NeedMore` while what it has is a
valid prefix of a request head (the head may span TCP segments), and returns ``None``
for anything that cannot be HTTP or a head longer than :data:`MAX_HEAD` bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes, urlsplit

from . import NeedMore

MAX_HEAD = 16 * 1024  # a head not finished within 16 KiB is not worth waiting for

# RFC 9110 §5.6.2 token characters.
_TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_VERSION = re.compile(rb"HTTP/[0-9]\.[0-9]\Z")
_MAX_METHOD = 32  # longer "methods" are not HTTP in practice; fail fast instead of waiting


@dataclass(frozen=True)
class HttpRequest:
    """The head of one HTTP/1.x request.

    ``target`` is the request-target as sent; ``path`` its path and query (for an
    absolute-form target, without scheme and authority). ``host`` is the authority of
    an absolute-form target, else the first Host header (RFC 9112 §3.2.2 gives the
    target precedence), lowercased and without port; None if neither exists.
    ``head_length`` is how many bytes of the stream the head used, terminator included.
    """

    method: str
    target: str
    path: str
    version: str
    headers: list[tuple[str, str]]
    host: str | None
    head_length: int

    def header(self, name: str) -> str | None:
        """First value of a header, case-insensitively, or None."""
        lname = name.lower()
        for k, v in self.headers:
            if k.lower() == lname:
                return v
        return None


def _is_token(b: bytes) -> bool:
    return bool(b) and all(c in _TCHAR for c in b)


def _valid_request_line_prefix(line: bytes) -> bool:
    """Could ``line`` (no terminator yet) still grow into a request-line?"""
    sp = line.find(b" ")
    method = line if sp < 0 else line[:sp]
    if sp < 0:
        return len(method) <= _MAX_METHOD and all(c in _TCHAR for c in method)
    if not _is_token(method) or len(method) > _MAX_METHOD:
        return False
    rest = line[sp + 1 :]
    return all(0x21 <= c <= 0x7E or c == 0x20 or c >= 0x80 for c in rest)


def _split_lines(head: bytes) -> list[bytes]:
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in head.split(b"\n")]


def _strip_port(authority: str) -> str:
    """Host without userinfo or port; IPv6 literals keep their brackets."""
    host = authority.rpartition("@")[2]
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end >= 0 else host
    return host.partition(":")[0]


def _parse_head(head: bytes, head_length: int) -> HttpRequest | None:
    lines = _split_lines(head)
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        return None
    method, target, version = parts
    if not _is_token(method) or not target or not _VERSION.match(version):
        return None
    if any(c <= 0x20 or c == 0x7F for c in target):
        return None
    headers: list[tuple[str, str]] = []
    for raw in lines[1:]:
        if raw[:1] in (b" ", b"\t"):
            if not headers:  # RFC 9112 §2.2: whitespace before the first field line
                return None
            last_name, last_value = headers[-1]
            headers[-1] = (last_name,
                           (last_value + " " + raw.strip(b" \t").decode("latin-1")).strip())
            continue
        name, colon, value = raw.partition(b":")
        if not colon or not _is_token(name):  # also rejects "Name :" (RFC 9112 §5.1)
            return None
        headers.append((name.decode("ascii"), value.strip(b" \t").decode("latin-1")))
    target_s = target.decode("latin-1")
    host: str | None = None
    path = target_s
    if not target_s.startswith("/") and "://" in target_s:
        parts_url = urlsplit(target_s)
        host = _strip_port(parts_url.netloc) or None
        path = parts_url.path or "/"
        if parts_url.query:
            path += "?" + parts_url.query
    if host is None:
        for k, v in headers:
            if k.lower() == "host":
                host = _strip_port(v) or None
                break
    return HttpRequest(method.decode("ascii"), target_s, path, version.decode("ascii"),
                       headers, host.lower() if host else None, head_length)


def parse_request(stream: bytes) -> HttpRequest | None:
    """Parse the request head at the start of a client's TCP byte stream.

    Raises :class:`NeedMore` if the head is not complete yet and everything so far is a
    valid prefix of one; returns None if it cannot be an HTTP/1.x request head or if
    the head is not finished within :data:`MAX_HEAD` bytes.
    """
    window = stream[: MAX_HEAD + 4]
    ends = [(i, n) for i, n in ((window.find(b"\r\n\r\n"), 4), (window.find(b"\n\n"), 2))
            if i >= 0]
    if ends:
        i, n = min(ends)
        if i + n > MAX_HEAD:
            return None
        try:
            return _parse_head(window[:i], i + n)
        except (UnicodeDecodeError, ValueError):
            return None
    if len(stream) >= MAX_HEAD:
        return None
    # Not finished: is it a valid prefix? Complete lines must already be valid.
    lines = _split_lines(stream)
    if not _valid_request_line_prefix(lines[0]):
        return None
    if len(lines) > 1:
        try:
            complete = b"\n".join(lines[:-1])
            if _parse_head(complete, 0) is None:
                return None
        except (UnicodeDecodeError, ValueError):
            return None
        last = lines[-1]
        if last and last[:1] not in (b" ", b"\t"):
            name = last.partition(b":")[0]
            if b":" not in last:
                if not all(c in _TCHAR for c in name):
                    return None
            elif not _is_token(name):
                return None
    raise NeedMore


# What ends the Host header's line for a censor that acts on it (parse_through_host).
HOST_LINE_ENDS = ("crlf", "cr-or-lf")


def parse_through_host(stream: bytes, line_end: str = "crlf") -> HttpRequest | None:
    """The request head as far as its first Host line, once that line has ended.

    A censor that acts on the Host header need not wait for the blank line that
    ends the head: Wu et al. triggered the Henan firewall and the GFW with
    ``GET / HTTP/1.1\\r\\nHost: example.com\\r\\n`` and nothing after it (IEEE
    S&P 2025, §4.1). ``line_end`` is what ends the Host line: ``crlf``, as in
    that request, or ``cr-or-lf``, a CR or an LF alone (the minimal trigger a
    comment in the paper's source notes, unpublished). Other lines end as
    :func:`parse_request` ends them. A head that ends before any Host line is
    parsed whole (``host`` None); NeedMore and None as :func:`parse_request`.
    """
    if line_end not in HOST_LINE_ENDS:
        raise ValueError(f"unknown Host line end {line_end!r}")
    window = stream[:MAX_HEAD]
    nl = window.find(b"\n")
    pos = nl + 1 if nl >= 0 else len(window)
    while pos < len(window):
        if window[pos:pos + 1] in (b"\r", b"\n"):
            break  # the blank line: the head is over, with no Host line ended first
        nl = window.find(b"\n", pos)
        line = window[pos:nl if nl >= 0 else len(window)]
        name, colon, _ = line.partition(b":")
        if colon and name.lower() == b"host":
            if line_end == "crlf":
                end = nl - 1 if nl > pos and window[nl - 1:nl] == b"\r" else -1
                term = 2
            else:
                cr = line.find(b"\r")
                end, term = (pos + cr, 1) if cr >= 0 else (nl, 1)
            if end >= 0:
                try:
                    return _parse_head(window[:end], end + term)
                except (UnicodeDecodeError, ValueError):
                    return None
        if nl < 0:
            break
        pos = nl + 1
    return parse_request(stream)


WHERE = ("path", "host")


def _needles(keywords: Iterable[str | bytes]) -> list[tuple[str, str]]:
    out = []
    for k in keywords:
        s = k.decode("latin-1") if isinstance(k, bytes | bytearray) else str(k)
        if s:
            out.append((s, s.lower()))
    return out


def keyword_match(
    req: HttpRequest,
    keywords: Iterable[str | bytes],
    where: Sequence[str] = WHERE,
) -> tuple[str, str] | None:
    """The first ``(keyword, where)`` found, case-insensitively, or None.

    ``where`` names the places searched, in order: ``"path"`` (the request path and
    query) and ``"host"`` (see :attr:`HttpRequest.host`) — the two places the GFW
    inspects (Rambert et al. 2021). Keywords are tried in the order given, for each
    place in turn; the keyword is returned as given.

    Percent-encoding (a modelling choice, documented because the sources do not settle
    it): the path matches if the keyword is in the raw path *or* in its single
    percent-decoding (bytes decoded as UTF-8 with replacement). So ``/%66alun`` matches
    "falun", as a censor that normalises URLs would see it, while a double encoding
    (``%2566``) does not: one decoding pass, as a server does. A bare-keyword censor is
    the special case of never seeing encoded keywords, so this is the stricter model.
    """
    needles = _needles(keywords)
    if not needles:
        return None
    haystacks: tuple[str, ...]
    for place in where:
        if place == "path":
            raw = req.path
            decoded = unquote_to_bytes(raw).decode("utf-8", "replace")
            haystacks = (raw.lower(), decoded.lower())
        elif place == "host":
            haystacks = ((req.host or "").lower(),)
        else:
            raise ValueError(f"unknown place {place!r}: expected one of {WHERE}")
        for given, low in needles:
            if any(low in h for h in haystacks):
                return given, place
    return None
