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


def test_pt_args_take_a_bare_equals_sign_in_a_value_as_goptlib_does():
    assert socks5.parse_pt_args(r"url=https://x/?a=b;k\=ey=v") == {"url": "https://x/?a=b",
                                                                     "k=ey": "v"}


@pytest.mark.parametrize(("text", "fragment"), [
    ("k=v\\", "dangling backslash"),  # goptlib: "nothing following final escape"
    ("k=v;", "without '='"),
    ("=v", "empty key"),
])
def test_malformed_pt_args_are_refused(text, fragment):
    with pytest.raises(socks5.SocksError, match=fragment):
        socks5.parse_pt_args(text)


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


# How PT arguments are split over RFC 1929 UNAME/PASSWD (tor and goptlib rules).

def test_split_follows_tor():
    assert socks5.split_pt_args(b"a=b") == (b"a=b", b"\x00")
    assert socks5.split_pt_args(b"k=" + b"v" * 253) == (b"k=" + b"v" * 253, b"\x00")  # 255 fit
    user, pw = socks5.split_pt_args(b"k=" + b"v" * 254)
    assert (len(user), pw) == (255, b"v")
    assert socks5.split_pt_args(b"k=" + b"v" * 508)[1] == b"v" * 255
    for bad in (b"", b"k=" + b"v" * 509, b"k=a\x00b"):
        with pytest.raises(socks5.SocksError):
            socks5.split_pt_args(bad)


def test_join_follows_goptlib():
    assert socks5.join_pt_args(b"a=b", b"\x00") == b"a=b"  # one NUL means "no password"
    assert socks5.join_pt_args(b"cert=X;iat-mode", b"=0") == b"cert=X;iat-mode=0"
    assert socks5.join_pt_args(b"a=b", b"\x00\x00") == b"a=b\x00\x00"  # only exactly one NUL


async def _raw_auth(user: bytes, passwd: bytes):
    """Send one RFC 1929 exchange by hand; return (auth reply, server's result)."""
    server, port, got = await _serve_once()
    async with server:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"\x05\x01\x02")
        assert await r.readexactly(2) == b"\x05\x02"
        w.write(bytes([1, len(user)]) + user + bytes([len(passwd)]) + passwd)
        status = await r.readexactly(2)
        if status == b"\x01\x00":
            w.write(b"\x05\x01\x00\x01" + bytes([127, 0, 0, 1]) + b"\x00\x50")
        await asyncio.sleep(0.05)
        w.close()
    return status, got


async def test_curl_style_split_at_a_colon():
    # curl --proxy-user "cert=X;iat-mode:=0" sends USER "cert=X;iat-mode", PASS "=0".
    status, got = await _raw_auth(b"cert=X;iat-mode", b"=0")
    assert status == b"\x01\x00"
    assert got["req"].args == {"cert": "X", "iat-mode": "0"}


async def test_zero_length_fields_are_refused():
    for user, pw in ((b"", b"\x00"), (b"a=b", b"")):
        status, got = await _raw_auth(user, pw)
        assert status == b"\x01\x01" and isinstance(got["error"], socks5.SocksError)


async def test_escape_straddling_the_field_boundary():
    # "k=" + 252 a's puts the backslash of "\;" at byte 255 and the ';' in PASSWD.
    args = {"k": "a" * 252 + ";b"}
    encoded = socks5.encode_pt_args(args).encode()
    assert encoded[254:256] == b"\\;"
    server, port, got = await _serve_once()
    async with server:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        await socks5.client_connect(r, w, "127.0.0.1", 80, args)
        w.close()
        await asyncio.sleep(0.05)
    assert got["req"].args == args


async def test_ptadapter_client_split_reaches_our_server():
    from ptadapter import socks as pt_socks

    args = {"cert": "c" * 300, "iat-mode": "2"}
    server, port, got = await _serve_once()
    async with server:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        await pt_socks.negotiate_socks5_userpass(r, w, "198.18.0.2", 443, args)
        w.close()
        await asyncio.sleep(0.05)
    assert got["req"].args == args and got["req"].port == 443


async def test_client_refuses_nul_in_args():
    with pytest.raises(socks5.SocksError):
        await socks5.client_connect(None, None, "127.0.0.1", 80, {"k": "a\x00"})
