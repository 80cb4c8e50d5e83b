"""Listen-address parsing and socket binding shared by the lab services.

Every service takes ``--listen HOST:PORT`` (``[v6]:PORT`` for IPv6) and binds
its own sockets, so IPv6 listeners are always v6-only and never collide with an
IPv4 listener on the same port.
"""

from __future__ import annotations

import ipaddress
import socket

from ptlab.services.main import ConfigError


def parse_hostport(text: str, default_port: int | None = None) -> tuple[str, int]:
    """``"1.2.3.4:53"`` / ``"[::1]:53"`` -> (host, port); a ConfigError if malformed."""
    host: str
    port_s: str | None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ConfigError(f"bad address {text!r}: missing ']'")
        host, rest = text[1:end], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise ConfigError(f"bad address {text!r}")
        port_s = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port_s = text.split(":")
    elif text.count(":") > 1:
        host, port_s = text, None  # a bare IPv6 address
    else:
        host, port_s = text, None
    if port_s is None:
        if default_port is None:
            raise ConfigError(f"bad address {text!r}: no port")
        port = default_port
    else:
        try:
            port = int(port_s)
        except ValueError:
            raise ConfigError(f"bad port in {text!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"port out of range in {text!r}")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(f"bad address {text!r}: {host!r} is not an IP address") from None
    return host, port


def format_hostport(host: str, port: int) -> str:
    """The inverse of parse_hostport."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def family_of(host: str) -> int:
    return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET


def bind_socket(host: str, port: int, type: int) -> socket.socket:
    """A bound, non-blocking socket; TCP sockets also listen."""
    fam = family_of(host)
    sock = socket.socket(fam, type)
    try:
        if fam == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        if type == socket.SOCK_STREAM:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        if type == socket.SOCK_STREAM:
            sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_udp_tcp_pair(host: str, port: int, tries: int = 20) -> tuple[socket.socket, socket.socket]:
    """A UDP and a TCP socket on the same port (an ephemeral one when port is 0)."""
    for _ in range(tries):
        udp = bind_socket(host, port, socket.SOCK_DGRAM)
        real_port = udp.getsockname()[1]
        try:
            tcp = bind_socket(host, real_port, socket.SOCK_STREAM)
        except OSError:
            udp.close()
            if port != 0:
                raise
            continue
        return udp, tcp
    raise OSError(f"could not bind UDP and TCP to the same port on {host}")


def unmap_v4(host: str) -> str:
    """``::ffff:1.2.3.4`` -> ``1.2.3.4``; other addresses unchanged."""
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return host
