"""Reading the Tor PT managed-mode environment (pt-spec v1, section 3.2).

Tor (or ptadapter, or any parent) tells a managed PT everything through
environment variables; the PT answers on stdout. Parsing lives here, apart from
the runner, so that every rule is testable without starting a process, and so
that a bad variable becomes one exception whose :meth:`PTEnvError.line` is the
exact stdout line the spec wants (``ENV-ERROR``, ``VERSION-ERROR``,
``PROXY-ERROR``) instead of a traceback the parent cannot read.

Version is checked on its own (:func:`check_version`) because the spec orders
the lines: ``VERSION-ERROR`` must come instead of ``VERSION``, while every other
complaint comes after ``VERSION 1``.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from .escaping import EscapeError, partition_escaped, split_escaped, unescape

SUPPORTED_VERSION = "1"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class PTEnvError(Exception):
    """A problem the parent must hear about; `line()` is what to print."""

    keyword = "ENV-ERROR"

    def line(self) -> str:
        return f"{self.keyword} {self}"


class VersionError(PTEnvError):
    """None of the offered managed-transport versions is one we speak."""

    keyword = "VERSION-ERROR"

    def __init__(self, message: str = "no-version") -> None:
        # The spec asks for "no-version" for historical reasons; parents match on it.
        super().__init__(message)


class ProxyError(PTEnvError):
    """TOR_PT_PROXY is malformed or asks for something we cannot do."""

    keyword = "PROXY-ERROR"


@dataclass(frozen=True)
class Proxy:
    """The upstream proxy of TOR_PT_PROXY (``socks5://[user[:pass]@]ip:port``)."""

    scheme: str
    host: str
    port: int
    username: str | None = None
    password: str | None = None


@dataclass(frozen=True)
class ClientConfig:
    """What a client-mode PT was asked to do."""

    version: str
    state_location: Path
    transports: list[str]
    exit_on_stdin_close: bool = False
    proxy: Proxy | None = None
    outbound_bind_v4: str | None = None
    outbound_bind_v6: str | None = None


@dataclass(frozen=True)
class ServerConfig:
    """What a server-mode PT was asked to do.

    ``bindaddrs`` and ``options`` are keyed by transport name. Exactly one of
    ``orport`` / ``ext_orport`` is what the PT relays to; when both are given the
    Extended ORPort wins, because it is the one that carries the client address.
    """

    version: str
    state_location: Path
    transports: list[str]
    bindaddrs: dict[str, tuple[str, int]] = field(default_factory=dict)
    options: dict[str, dict[str, str]] = field(default_factory=dict)
    orport: tuple[str, int] | None = None
    ext_orport: tuple[str, int] | None = None
    auth_cookie_file: Path | None = None
    exit_on_stdin_close: bool = False
    outbound_bind_v4: str | None = None
    outbound_bind_v6: str | None = None


class _Common(TypedDict):
    """The fields :class:`ClientConfig` and :class:`ServerConfig` share, parsed once."""

    version: str
    state_location: Path
    exit_on_stdin_close: bool
    outbound_bind_v4: str | None
    outbound_bind_v6: str | None


def check_version(env: Mapping[str, str]) -> str:
    """The protocol version to announce, or raise (ENV-/VERSION-ERROR)."""
    raw = env.get("TOR_PT_MANAGED_TRANSPORT_VER")
    if raw is None:
        raise PTEnvError("no TOR_PT_MANAGED_TRANSPORT_VER environment variable")
    if SUPPORTED_VERSION not in [v.strip() for v in raw.split(",")]:
        raise VersionError()
    return SUPPORTED_VERSION


def parse(env: Mapping[str, str]) -> ClientConfig | ServerConfig:
    """Parse the whole environment into a client or a server configuration."""
    version = check_version(env)
    state = env.get("TOR_PT_STATE_LOCATION")
    if not state:
        raise PTEnvError("no TOR_PT_STATE_LOCATION environment variable")
    common: _Common = {
        "version": version,
        "state_location": Path(state),
        "exit_on_stdin_close": env.get("TOR_PT_EXIT_ON_STDIN_CLOSE") == "1",
        "outbound_bind_v4": _bind_address(env, "TOR_PT_OUTBOUND_BIND_ADDRESS_V4", 4),
        "outbound_bind_v6": _bind_address(env, "TOR_PT_OUTBOUND_BIND_ADDRESS_V6", 6),
    }
    client, server = env.get("TOR_PT_CLIENT_TRANSPORTS"), env.get("TOR_PT_SERVER_TRANSPORTS")
    if client is not None and server is not None:
        raise PTEnvError("TOR_PT_[CLIENT,SERVER]_TRANSPORTS both set")
    if client is not None:
        proxy = parse_proxy(env["TOR_PT_PROXY"]) if env.get("TOR_PT_PROXY") else None
        return ClientConfig(transports=_names(client), proxy=proxy, **common)
    if server is not None:
        return _server(env, _names(server), common)
    raise PTEnvError("neither TOR_PT_CLIENT_TRANSPORTS nor TOR_PT_SERVER_TRANSPORTS set")


def _server(env: Mapping[str, str], names: list[str], common: _Common) -> ServerConfig:
    ext_raw = env.get("TOR_PT_EXTENDED_SERVER_PORT", "")
    or_raw = env.get("TOR_PT_ORPORT", "")
    # The spec says an empty TOR_PT_EXTENDED_SERVER_PORT means "no Extended ORPort".
    ext = parse_hostport(ext_raw, "TOR_PT_EXTENDED_SERVER_PORT") if ext_raw else None
    orport = parse_hostport(or_raw, "TOR_PT_ORPORT") if or_raw else None
    if ext is None and orport is None:
        raise PTEnvError("need TOR_PT_ORPORT or TOR_PT_EXTENDED_SERVER_PORT environment variable")
    cookie = env.get("TOR_PT_AUTH_COOKIE_FILE")
    if ext is not None and not cookie:
        raise PTEnvError("TOR_PT_EXTENDED_SERVER_PORT set without TOR_PT_AUTH_COOKIE_FILE")
    return ServerConfig(
        transports=names,
        bindaddrs=parse_bindaddrs(env.get("TOR_PT_SERVER_BINDADDR", "")),
        options=parse_server_options(env.get("TOR_PT_SERVER_TRANSPORT_OPTIONS", "")),
        orport=orport,
        ext_orport=ext,
        auth_cookie_file=Path(cookie) if cookie else None,
        **common,
    )


def _names(raw: str) -> list[str]:
    """Transport names in request order, without duplicates or blanks."""
    out: list[str] = []
    for name in (n.strip() for n in raw.split(",")):
        if name and name not in out:
            out.append(name)
    return out


def is_transport_name(name: str) -> bool:
    """PT names must be C identifiers (pt-spec 3.1)."""
    return bool(_NAME.match(name))


def parse_hostport(s: str, what: str = "address", *, allow_zero: bool = False,
                   ip_only: bool = False) -> tuple[str, int]:
    """``1.2.3.4:5``, ``[::1]:5`` or ``name:5`` → (host without brackets, port)."""
    host, sep, port_s = s.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise PTEnvError(f"{what}: IPv6 address needs brackets in {s!r}")
    if not sep or not host or not port_s.isdigit():
        raise PTEnvError(f"{what}: expected ADDR:PORT, got {s!r}")
    port = int(port_s)
    if port > 65535 or (port == 0 and not allow_zero):
        raise PTEnvError(f"{what}: bad port in {s!r}")
    if ip_only:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise PTEnvError(f"{what}: {host!r} is not an IP address") from None
    return host, port


def parse_bindaddrs(raw: str) -> dict[str, tuple[str, int]]:
    """``obfs4-127.0.0.1:4000,direct-[::1]:0`` → {name: (ip, port)}."""
    out: dict[str, tuple[str, int]] = {}
    for item in filter(None, (i.strip() for i in raw.split(","))):
        name, sep, addr = item.partition("-")
        if not sep or not is_transport_name(name):
            raise PTEnvError(f"TOR_PT_SERVER_BINDADDR: bad entry {item!r}")
        out[name] = parse_hostport(addr, "TOR_PT_SERVER_BINDADDR", allow_zero=True, ip_only=True)
    return out


def parse_server_options(raw: str) -> dict[str, dict[str, str]]:
    """``name:k=v;name:k2=v2`` → {name: {k: v, k2: v2}}.

    Tor escapes ``:``, ``;`` and ``\\`` inside keys and values with a backslash
    (:data:`~.escaping.SERVER_OPTIONS`); ``=`` is not escaped, so the first
    unescaped ``=`` ends the key.
    """
    out: dict[str, dict[str, str]] = {}
    try:
        items = split_escaped(raw, ";")
    except EscapeError as exc:
        raise PTEnvError(f"TOR_PT_SERVER_TRANSPORT_OPTIONS: {exc}") from None
    for item in items:
        if not item:
            continue
        name, colon, kv = partition_escaped(item, ":")
        if not colon:
            raise PTEnvError(f"TOR_PT_SERVER_TRANSPORT_OPTIONS: no ':' in {item!r}")
        key, equals, value = partition_escaped(kv, "=")
        if not equals or not key:
            raise PTEnvError(f"TOR_PT_SERVER_TRANSPORT_OPTIONS: no key=value in {item!r}")
        out.setdefault(unescape(name), {})[unescape(key)] = unescape(value)
    return out


def parse_proxy(uri: str) -> Proxy:
    """TOR_PT_PROXY → :class:`Proxy`; malformed URIs are a PROXY-ERROR."""
    try:
        u = urllib.parse.urlsplit(uri)
        port = u.port
    except ValueError as exc:
        raise ProxyError(f"malformed proxy URI: {exc}") from None
    if u.scheme not in ("socks5", "socks4a", "http"):
        raise ProxyError(f"proxy scheme {u.scheme!r} not supported")
    if not u.hostname or port is None:
        raise ProxyError(f"proxy URI {uri!r} needs an address and a port")
    try:
        ipaddress.ip_address(u.hostname)
    except ValueError:
        raise ProxyError(f"proxy address {u.hostname!r} is not an IP address") from None
    user = urllib.parse.unquote(u.username) if u.username is not None else None
    pw = urllib.parse.unquote(u.password) if u.password is not None else None
    return Proxy(u.scheme, u.hostname, port, user, pw)


def _bind_address(env: Mapping[str, str], var: str, version: int) -> str | None:
    raw = env.get(var)
    if not raw:
        return None
    addr = raw.strip()
    if version == 6 and addr.startswith("[") and addr.endswith("]"):
        addr = addr[1:-1]
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise PTEnvError(f"{var}: {raw!r} is not an IP address") from None
    if ip.version != version:
        raise PTEnvError(f"{var}: {raw!r} is not an IPv{version} address")
    return str(ip)
