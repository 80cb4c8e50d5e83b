"""The SOCKS5 front: RFC 1928 CONNECT, RFC 1929 PT arguments, and garbage input."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.pt import socks5


@given(st.dictionaries(st.text(min_size=1).filter(lambda k: "\x00" not in k),
                       st.text().filter(lambda v: "\x00" not in v), max_size=5))
def test_pt_args_round_trip(args):
    assert socks5.parse_pt_args(socks5.encode_pt_args(args)) == args


def test_pt_args_escapes():
    assert socks5.parse_pt_args(r"cert=a\;b\=c;iat-mode=0") == {"cert": "a;b=c", "iat-mode": "0"}
    with pytest.raises(socks5.SocksError):
        socks5.parse_pt_args("novalue")


async def _serve_once():
    got = {}

    async def handle(r, w):
        try:
            req = await socks5.read_request(r, w)
            got["req"] = req
            w.write(socks5.reply(socks5.REP_OK))
            await w.drain()
        except (socks5.SocksError, asyncio.IncompleteReadError) as exc:
            got["error"] = exc
        w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], got


@pytest.mark.parametrize("host", ["198.18.3.2", "2001:db8::2", "bridge.lab"])
async def test_connect_with_args(host):
    server, port, got = await _serve_once()
    async with server:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        args = {"cert": "x" * 300, "iat-mode": "1"}  # longer than one RFC 1929 field
        await socks5.client_connect(r, w, host, 9001, args)
        w.close()
        await asyncio.sleep(0.05)
    assert got["req"].host == host and got["req"].port == 9001
    assert got["req"].args == args


async def test_bind_command_is_refused_with_the_right_code():
    server, port, got = await _serve_once()
    async with server:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"\x05\x01\x00" + b"\x05\x02\x00\x01" + bytes(4) + b"\x00\x50")
        assert await r.readexactly(2) == b"\x05\x00"
        w.close()
        await asyncio.sleep(0.05)
    assert isinstance(got["error"], socks5.SocksError)
    assert got["error"].reply == socks5.REP_CMD_UNSUPPORTED


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=80))
def test_garbage_never_crashes_the_parser(data):
    async def go():
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()

        class W:
            def write(self, b):
                pass

            async def drain(self):
                pass

        try:
            await socks5.read_request(reader, W())
        except (socks5.SocksError, asyncio.IncompleteReadError, UnicodeError, ValueError):
            pass

    asyncio.run(go())
