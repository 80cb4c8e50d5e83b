"""The transport API and registry, in the shape of obfs4's ``base.go``.

A :class:`Transport` has a name, the roles it plays, a client factory that
dials and a server factory. Both hand back asyncio streams, so everything above
a transport (SOCKS5 front, relay, workloads) is the same for every transport.
Transports are found by name through the ``ptlab.transports`` entry-point
group, so a third party can add one.

This module declares everything the PT layer (:mod:`transports.pt.managed`)
and the lab's transport processes (:mod:`transports.lab_mode`) call, so a new
transport is written against these types and nothing is guessed at run time:

* :attr:`Transport.roles` says which of ``client``/``server`` a transport
  implements (Conjure's server side is the station, not a PT server);
* a server factory either wraps each connection the PT layer accepts
  (:class:`StreamServerFactory`) or listens itself, for transports whose
  server is an HTTP or WebSocket application (:class:`ListeningServerFactory`);
* both publish their bridge-line arguments through ``smethod_args``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Role = Literal["client", "server"]
BOTH_ROLES: frozenset[Role] = frozenset({"client", "server"})

Handoff = Callable[[Streams, str], Coroutine[Any, Any, None]]
"""What a listening server calls with each inner stream and the client's
``host:port`` (tor's Extended ORPort wants it for its statistics). An async
function: the server runs each hand-off as a task of its own."""


class ClientFactory(Protocol):
    async def dial(self, host: str, port: int) -> Streams:
        """Connect to a server of this transport and return the inner streams."""
        ...


@runtime_checkable
class StreamServerFactory(Protocol):
    """A server that runs on each TCP connection the caller accepts (obfs4, ScrambleSuit)."""

    def smethod_args(self) -> Mapping[str, str]:
        """The bridge-line ``ARGS`` of the SMETHOD line (obfs4's ``cert``, ``iat-mode``)."""
        ...

    async def wrap(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Streams:
        """Run the server side on an accepted connection; return the inner streams."""
        ...


class Listening(Protocol):
    """A server a :class:`ListeningServerFactory` started: where it is, and its stop."""

    host: str
    port: int

    def close(self) -> None: ...


@runtime_checkable
class ListeningServerFactory(Protocol):
    """A server that owns its listener (meek's HTTP server, Snowflake's WebSocket bridge).

    The caller cannot wrap a raw connection for these: one tunnel session spans
    many HTTP requests or arrives through a proxy, so the server hands each
    inner stream over once it has one.
    """

    def smethod_args(self) -> Mapping[str, str]:
        """The bridge-line ``ARGS`` of the SMETHOD line (empty for most)."""
        ...

    async def listen(self, host: str, port: int, handoff: Handoff) -> Listening:
        """Listen on ``host:port`` (port 0: any) and call ``handoff`` per inner stream."""
        ...


ServerFactory = StreamServerFactory | ListeningServerFactory


class TransportError(Exception):
    """A transport failed (bad arguments, handshake failure, ...)."""


@dataclass(frozen=True)
class Transport:
    """A named transport. ``args`` are the per-bridge arguments (PT SOCKS args).

    A subclass sets :attr:`roles` and implements the factory of each role it
    names; the PT layer answers ``CMETHOD-ERROR``/``SMETHOD-ERROR`` for the others.
    """

    name: str
    roles: ClassVar[frozenset[Role]]  # every subclass declares it; register() checks

    def has_role(self, role: Role) -> bool:
        return role in self.roles

    def client_factory(self, state_dir: Path | None, args: Mapping[str, str]) -> ClientFactory:
        raise TransportError(f"{self.name}: no client side")

    def server_factory(self, state_dir: Path | None, args: Mapping[str, str]) -> ServerFactory:
        raise TransportError(f"{self.name}: no server side")


_registry: dict[str, Transport] = {}


def register(transport: Transport) -> None:
    roles = getattr(type(transport), "roles", None)
    if not roles or not roles <= BOTH_ROLES:
        raise TransportError(f"transport {transport.name!r} must declare its roles "
                             f"(a non-empty subset of {sorted(BOTH_ROLES)})")
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
