"""A QUIC echo server for the benign mix: real QUIC v1 (aioquic) on UDP 443.

The censors of 2022–2026 judge QUIC itself: Russia's TSPU drops large QUIC v1
datagrams to port 443, the GFW reads the Initial's SNI, Iran turned QUIC off in
June 2025 (docs/censors/russia.md §5.3, quic.md, iran.md §3.2). A benign QUIC
flow from the client shows what they break beside the transports. The server
echoes each stream's bytes back and closes the stream when the client does;
it offers ALPN ``h3``, as an HTTP/3 server's Initial looks.

Run: ``python -m ptlab.services.quicecho --listen 198.18.7.2:443 --tls-cert C --tls-key K``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from typing import Any

from ptcommon.events import EventLog
from ptlab.services.main import ConfigError, run_service
from ptlab.services.netutil import bind_socket, format_hostport, parse_hostport

COMPONENT = "quicecho"
ALPN = ["h3"]
MAX_STREAM_BYTES = 1 << 20  # an echo larger than this is cut: the mix sends a few KB
IDLE_TIMEOUT_S = 10.0


def _protocol_class() -> type:
    """The aioquic protocol that echoes streams (built on first use: aioquic loads lazily)."""
    from aioquic.asyncio import QuicConnectionProtocol
    from aioquic.quic.events import StreamDataReceived

    class EchoProtocol(QuicConnectionProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._sizes: dict[int, int] = {}

        def quic_event_received(self, event: Any) -> None:
            if isinstance(event, StreamDataReceived):
                seen = self._sizes.get(event.stream_id, 0)
                data = event.data[:max(MAX_STREAM_BYTES - seen, 0)]
                self._sizes[event.stream_id] = seen + len(data)
                self._quic.send_stream_data(event.stream_id, data, end_stream=event.end_stream)
                if event.end_stream:
                    self._sizes.pop(event.stream_id, None)
                self.transmit()

    return EchoProtocol


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ptlab.services.quicecho",
                                description=__doc__.split("\n")[0])
    p.add_argument("--listen", action="append", default=[], metavar="HOST:PORT",
                   help="UDP listen address, repeatable")
    p.add_argument("--tls-cert", required=True, help="PEM certificate (chain)")
    p.add_argument("--tls-key", required=True, help="PEM private key")
    return p


async def serve(args: argparse.Namespace, events: EventLog, stop: asyncio.Event) -> None:
    from aioquic.asyncio.server import QuicServer
    from aioquic.quic.configuration import QuicConfiguration

    if not args.listen:
        raise ConfigError("nothing to serve: give --listen HOST:PORT")
    cfg = QuicConfiguration(is_client=False, alpn_protocols=ALPN,
                            idle_timeout=IDLE_TIMEOUT_S)
    try:
        cfg.load_cert_chain(args.tls_cert, args.tls_key)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--tls-cert/--tls-key: {exc}") from None
    loop = asyncio.get_running_loop()
    protocol = _protocol_class()
    transports = []
    try:
        for host, port in (parse_hostport(x) for x in args.listen):
            # Our own sockets (IPv6 ones v6-only), as the lab's other services bind:
            # aioquic's serve() would make "::" dual-stack and collide with 0.0.0.0.
            sock = bind_socket(host, port, socket.SOCK_DGRAM)
            tr, _ = await loop.create_datagram_endpoint(
                lambda: QuicServer(configuration=cfg, create_protocol=protocol), sock=sock)
            transports.append(tr)
        events.emit("ready", listen=[format_hostport(*parse_hostport(x)) for x in args.listen])
        await stop.wait()
    finally:
        for tr in transports:
            tr.close()


def main(argv: list[str] | None = None) -> int:
    return run_service(COMPONENT, build_parser(), serve, argv)


if __name__ == "__main__":
    raise SystemExit(main())
