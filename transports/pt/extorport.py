"""The client side of tor's Extended ORPort (torspec ext-orport-spec, proposal 217).

A server PT that relays to the plain ORPort hides every client behind
127.0.0.1, so the bridge cannot count users by country or tell transports
apart. The Extended ORPort fixes that: after SafeCookie authentication the PT
sends USERADDR (the real client address) and TRANSPORT, then DONE, and tor
answers OKAY or DENY before the ordinary OR traffic starts.

SafeCookie proves to each side that the other can read the cookie file, without
sending the cookie. The client checks the server's hash first, so a process
squatting on the port learns nothing and gets nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import struct
from pathlib import Path

from transports.base import Streams
from transports.common.upstream import open_bounded

COOKIE_HEADER = b"! Extended ORPort Auth Cookie !\x0a"
COOKIE_LEN = 32
NONCE_LEN = 32
HASH_LEN = 32
SERVER_HASH_LABEL = b"ExtORPort authentication server-to-client hash"
CLIENT_HASH_LABEL = b"ExtORPort authentication client-to-server hash"
AUTH_END, AUTH_SAFE_COOKIE = 0x00, 0x01
CMD_DONE, CMD_USERADDR, CMD_TRANSPORT = 0x0000, 0x0001, 0x0002
REPLY_OKAY, REPLY_DENY = 0x1000, 0x1001
MAX_AUTH_TYPES = 256  # a server that never ends its list is not tor


class ExtORPortError(Exception):
    """The Extended ORPort handshake failed."""


class ExtORPortAuthError(ExtORPortError):
    """SafeCookie failed: wrong cookie, or the port is not tor's Extended ORPort."""


class ExtORPortDenied(ExtORPortError):
    """Tor authenticated us and then answered DENY to the connection."""


def read_cookie(path: str | os.PathLike[str]) -> bytes:
    """The 32-byte secret from a cookie file (32-byte header + 32-byte cookie)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ExtORPortError(f"cannot read auth cookie file {path}: {exc}") from exc
    if len(data) != len(COOKIE_HEADER) + COOKIE_LEN or not data.startswith(COOKIE_HEADER):
        raise ExtORPortError(f"{path} is not an Extended ORPort auth cookie file")
    return data[len(COOKIE_HEADER):]


def server_hash(cookie: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(cookie, SERVER_HASH_LABEL + client_nonce + server_nonce,
                    hashlib.sha256).digest()


def client_hash(cookie: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(cookie, CLIENT_HASH_LABEL + client_nonce + server_nonce,
                    hashlib.sha256).digest()


def encode_command(cmd: int, body: bytes = b"") -> bytes:
    """``CMD (2 bytes, big-endian) | LEN (2) | BODY``."""
    if len(body) > 0xFFFF:
        raise ValueError("Extended ORPort command body longer than 65535 bytes")
    return struct.pack("!HH", cmd, len(body)) + body


async def read_command(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    cmd, length = struct.unpack("!HH", await reader.readexactly(4))
    return cmd, await reader.readexactly(length)


async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       cookie: bytes) -> None:
    """Run SafeCookie as the client; raise :class:`ExtORPortAuthError` on failure."""
    offered = []
    while (b := (await reader.readexactly(1))[0]) != AUTH_END:
        offered.append(b)
        if len(offered) > MAX_AUTH_TYPES:
            raise ExtORPortAuthError("server sent an endless list of auth types")
    if AUTH_SAFE_COOKIE not in offered:
        raise ExtORPortAuthError(f"server offers no SAFE_COOKIE auth (offered {offered})")
    client_nonce = os.urandom(NONCE_LEN)
    writer.write(bytes([AUTH_SAFE_COOKIE]) + client_nonce)
    await writer.drain()
    their_hash = await reader.readexactly(HASH_LEN)
    server_nonce = await reader.readexactly(NONCE_LEN)
    if not hmac.compare_digest(their_hash, server_hash(cookie, client_nonce, server_nonce)):
        # The spec says to close here: the other end does not hold our cookie.
        raise ExtORPortAuthError(
            "server hash mismatch: the Extended ORPort does not know our cookie "
            "(wrong TOR_PT_AUTH_COOKIE_FILE, or not tor on that port)")
    writer.write(client_hash(cookie, client_nonce, server_nonce))
    await writer.drain()
    (status,) = await reader.readexactly(1)
    if status != 1:
        raise ExtORPortAuthError(f"server refused our client hash (status {status})")


async def _handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cookie: bytes,
                     transport: str, client_addr: str) -> None:
    await authenticate(reader, writer, cookie)
    # goptlib leaves USERADDR out when the address is unknown (Snowflake
    # without a client_ip), rather than sending an empty one.
    useraddr = encode_command(CMD_USERADDR, client_addr.encode("ascii")) if client_addr else b""
    writer.write(useraddr
                 + encode_command(CMD_TRANSPORT, transport.encode("ascii"))
                 + encode_command(CMD_DONE))
    await writer.drain()
    while True:
        cmd, body = await read_command(reader)
        if cmd == REPLY_OKAY:
            return
        if cmd == REPLY_DENY:
            # Not the address: it would reach the log (docs/transports/budgets.md §3).
            raise ExtORPortDenied(f"Extended ORPort denied the client ({transport})")
        # Anything else (an old CONTROL reply) is not for us; keep waiting.


async def open_extorport(host: str, port: int, cookie_path: str | os.PathLike[str],
                         transport: str, client_addr: str, *,
                         timeout: float = 10.0, read_buffer: int | None = None) -> Streams:
    """Connect to tor's Extended ORPort and hand back streams ready for OR traffic.

    `client_addr` is the real client's ``ip:port`` (IPv6 in brackets) for
    USERADDR; `transport` is the PT name for TRANSPORT. Raises
    :class:`ExtORPortAuthError` if SafeCookie fails, :class:`ExtORPortDenied`
    on DENY, :class:`ExtORPortError` for a bad cookie file, a timeout or a
    connection that ends early, and ``OSError`` if the port cannot be reached.
    With ``read_buffer``, the connection's read side is bounded
    (:func:`transports.common.upstream.open_bounded`).
    """
    cookie = read_cookie(cookie_path)
    if read_buffer is None:
        reader, writer = await asyncio.open_connection(host, port)
    else:
        reader, writer = await open_bounded(host, port, read_buffer)
    try:
        await asyncio.wait_for(_handshake(reader, writer, cookie, transport, client_addr),
                               timeout)
    except BaseException as exc:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        if isinstance(exc, asyncio.IncompleteReadError):
            raise ExtORPortError("Extended ORPort closed the connection during the "
                                 "handshake (authentication refused?)") from exc
        if isinstance(exc, TimeoutError):
            raise ExtORPortError(f"Extended ORPort handshake took over {timeout} s") from exc
        raise
    return reader, writer
