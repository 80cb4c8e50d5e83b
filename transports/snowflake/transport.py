"""The Snowflake transport as ``ptlab pt`` finds it, registered as ``snowflake``.

The client side dials through the broker and volunteer proxies
(:mod:`.client`); the server side is the bridge's own WebSocket listener
(:mod:`.server`). This module sits above both and only turns bridge-line
arguments and server options into their factories, so neither imports the
other. The volunteer's proxy (:mod:`.proxy`) is no part of the transport.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from transports.base import BOTH_ROLES, ClientFactory, ListeningServerFactory, Transport

from .client import SnowflakeClientFactory, config_from_args
from .server import server_factory_from_args


@dataclass(frozen=True)
class Snowflake(Transport):
    name: str = "snowflake"
    roles = BOTH_ROLES

    def client_factory(self, state_dir: Path | None, args: Mapping[str, str]) -> ClientFactory:
        return SnowflakeClientFactory(config_from_args(args))

    def server_factory(self, state_dir: Path | None,
                       args: Mapping[str, str]) -> ListeningServerFactory:
        return server_factory_from_args(dict(args))


TRANSPORT = Snowflake()
