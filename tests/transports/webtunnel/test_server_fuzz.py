"""The server's HTTP handling, fuzzed over a real loopback socket (issue 25): whatever a
client sends, the server answers with the exact 101 and relays, or closes without a
word; it never reaches its unexpected-error path, and the next client is served."""

from __future__ import annotations

import asyncio

from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.support.strategies import mostly
from tests.transports.webtunnel.test_server import GOOD, Tunnels, upgrade_and_echo
from transports.webtunnel.server import ServerConfig, WebTunnelServer, listen
from transports.webtunnel.upgrade import RESPONSE

# Mostly well-formed parts with junk among them (``mostly``), so the fuzz reaches both
# branches.
LINE_FREE = st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
TOKEN = st.binary(min_size=1, max_size=10).map(
    lambda b: bytes(c for c in b if 33 <= c < 127 and c != 58) or b"X")
NAME = mostly([b"X-Forwarded-For", b"Host", b"User-Agent", b"Content-Length",
               b"Transfer-Encoding", b"Connection", b"Upgrade", b"Sec-WebSocket-Key"],
              TOKEN | st.sampled_from([b"Connection ", b"Up grade", b""]))
VALUE = mostly([b"203.0.113.9", b"2001:db8::7, 10.0.0.1", b"fe80::1%eth0", b"not an address",
                b"bridge.example", b"0", b"-1", b"chunked", b"upgrade", b"websocket",
                b"keep-alive, Upgrade", b" upgrade", b"upgrade\t"], LINE_FREE)
HEADER = st.tuples(NAME, VALUE)
REQUEST_LINE = st.tuples(
    mostly([b"GET", b"POST", b"CONNECT", b"PUT"], TOKEN | st.sampled_from([b"G\x00T", b""]), 8),
    mostly([b"/secret", b"/", b"*", b"http://bridge.example/secret", b"/a%20b"],
           TOKEN | st.sampled_from([b"/%zz", b""])),
    mostly([b"HTTP/1.1", b"HTTP/1.0"],
           st.sampled_from([b"HTTP/2.0", b"HTTP/1.1x", b"HTTP/01.1", b"http/1.1", b""]), 8))
NEWLINE = mostly([b"\r\n", b"\n"], st.sampled_from([b"\r", b"\n\r"]), 8)
# The two fields the upgrade test reads, most often present, in either order.
UPGRADE_FIELDS = st.sampled_from([
    [(b"Connection", b"upgrade"), (b"Upgrade", b"websocket")],
    [(b"Upgrade", b"WebSocket"), (b"Connection", b"Upgrade")],
    [(b"Connection", b"upgrade")],
    []])


def exchange(data: bytes, eof: bool, max_head_bytes: int = 2048) -> tuple[bytes, WebTunnelServer,
                                                                          list[dict]]:
    """A fresh server on loopback; ``data`` sent (then EOF if asked); everything the server
    answers until it closes; then the same server must still upgrade a good client."""

    async def go() -> tuple[bytes, WebTunnelServer, list[dict]]:
        loop = asyncio.get_running_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        server = WebTunnelServer(ServerConfig("https://bridge.example/secret",
                                              handshake_timeout_s=1.0,
                                              max_head_bytes=max_head_bytes), Tunnels())
        listening = await listen(server, "127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", listening.port)
            writer.write(data)
            if eof:
                writer.write_eof()
            try:
                answer = await asyncio.wait_for(reader.read(), 5)
            except ConnectionResetError:
                answer = b""
            writer.close()
            assert await upgrade_and_echo(listening.port) == b"ping"
        finally:
            await listening.aclose()
        return answer, server, errors

    return asyncio.run(go())


def assert_upgraded_or_silent(answer: bytes, payload: bytes, server: WebTunnelServer,
                              errors: list[dict]) -> None:
    event("upgraded" if answer else "closed without a word")
    if answer:
        # The exact 101, then our own bytes echoed back by the tunnel: nothing else.
        assert answer == RESPONSE + payload, answer[:200]
        assert server.stats.upgraded == 2  # this client and the good one after it
    else:
        assert server.stats.upgraded == 1
    assert server.stats.unexpected == 0
    assert not errors


@settings(max_examples=300, deadline=None)
@given(line=REQUEST_LINE, before=st.lists(HEADER, max_size=3), core=UPGRADE_FIELDS,
       after=st.lists(HEADER, max_size=3),
       newline=NEWLINE, payload=st.binary(max_size=64),
       cut=st.tuples(st.integers(0, 5), st.integers(0, 400)).map(
           lambda pick: pick[1] if pick[0] == 1 else None))
def test_any_request_is_upgraded_exactly_or_closed_without_a_word(line, before, core, after,
                                                                 newline, payload, cut):
    method, target, version = line
    headers = before + core + after
    head = b" ".join(part for part in (method, target, version) if part) + newline
    head += b"".join(name + b": " + value + newline for name, value in headers) + newline
    data = head + payload
    if cut is not None:
        data = data[:cut]  # a truncated request, then EOF
        payload = data[len(head):]
    answer, server, errors = exchange(data, eof=True)
    assert_upgraded_or_silent(answer, payload, server, errors)


@settings(max_examples=150, deadline=None)
@given(method=st.from_regex(rb"\A[A-Z]{1,10}\Z"),
       target=st.from_regex(rb"\A[A-Za-z0-9._~/-]{0,30}\Z"),
       extra=st.lists(st.tuples(st.from_regex(rb"\A[A-Za-z0-9-]{1,16}\Z"),
                                st.from_regex(rb"\A[ -~]{0,40}\Z")), max_size=6),
       payload=st.binary(max_size=64))
def test_every_well_formed_upgrade_is_answered_whatever_else_it_carries(method, target, extra,
                                                                       payload):
    # Other fields may not be Connection or Upgrade: the first of each decides (as Go does).
    extra = [(k, v) for k, v in extra if k.lower() not in (b"connection", b"upgrade")]
    head = method + b" /" + target + b" HTTP/1.1\r\n"
    head += b"".join(k + b": " + v + b"\r\n" for k, v in extra)
    head += b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    answer, server, errors = exchange(head + payload, eof=True)
    assert answer == RESPONSE + payload
    assert server.stats.upgraded == 2 and server.stats.unexpected == 0 and not errors


@settings(max_examples=60, deadline=None)
@given(junk=st.binary(min_size=1, max_size=3000))
def test_junk_of_any_size_is_closed_without_a_word(junk):
    answer, server, errors = exchange(junk, eof=True, max_head_bytes=1024)
    assert answer == b"" or answer.startswith(RESPONSE)
    assert server.stats.unexpected == 0 and not errors


def test_the_good_request_used_above_is_an_upgrade():
    """Not vacuous: the helper's follow-up request really upgrades."""
    answer, server, _ = exchange(GOOD + b"hello", eof=True)
    assert answer == RESPONSE + b"hello" and server.stats.upgraded == 2
