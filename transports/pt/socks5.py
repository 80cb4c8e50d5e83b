"""The SOCKS5 front of a PT client (RFC 1928, RFC 1929 for PT arguments).

Tor's PT spec passes per-bridge arguments (``cert=...;iat-mode=0``) through
RFC 1929 username/password authentication: the argument string is the
username followed by the password, and a password of a single NUL byte means
"no more". We accept only CONNECT; everything else gets the right error code,
and malformed greetings are dropped without crashing the listener.

The split follows tor and goptlib exactly (see :func:`split_pt_args` and
:func:`join_pt_args`), so our client works with obfs4proxy and tor's args
reach our server intact, including the ``curl --proxy-user 'k=v;k2:=v2'``
trick that splits the string at a ``:`` rather than at byte 255.
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from dataclasses import dataclass, field

from .escaping import (
    SOCKS_ARGS,
    EscapeError,
    escape,
    partition_escaped,
    split_escaped,
    unescape,
)

VERSION = 5
AUTH_NONE, AUTH_USERPASS, AUTH_NO_ACCEPTABLE = 0x00, 0x02, 0xFF
CMD_CONNECT = 0x01
ATYP_V4, ATYP_DOMAIN, ATYP_V6 = 0x01, 0x03, 0x04
REP_OK, REP_FAILURE, REP_HOST_UNREACHABLE, REP_REFUSED = 0x00, 0x01, 0x04, 0x05
REP_CMD_UNSUPPORTED, REP_ATYP_UNSUPPORTED = 0x07, 0x08


class SocksError(Exception):
    """A malformed or unsupported SOCKS request; `reply` is the code to send."""

    def __init__(self, message: str, reply: int | None = REP_FAILURE) -> None:
        super().__init__(message)
        self.reply = reply


@dataclass
class SocksRequest:
    host: str
    port: int
    args: dict[str, str] = field(default_factory=dict)


def parse_pt_args(s: str) -> dict[str, str]:
    """Parse ``k=v;k2=v2`` with backslash escapes, as the PT spec defines it.

    The first unescaped ``=`` ends the key, so a value may hold a bare ``=``.
    An item without ``=``, an empty key, or a backslash that escapes nothing
    (goptlib's "nothing following final escape") is refused.
    """
    args: dict[str, str] = {}
    if not s:
        return args
    try:
        items = split_escaped(s, ";")
    except EscapeError as exc:
        raise SocksError(str(exc)) from None
    for item in items:
        key, equals, value = partition_escaped(item, "=")
        if not equals:
            raise SocksError(f"PT argument without '=': {unescape(item)!r}")
        if not key:
            raise SocksError("PT argument with an empty key")
        args[unescape(key)] = unescape(value)
    return args


MAX_FIELD = 255  # RFC 1929: UNAME and PASSWD are 1..255 bytes each


def split_pt_args(encoded: bytes) -> tuple[bytes, bytes]:
    """Split an encoded argument string over (UNAME, PASSWD) as tor does.

    Up to 255 bytes all go in UNAME and PASSWD is a single NUL, the spec's
    "nothing here" marker (RFC 1929 forbids an empty password). Longer strings
    fill UNAME with the first 255 bytes and PASSWD with the rest; beyond 510
    bytes they cannot be sent. A NUL inside the arguments is refused: tor cannot
    send one, and a PASSWD of exactly one NUL would be dropped by the server.
    """
    if not encoded:
        raise SocksError("empty PT arguments cannot go in RFC 1929 (UNAME needs 1 byte)")
    if b"\x00" in encoded:
        raise SocksError("PT arguments must not contain NUL")
    if len(encoded) > 2 * MAX_FIELD:
        raise SocksError(f"PT arguments longer than {2 * MAX_FIELD} bytes")
    return encoded[:MAX_FIELD], encoded[MAX_FIELD:] or b"\x00"


def join_pt_args(uname: bytes, passwd: bytes) -> bytes:
    """The server side of :func:`split_pt_args`, as goptlib reads it.

    goptlib concatenates UNAME and PASSWD before parsing, unless PASSWD is the
    single NUL that means "empty". Concatenating before unescaping matters: an
    escape (``\\;``) may straddle the two fields.
    """
    return uname + (b"" if passwd == b"\x00" else passwd)


def encode_pt_args(args: dict[str, str]) -> str:
    """``k=v;k2=v2`` with ``\\``, ``=`` and ``;`` escaped, as tor sends them."""
    return ";".join(f"{escape(k, SOCKS_ARGS)}={escape(v, SOCKS_ARGS)}" for k, v in args.items())


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> SocksRequest:
    """Run the server side of the SOCKS5 negotiation up to the request."""
    ver, nmethods = await reader.readexactly(2)
    if ver != VERSION:
        raise SocksError(f"not SOCKS5 (version byte {ver})", reply=None)
    methods = await reader.readexactly(nmethods)
    args: dict[str, str] = {}
    if AUTH_USERPASS in methods:
        writer.write(bytes([VERSION, AUTH_USERPASS]))
        await writer.drain()
        sub, ulen = await reader.readexactly(2)
        if sub != 1:
            raise SocksError(f"bad RFC 1929 version {sub}", reply=None)
        user = await reader.readexactly(ulen)
        (plen,) = await reader.readexactly(1)
        passwd = await reader.readexactly(plen)
        if ulen == 0 or plen == 0:
            # RFC 1929 fields are 1..255 bytes; goptlib refuses empty ones too.
            writer.write(b"\x01\x01")
            await writer.drain()
            raise SocksError("RFC 1929 username or password with 0 length", reply=None)
        try:
            args = parse_pt_args(join_pt_args(user, passwd).decode())
        except (SocksError, UnicodeDecodeError) as exc:
            writer.write(b"\x01\x01")
            await writer.drain()
            raise SocksError(f"bad PT arguments: {exc}", reply=None) from exc
        writer.write(b"\x01\x00")
    elif AUTH_NONE in methods:
        writer.write(bytes([VERSION, AUTH_NONE]))
    else:
        writer.write(bytes([VERSION, AUTH_NO_ACCEPTABLE]))
        await writer.drain()
        raise SocksError("no acceptable authentication method", reply=None)
    await writer.drain()

    ver, cmd, _rsv, atyp = await reader.readexactly(4)
    if ver != VERSION:
        raise SocksError(f"bad request version {ver}")
    if atyp == ATYP_V4:
        host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
    elif atyp == ATYP_V6:
        host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
    elif atyp == ATYP_DOMAIN:
        (n,) = await reader.readexactly(1)
        host = (await reader.readexactly(n)).decode("idna")
    else:
        raise SocksError(f"address type {atyp} unsupported", REP_ATYP_UNSUPPORTED)
    (port,) = struct.unpack("!H", await reader.readexactly(2))
    if cmd != CMD_CONNECT:
        raise SocksError(f"command {cmd} unsupported", REP_CMD_UNSUPPORTED)
    return SocksRequest(host, port, args)


def reply(code: int) -> bytes:
    """A reply with a zero IPv4 bind address (clients ignore it for CONNECT)."""
    return bytes([VERSION, code, 0, ATYP_V4, 0, 0, 0, 0, 0, 0])


async def client_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         host: str, port: int, args: dict[str, str] | None = None) -> None:
    """The client side: negotiate CONNECT to host:port, passing PT args if any.

    Like tor, offer only username/password when there are arguments and only
    "no auth" when there are none, so the server cannot silently drop them.
    """
    fields = split_pt_args(encode_pt_args(args).encode()) if args else None
    offered = AUTH_USERPASS if fields else AUTH_NONE
    writer.write(bytes([VERSION, 1, offered]))
    await writer.drain()
    ver, method = await reader.readexactly(2)
    if ver != VERSION or method != offered:
        raise SocksError("SOCKS5 server refused our authentication methods")
    if fields:
        user, passwd = fields
        writer.write(bytes([1, len(user)]) + user + bytes([len(passwd)]) + passwd)
        await writer.drain()
        _sub, status = await reader.readexactly(2)
        if status != 0:
            raise SocksError("SOCKS5 server rejected the PT arguments")
    try:
        ip = ipaddress.ip_address(host)
        addr = (bytes([ATYP_V4]) if ip.version == 4 else bytes([ATYP_V6])) + ip.packed
    except ValueError:
        enc = host.encode("idna")
        addr = bytes([ATYP_DOMAIN, len(enc)]) + enc
    writer.write(bytes([VERSION, CMD_CONNECT, 0]) + addr + struct.pack("!H", port))
    await writer.drain()
    ver, rep, _rsv, atyp = await reader.readexactly(4)
    skip = {ATYP_V4: 4, ATYP_V6: 16}.get(atyp)
    if skip is None:
        (skip,) = await reader.readexactly(1)
    await reader.readexactly(skip + 2)
    if rep != REP_OK:
        raise SocksError(f"SOCKS5 CONNECT failed with reply {rep}", reply=rep)
