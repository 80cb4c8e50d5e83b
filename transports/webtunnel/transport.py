"""The WebTunnel transport as ``ptlab pt`` finds it, registered as ``webtunnel``.

Besides making factories, the transport object holds the one piece of state
that outlives a connection: each bridge line's ``servername=`` rotation, since
``ptlab pt`` makes a client factory per SOCKS request and a failed TLS name must
stay skipped for the next one. It sits above :mod:`.client` and :mod:`.server`,
so neither imports the other.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from transports.base import BOTH_ROLES, ListeningServerFactory, Transport, TransportError

from .args import ClientArgs, ServerNameRotation
from .client import WebTunnelClientFactory
from .server import WebTunnelServerFactory, config_from_options

_MAX_ROTATIONS = 256  # bridges whose servername= position we remember


@dataclass(frozen=True)
class WebTunnel(Transport):
    """Registered as ``webtunnel``. Keeps each bridge line's servername= position
    across connections (``ptlab pt`` makes a factory per SOCKS request)."""

    roles = BOTH_ROLES
    randrange: Callable[[int], int] = field(default=random.randrange, repr=False,
                                            compare=False)
    _rotations: OrderedDict[tuple[str, ...], ServerNameRotation] = field(
        default_factory=OrderedDict, repr=False, compare=False)

    def rotation_for(self, args: ClientArgs) -> ServerNameRotation:
        key = (args.url, args.dial_host, str(args.dial_port), *args.server_names)
        rotation = self._rotations.get(key)
        if rotation is None:
            rotation = ServerNameRotation(args.server_names, self.randrange)
            self._rotations[key] = rotation
            while len(self._rotations) > _MAX_ROTATIONS:
                self._rotations.popitem(last=False)
        return rotation

    def client_factory(self, state_dir: Path | None,
                       args: Mapping[str, str]) -> WebTunnelClientFactory:
        parsed = ClientArgs.parse(args)
        return WebTunnelClientFactory(parsed, self.rotation_for(parsed))

    def server_factory(self, state_dir: Path | None,
                       args: Mapping[str, str]) -> ListeningServerFactory:
        try:
            return WebTunnelServerFactory(*config_from_options(dict(args)))
        except ValueError as exc:
            raise TransportError(str(exc)) from None


TRANSPORT = WebTunnel("webtunnel")
