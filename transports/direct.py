"""``direct``: plain TCP, the baseline every other transport is measured against.

It carries the stream unchanged, so it is what a censor sees when nothing
disguises the traffic, and what an IP blocklist stops at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from .base import BOTH_ROLES, ClientFactory, ServerFactory, Streams, Transport


class DirectClient:
    async def dial(self, host: str, port: int) -> Streams:
        return await asyncio.open_connection(host, port)


class DirectServer:
    def smethod_args(self) -> dict[str, str]:
        return {}

    async def wrap(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Streams:
        return reader, writer


class Direct(Transport):
    roles = BOTH_ROLES

    def client_factory(self, state_dir: Path | None, args: Mapping[str, str]) -> ClientFactory:
        return DirectClient()

    def server_factory(self, state_dir: Path | None, args: Mapping[str, str]) -> ServerFactory:
        return DirectServer()


TRANSPORT = Direct("direct")
