"""The WebTunnel client (its transport, as ``ptlab pt`` finds it, is in :mod:`.transport`).

A dial connects to the url's host and port (or ``addr=``), runs TLS for an
https url, sends the upgrade request and waits for the 101; the streams it
returns are that same connection, starting with any bytes that followed the
101 (docs/transports/webtunnel.md §2, §3). Handshake failures give up at once,
as lyrebird does; the TLS and upgrade phases have a deadline, ours
(``handshake_timeout_s``), because Go's client waits for ever.
"""

from __future__ import annotations

import asyncio
import contextlib

from transports.base import Streams

from .args import ClientArgs, ServerNameRotation
from .httphead import MAX_HEAD_BYTES
from .tlsdial import start_tls
from .upgrade import client_upgrade

HANDSHAKE_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 30.0


class WebTunnelClientFactory:
    """Dials one bridge line. ``rotation`` is shared by every dial of that line."""

    def __init__(self, args: ClientArgs, rotation: ServerNameRotation | None = None, *,
                 cafile: str | None = None,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 max_head_bytes: int = MAX_HEAD_BYTES) -> None:
        self.args = args
        self.rotation = rotation or ServerNameRotation(args.server_names)
        self.cafile = cafile
        self.handshake_timeout_s = handshake_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_head_bytes = max_head_bytes

    async def dial(self, host: str, port: int) -> Streams:  # noqa: ARG002 - a placeholder
        """The tunnel's streams; OSError when the TCP connection fails, TransportError
        (or TimeoutError) when TLS or the upgrade does, with no payload sent."""
        a = self.args
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(a.dial_host, a.dial_port), self.connect_timeout_s)
        try:
            await asyncio.wait_for(self._handshake(reader, writer), self.handshake_timeout_s)
        except BaseException as exc:
            # A failed TLS handshake or upgrade (or its deadline) moves servername=
            # on; a failed TCP connection (above) or a cancelled dial does not.
            if isinstance(exc, Exception):
                self.rotation.failed()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            raise
        return reader, writer

    async def _handshake(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        a = self.args
        if a.tls:
            await start_tls(writer, self.rotation.current(), a.pin, a.verify_name, self.cafile)
        await client_upgrade(reader, writer, a.target, a.host_header, self.max_head_bytes)
