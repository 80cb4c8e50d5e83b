"""The HTTP head reader and parsers: Go's leniency and strictness, caps, and fuzzing."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.webtunnel.httphead import (
    HeadError,
    parse_request,
    parse_response,
    read_head,
)


def reader_with(data: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


async def test_the_head_ends_at_the_empty_line_and_the_rest_stays():
    reader = reader_with(b"GET / HTTP/1.1\r\nA: b\r\n\r\nraw \r\n\r\n bytes")
    assert await read_head(reader) == b"GET / HTTP/1.1\r\nA: b\r\n\r\n"
    assert await reader.read() == b"raw \r\n\r\n bytes"


async def test_bare_line_feeds_end_lines_too():
    reader = reader_with(b"HTTP/1.1 101 Switching Protocols\nUpgrade: websocket\n\nrest")
    head = await read_head(reader)
    assert parse_response(head).fields.first("upgrade") == "websocket"
    assert await reader.read() == b"rest"


async def test_a_head_over_the_cap_is_refused():
    reader = reader_with(b"GET / HTTP/1.1\r\n" + b"X: " + b"a" * 200 + b"\r\n\r\n")
    with pytest.raises(HeadError, match="too large"):
        await read_head(reader, max_bytes=100)


async def test_a_line_over_the_readers_limit_is_refused():
    reader = asyncio.StreamReader(limit=64)
    reader.feed_data(b"GET /" + b"a" * 200)
    with pytest.raises(HeadError, match="too large"):
        await read_head(reader, max_bytes=10_000)


async def test_a_head_cut_short_is_refused():
    with pytest.raises(HeadError, match="closed"):
        await read_head(reader_with(b"GET / HTTP/1.1\r\nHost: a\r\n"))


def test_a_request_and_its_fields():
    req = parse_request(b"GET /p?q=1 HTTP/1.1\r\nHost: a.test\r\nConnection:  Upgrade \r\n"
                        b"connection: close\r\nUpgrade:\twebsocket\r\n\r\n")
    assert (req.method, req.target, req.version) == ("GET", "/p?q=1", "HTTP/1.1")
    assert req.fields.first("CONNECTION") == "Upgrade"  # the first, trimmed
    assert req.fields.first("upgrade") == "websocket"
    assert req.fields.first("X-Forwarded-For") is None


def test_continuation_lines_join_the_field_before():
    req = parse_request(b"GET / HTTP/1.1\r\nUpgrade: web\r\n  socket\r\n\r\n")
    assert req.fields.first("Upgrade") == "web socket"


def test_a_field_with_an_empty_name_is_skipped():
    req = parse_request(b"GET / HTTP/1.1\r\n: nothing\r\nA: b\r\n\r\n")
    assert req.fields.items == (("A", "b"),)


@pytest.mark.parametrize("head", [
    b"\r\n",  # nothing
    b"GET /\r\n\r\n",  # two fields only
    b"GET  / HTTP/1.1\r\n\r\n",  # an empty target
    b"GET / HTTP/1.1 \r\n\r\n",  # trailing space in the version
    b"GET / HTTP/11\r\n\r\n",
    b"GET / HTTPS/1.1\r\n\r\n",
    b"G(T / HTTP/1.1\r\n\r\n",  # not a token
    b"GET nope HTTP/1.1\r\n\r\n",
    b"GET /a%zz HTTP/1.1\r\n\r\n",
    b"GET /\x01 HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\n Host: a\r\n\r\n",  # the first field starts with space
    b"GET / HTTP/1.1\r\nHost a\r\n\r\n",  # no colon
    b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",  # space before the colon
    b"GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n",  # a control character in a value
    b"GET / HTTP/1.1\r\nHost: a\r\n",  # no empty line
    b"GET / HTTP/1.1\n",
])
def test_malformed_requests_are_refused(head):
    with pytest.raises(HeadError):
        parse_request(head)


@pytest.mark.parametrize("fields", [
    b"Transfer-Encoding: gzip\r\n",
    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    b"Content-Length: 5\r\nContent-Length: 6\r\n",
    b"Content-Length: -1\r\n",
    b"Content-Length: 0x10\r\n",
    b"Content-Length:\r\n",
    b"Content-Length: 99999999999999999999\r\n",
])
def test_body_framing_go_refuses(fields):
    with pytest.raises(HeadError):
        parse_request(b"GET / HTTP/1.1\r\n" + fields + b"\r\n")


@pytest.mark.parametrize(("version", "fields"), [
    ("HTTP/1.1", b"Transfer-Encoding: Chunked\r\nContent-Length: nonsense\r\n"),
    ("HTTP/1.0", b"Transfer-Encoding: gzip\r\n"),  # ignored before 1.1
    ("HTTP/1.1", b"Content-Length: 12\r\ncontent-length: 12\r\n"),
])
def test_body_framing_go_accepts(version, fields):
    assert parse_request(f"GET / {version}\r\n".encode() + fields + b"\r\n").method == "GET"


def test_a_101_may_carry_any_single_content_length():
    resp = parse_response(b"HTTP/1.1 101 Switching Protocols\r\nContent-Length: x\r\n\r\n")
    assert resp.code == 101
    with pytest.raises(HeadError):
        parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")


@pytest.mark.parametrize("target", ["/", "*", "http://a.test/x", "/%41?%zz"])
def test_request_targets_go_accepts(target):
    assert parse_request(f"OPTIONS {target} HTTP/1.0\r\n\r\n".encode()).target == target


def test_a_status_line_as_go_reads_it():
    resp = parse_response(b"HTTP/1.0   101 Switching Protocols\r\n\r\n")
    assert (resp.version, resp.status, resp.code) == ("HTTP/1.0", "101 Switching Protocols", 101)


@pytest.mark.parametrize("head", [
    b"HTTP/1.1\r\n\r\n", b"HTTP/1.1 1010 x\r\n\r\n", b"HTTP/1.1 abc x\r\n\r\n",
    b"HTTP/1.12 101 x\r\n\r\n", b"ICY 200 OK\r\n\r\n", b"HTTP/1.1 1\xb23 x\r\n\r\n",
])
def test_malformed_responses_are_refused(head):
    with pytest.raises(HeadError):
        parse_response(head)


# --- fuzzing: any bytes give a head or HeadError, nothing else ------------------------

_PIECES = st.sampled_from([b"GET", b"HTTP/1.1", b"101", b" ", b"\t", b"\r\n", b"\n", b"\r",
                           b":", b"/", b"%", b"Upgrade", b"websocket", b"\x00", b"\xff"])
_HEADS = st.one_of(st.binary(max_size=300),
                   st.lists(_PIECES, max_size=40).map(b"".join))


@settings(max_examples=400, deadline=None)
@given(_HEADS)
def test_parse_request_raises_only_head_error(data):
    try:
        parse_request(data)
    except HeadError:
        pass


@settings(max_examples=400, deadline=None)
@given(_HEADS)
def test_parse_response_raises_only_head_error(data):
    try:
        parse_response(data)
    except HeadError:
        pass


@settings(max_examples=200, deadline=None)
@given(_HEADS, st.binary(max_size=50))
def test_read_head_keeps_every_byte_after_the_head(data, tail):
    async def run() -> tuple[bytes | None, bytes]:
        reader = reader_with(data + tail)
        try:
            head = await read_head(reader, max_bytes=1000)
        except HeadError:
            return None, b""
        return head, await reader.read()

    head, rest = asyncio.run(run())
    if head is not None:
        assert head + rest == data + tail
        assert head.endswith(b"\n")
