"""The transport API and registry, in the shape of obfs4's ``base.go``.

A :class:`Transport` has a name, a client factory that dials and a server
factory that wraps an accepted connection. Both hand back asyncio streams, so
everything above a transport (SOCKS5 front, relay, workloads) is the same for
every transport. Transports are found by name through the
``ptlab.transports`` entry-point group, so a third party can add one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class ClientFactory(Protocol):
    async def dial(self, host: str, port: int) -> Streams:
        """Connect to a server of this transport and return the inner streams."""
        ...


class ServerFactory(Protocol):
    async def wrap(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Streams:
        """Run the server side on an accepted connection; return the inner streams."""
        ...


class TransportError(Exception):
    """A transport failed (bad arguments, handshake failure, ...)."""


@dataclass(frozen=True)
class Transport:
    """A named transport. ``args`` are the per-bridge arguments (PT SOCKS args)."""

    name: str

    def client_factory(self, state_dir: Path | None, args: Mapping[str, str]) -> ClientFactory:
        raise NotImplementedError

    def server_factory(self, state_dir: Path | None, args: Mapping[str, str]) -> ServerFactory:
        raise NotImplementedError


_registry: dict[str, Transport] = {}


def register(transport: Transport) -> None:
    _registry[transport.name] = transport


def get(name: str) -> Transport:
    """The transport called `name`, looking in entry points on first use."""
    if name not in _registry:
        for ep in entry_points(group="ptlab.transports"):
            if ep.name == name:
                register(ep.load())
    try:
        return _registry[name]
    except KeyError:
        raise TransportError(f"unknown transport {name!r} (known: {', '.join(names())})") from None


def names() -> list[str]:
    found = {ep.name for ep in entry_points(group="ptlab.transports")}
    return sorted(found | _registry.keys())
