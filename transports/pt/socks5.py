"""The SOCKS5 front of a PT client (RFC 1928, RFC 1929 for PT arguments).

Tor's PT spec passes per-bridge arguments (``cert=...;iat-mode=0``) through
RFC 1929 username/password authentication: the argument string is the
username followed by the password, and a password of a single NUL byte means
"no more". We accept only CONNECT; everything else gets the right error code,
and malformed greetings are dropped without crashing the listener.
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from dataclasses import dataclass, field

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
    """Parse ``k=v;k2=v2`` with backslash escapes, as the PT spec defines it."""
    args: dict[str, str] = {}
    if not s:
        return args
    key, val, cur, in_val, i = "", "", [], False, 0
    while i <= len(s):
        ch = s[i] if i < len(s) else ";"
        if ch == "\\" and i + 1 < len(s):
            cur.append(s[i + 1])
            i += 2
            continue
        if ch == "=" and not in_val:
            key, cur, in_val = "".join(cur), [], True
        elif ch == ";":
            if not in_val:
                raise SocksError(f"PT argument without '=': {''.join(cur)!r}")
            val = "".join(cur)
            if not key:
                raise SocksError("PT argument with an empty key")
            args[key] = val
            cur, in_val = [], False
        else:
            cur.append(ch)
        i += 1
    return args


def encode_pt_args(args: dict[str, str]) -> str:
    def esc(x: str) -> str:
        return x.replace("\\", "\\\\").replace("=", "\\=").replace(";", "\\;")

    return ";".join(f"{esc(k)}={esc(v)}" for k, v in args.items())


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
        raw = user + (b"" if passwd == b"\x00" else passwd)
        try:
            args = parse_pt_args(raw.decode())
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
    """The client side: negotiate CONNECT to host:port, passing PT args if any."""
    if args:
        writer.write(bytes([VERSION, 1, AUTH_USERPASS]))
    else:
        writer.write(bytes([VERSION, 1, AUTH_NONE]))
    await writer.drain()
    ver, method = await reader.readexactly(2)
    if ver != VERSION or method == AUTH_NO_ACCEPTABLE:
        raise SocksError("SOCKS5 server refused our authentication methods")
    if method == AUTH_USERPASS:
        raw = encode_pt_args(args or {}).encode()
        user, passwd = raw[:255], raw[255:] or b"\x00"
        if len(passwd) > 255:
            raise SocksError("PT arguments longer than 510 bytes")
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
