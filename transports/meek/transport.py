"""The meek transport as ``ptlab pt`` finds it, registered as ``meek`` and ``meek_lite``.

One transport under two names: ``meek_lite`` is the name obfs4proxy's bridge
lines use. This module sits above :mod:`.client` and :mod:`.server` and only
turns bridge-line arguments and server options into their factories, so the
client and the server never import each other.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from transports.base import BOTH_ROLES, ListeningServerFactory, Transport, TransportError

from .client import MeekArgs, MeekClientFactory
from .server import MeekServerFactory, config_from_options


@dataclass(frozen=True)
class Meek(Transport):
    """Registered as ``meek`` and ``meek_lite`` (the name obfs4proxy's bridge lines use)."""

    roles = BOTH_ROLES

    def client_factory(self, state_dir: Path | None,
                       args: Mapping[str, str]) -> MeekClientFactory:
        return MeekClientFactory(MeekArgs.parse(args))

    def server_factory(self, state_dir: Path | None,
                       args: Mapping[str, str]) -> ListeningServerFactory:
        try:
            cfg, tls = config_from_options(dict(args))
        except (ValueError, OSError, ssl.SSLError) as exc:
            raise TransportError(str(exc)) from None
        return MeekServerFactory(cfg, tls)


MEEK = Meek("meek")
MEEK_LITE = Meek("meek_lite")
