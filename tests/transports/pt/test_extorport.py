"""Extended ORPort client: SafeCookie, USERADDR/TRANSPORT/DONE, OKAY/DENY, bad cookies."""

import asyncio
import hashlib
import hmac
import os
import struct

import pytest
from ptadapter.adapters import SafeCookieServerAuthenticator

from transports.pt import extorport

HEADER = b"! Extended ORPort Auth Cookie !\x0a"


def write_cookie(path, cookie: bytes) -> str:
    path.write_bytes(HEADER + cookie)
    return str(path)


class FakeExtORPort:
    """A minimal tor-side Extended ORPort, written from the spec for these tests."""

    def __init__(self, cookie: bytes, *, status: int | None = None, reply: int = 0x1000,
                 auth_types: bytes = b"\x01\x00") -> None:
        self.cookie, self.status, self.reply, self.auth_types = cookie, status, reply, auth_types
        self.commands: list[tuple[int, bytes]] = []
        self.client_hash_ok: bool | None = None
        self.closed_early = False
        self.done = asyncio.Event()

    def mac(self, label: bytes, cn: bytes, sn: bytes) -> bytes:
        return hmac.new(self.cookie, label + cn + sn, hashlib.sha256).digest()

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            w.write(self.auth_types)
            assert await r.readexactly(1) == b"\x01"
            cn, sn = await r.readexactly(32), os.urandom(32)
            w.write(self.mac(b"ExtORPort authentication server-to-client hash", cn, sn) + sn)
            try:
                got = await r.readexactly(32)
            except asyncio.IncompleteReadError:
                self.closed_early = True
                return
            self.client_hash_ok = got == self.mac(
                b"ExtORPort authentication client-to-server hash", cn, sn)
            status = self.status if self.status is not None else int(self.client_hash_ok)
            w.write(bytes([status]))
            if status != 1:
                return
            while True:
                cmd, n = struct.unpack("!HH", await r.readexactly(4))
                body = await r.readexactly(n)
                if cmd == 0:
                    break
                self.commands.append((cmd, body))
            w.write(struct.pack("!HH", self.reply, 0))
            await w.drain()
            if self.reply == 0x1000:
                while data := await r.read(65536):  # echo, as an ORPort stand-in
                    w.write(data)
                    await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_early = True
        finally:
            w.close()
            self.done.set()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()


async def test_safecookie_then_useraddr_transport_okay(tmp_path):
    cookie = os.urandom(32)
    path = write_cookie(tmp_path / "cookie", cookie)
    async with FakeExtORPort(cookie) as fake:
        r, w = await extorport.open_extorport("127.0.0.1", fake.port, path, "obfs4",
                                              "198.18.0.7:53211")
        w.write(b"ping")
        assert await r.readexactly(4) == b"ping"
        w.close()
        await fake.done.wait()
    assert fake.client_hash_ok
    assert fake.commands == [(0x0001, b"198.18.0.7:53211"), (0x0002, b"obfs4")]


async def test_bad_cookie_is_refused_before_we_answer(tmp_path):
    path = write_cookie(tmp_path / "cookie", os.urandom(32))
    async with FakeExtORPort(os.urandom(32)) as fake:  # tor holds a different cookie
        with pytest.raises(extorport.ExtORPortAuthError, match="server hash mismatch"):
            await extorport.open_extorport("127.0.0.1", fake.port, path, "direct",
                                           "127.0.0.1:1")
        await asyncio.wait_for(fake.done.wait(), 2)
    # We checked the server's hash and hung up without sending ours.
    assert fake.closed_early and fake.client_hash_ok is None


async def test_server_refusing_our_hash(tmp_path):
    cookie = os.urandom(32)
    path = write_cookie(tmp_path / "cookie", cookie)
    async with FakeExtORPort(cookie, status=0) as fake:
        with pytest.raises(extorport.ExtORPortAuthError, match="status 0"):
            await extorport.open_extorport("127.0.0.1", fake.port, path, "direct",
                                           "127.0.0.1:1")


async def test_deny(tmp_path):
    cookie = os.urandom(32)
    path = write_cookie(tmp_path / "cookie", cookie)
    async with FakeExtORPort(cookie, reply=0x1001) as fake:
        with pytest.raises(extorport.ExtORPortDenied):
            await extorport.open_extorport("127.0.0.1", fake.port, path, "direct",
                                           "[2001:db8::7]:4000")
    assert fake.commands[0] == (0x0001, b"[2001:db8::7]:4000")


async def test_no_safe_cookie_offered(tmp_path):
    cookie = os.urandom(32)
    path = write_cookie(tmp_path / "cookie", cookie)
    async with FakeExtORPort(cookie, auth_types=b"\x07\x00") as fake:
        with pytest.raises(extorport.ExtORPortAuthError, match="no SAFE_COOKIE"):
            await extorport.open_extorport("127.0.0.1", fake.port, path, "direct",
                                           "127.0.0.1:1")


async def test_server_hanging_up_is_a_clear_error(tmp_path):
    path = write_cookie(tmp_path / "cookie", os.urandom(32))

    async def rude(r, w):
        w.close()

    server = await asyncio.start_server(rude, "127.0.0.1", 0)
    async with server:
        with pytest.raises(extorport.ExtORPortError, match="closed the connection"):
            await extorport.open_extorport("127.0.0.1", server.sockets[0].getsockname()[1],
                                           path, "direct", "127.0.0.1:1")


def test_cookie_file_checks(tmp_path):
    good = write_cookie(tmp_path / "good", b"c" * 32)
    assert extorport.read_cookie(good) == b"c" * 32
    (tmp_path / "bad").write_bytes(b"! Wrong header here padded !!!!\n" + b"c" * 32)
    (tmp_path / "short").write_bytes(HEADER + b"c" * 31)
    for name in ("bad", "short", "missing"):
        with pytest.raises(extorport.ExtORPortError):
            extorport.read_cookie(tmp_path / name)


async def test_against_ptadapters_authenticator(tmp_path):
    """An independent server side: ptadapter's SafeCookie must accept us."""
    auth = SafeCookieServerAuthenticator()
    auth.write_cookie_file(str(tmp_path / "cookie"))
    result = asyncio.get_running_loop().create_future()

    async def handle(r, w):
        result.set_result(await auth.authenticate(r, w))
        await w.drain()
        w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        r, w = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        await extorport.authenticate(r, w, extorport.read_cookie(tmp_path / "cookie"))
        w.close()
        assert await asyncio.wait_for(result, 2) is True
