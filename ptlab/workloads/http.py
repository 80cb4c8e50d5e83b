"""A small HTTP/1.1 client over any stream pair.

The workloads need exact control over what crosses the tunnel (one
connection, keep-alive, no proxies, no compression) and per-byte progress
for "bytes moved before the block", so they speak HTTP/1.1 directly.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field


class HTTPError(Exception):
    pass


def client_tls(ca: str) -> ssl.SSLContext:
    """A browser-like client context that trusts the lab CA: Python's default,
    offering ALPN "http/1.1", as meek's Python client gets from aiohttp. Benign HTTPS
    must not differ from meek by its TLS configuration, or a classifier learns the
    handshake instead of the traffic (without ALPN, the edge's first flight is 15
    bytes shorter, and a tree trained on the LAN split on exactly that)."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


@dataclass
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)


async def send_get(writer: asyncio.StreamWriter, path: str, host: str,
                   keep_alive: bool = True) -> None:
    conn = "keep-alive" if keep_alive else "close"
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: ptlab\r\n"
                 f"Accept-Encoding: identity\r\nConnection: {conn}\r\n\r\n".encode())
    await writer.drain()


async def read_head(reader: asyncio.StreamReader) -> Response:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise HTTPError(f"connection closed before the response head "
                        f"({len(exc.partial)} bytes)") from exc
    except asyncio.LimitOverrunError as exc:
        raise HTTPError("response head too long") from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HTTPError(f"bad status line {lines[0][:60]!r}")
    resp = Response(int(parts[1]))
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            resp.headers[k.strip().lower()] = v.strip()
    return resp


async def read_body(reader: asyncio.StreamReader, resp: Response,
                    on_chunk: Callable[[bytes], None] | None = None,
                    idle_timeout: float | None = None) -> int:
    """Read a Content-Length body, calling on_chunk for each piece; return its size."""
    if "content-length" not in resp.headers:
        raise HTTPError("response without Content-Length")
    left = int(resp.headers["content-length"])
    total = 0
    while left > 0:
        chunk = await asyncio.wait_for(reader.read(min(left, 1 << 18)), idle_timeout)
        if not chunk:
            raise HTTPError(f"connection closed with {left} body bytes missing")
        left -= len(chunk)
        total += len(chunk)
        if on_chunk:
            on_chunk(chunk)
    return total
