"""Bundling SCTP chunks into shared packets (RFC 9260 §6.10), for aiortc.

aiortc sends every chunk in a packet of its own ("no bundling for now", its
``_send_chunk`` says): one DTLS record and one ``sendto`` per chunk. Through a
Snowflake proxy many messages are tiny, the bridge's KCP acknowledgements
above all (about 26 bytes each), so with 20 clients the proxy spent its CPU on
per-packet costs: it moved a quarter of the bytes Debian's proxy (pion, which
bundles) moved for the same CPU (docs/transports/snowflake.md §3.8).

:class:`BundlingSctp` collects the DATA, SACK and FORWARD TSN chunks that one
pass of aiortc's ``_transmit``, one flush of its data-channel queue or one
received packet's handling produces, and
sends them in as few packets as fit ``SCTP_MAX_PACKET_LENGTH``. Other chunks
(INIT and the rest of the handshake and shutdown) flush what is pending and go
alone, as RFC 9260 §6.10 requires for INIT, INIT ACK and SHUTDOWN COMPLETE.
Nothing waits for more chunks: a bundle goes out when the pass that made it
ends. Congestion control is untouched; aiortc still decides what to send.
"""

from __future__ import annotations

from struct import pack
from typing import Any

from aiortc.rtcsctptransport import (
    SCTP_COMMON_HEADER_LENGTH,
    SCTP_MAX_PACKET_LENGTH,
    DataChunk,
    ForwardTsnChunk,
    SackChunk,
)
from google_crc32c import value as crc32c  # aiortc's own checksum dependency

from .sctpsack import DelayedSackSctp, use_association_class

BUNDLED = (DataChunk, SackChunk, ForwardTsnChunk)
ROOM = SCTP_MAX_PACKET_LENGTH - SCTP_COMMON_HEADER_LENGTH


def bundle_packet(source_port: int, destination_port: int, verification_tag: int,
                  chunks: list[bytes]) -> bytes:
    """One SCTP packet carrying already serialized (padded) chunks, in order."""
    header = pack("!HHL", source_port, destination_port, verification_tag)
    body = b"".join(chunks)
    checksum = crc32c(header + b"\x00\x00\x00\x00" + body)
    return header + pack("<L", checksum) + body


class BundlingSctp(DelayedSackSctp):
    """aiortc's association with delayed SACKs and chunk bundling (module doc)."""

    _ptl_bundle: list[bytes] | None = None  # chunks waiting, while a pass runs
    _ptl_size = 0
    packets_sent = 0  # packets, whatever they carry (tests and benchmarks read it)

    async def _transmit(self) -> None:
        await self._ptl_pass(super()._transmit)

    async def _handle_data(self, data: bytes) -> None:
        await self._ptl_pass(super()._handle_data, data)

    async def _data_channel_flush(self) -> None:
        await self._ptl_pass(super()._data_channel_flush)

    async def _ptl_pass(self, method: Any, *args: Any) -> None:
        if self._ptl_bundle is not None:  # already inside a pass: it will flush
            await method(*args)
            return
        self._ptl_bundle, self._ptl_size = [], 0
        try:
            await method(*args)
        finally:
            pending, self._ptl_bundle = self._ptl_bundle, None
            self._ptl_size = 0
            if pending:
                await self._send_packet(pending)

    async def _send_chunk(self, chunk: Any) -> None:
        if self._ptl_bundle is None:
            self.packets_sent += 1
            await super()._send_chunk(chunk)
            return
        if not isinstance(chunk, BUNDLED):
            await self._flush()
            self.packets_sent += 1
            await super()._send_chunk(chunk)
            return
        data = bytes(chunk)
        if self._ptl_size + len(data) > ROOM:
            await self._flush()
        if self._ptl_bundle is None:  # the pass ended while we flushed
            self.packets_sent += 1
            await super()._send_chunk(chunk)
            return
        self._ptl_bundle.append(data)
        self._ptl_size += len(data)

    async def _flush(self) -> None:
        if self._ptl_bundle:
            pending = self._ptl_bundle
            self._ptl_bundle, self._ptl_size = [], 0
            await self._send_packet(pending)

    async def _send_packet(self, chunks: list[bytes]) -> None:
        self.packets_sent += 1
        assert self._remote_port is not None  # start() set it before any chunk went out
        await self.transport._send_data(bundle_packet(
            self._local_port, self._remote_port, self._remote_verification_tag, chunks))


def use_bundling(pc: Any) -> bool:
    """Give ``pc``'s association delayed SACKs and bundling; False if it has none yet."""
    return use_association_class(pc, BundlingSctp)
