"""obfs4 packets: what travels inside each frame (Go: ``transports/obfs4/packet.go``).

Why a separate layer: the frame layer only authenticates and hides lengths; the
packet layer says what the bytes are (application data or a PRNG seed) and adds
the zero padding that shapes packet lengths (obfs4.md §2, §3.3).

A packet is the plaintext of one frame::

    uint8      type: 0x00 payload, 0x01 PRNG seed (24-byte payload)
    uint16 BE  payload length
    [n]        payload
    [p]        padding, zeros; n + p ≤ 1427

Receiving, as obfs4proxy does: a plaintext under 3 bytes, or a payload length
longer than what follows, kills the connection (:class:`PacketError`); packets
of unknown type are decrypted and ignored; a seed packet whose payload is not
24 bytes is ignored; payload packets of length 0 are pure padding.

Padding (``padBurst`` in obfs4.go) is counted in **wire bytes**: to add ``p``
bytes to a burst, one padding-only packet whose frame is exactly ``p`` bytes
long is sent if ``p > 21`` (frame + packet header), else two frames, one full
(1448 bytes) and one of ``21 + p`` bytes.
"""

from __future__ import annotations

import struct
from typing import Final

from transports.obfs4.drbg import SEED_LENGTH
from transports.obfs4.framing import (
    FRAME_OVERHEAD,
    MAXIMUM_FRAME_PAYLOAD_LENGTH,
    MAXIMUM_SEGMENT_LENGTH,
    Decoder,
    Encoder,
    FramingError,
)

PACKET_OVERHEAD: Final = 1 + 2  # type + length
MAX_PACKET_PAYLOAD_LENGTH: Final = MAXIMUM_FRAME_PAYLOAD_LENGTH - PACKET_OVERHEAD  # 1427
MAX_PACKET_PADDING_LENGTH: Final = MAX_PACKET_PAYLOAD_LENGTH
SEED_PACKET_PAYLOAD_LENGTH: Final = SEED_LENGTH  # 24
HEADER_LENGTH: Final = FRAME_OVERHEAD + PACKET_OVERHEAD  # 21 wire bytes around a payload
CONSUME_READ_SIZE: Final = MAXIMUM_SEGMENT_LENGTH * 16  # obfs4proxy's socket read size

PACKET_TYPE_PAYLOAD: Final = 0x00
PACKET_TYPE_PRNG_SEED: Final = 0x01

_pack_into = struct.pack_into


class PacketError(FramingError):
    """A frame decrypted but its packet is malformed; fatal, like any framing error.

    A :class:`FramingError` subclass so a connection catches one type for "the
    peer sent garbage". Like every error out of :meth:`PacketDecoder.feed` it
    carries ``data`` and ``seeds``: what decoded cleanly before the failure.
    """


def make_packet(pkt_type: int, data: bytes = b"", pad_len: int = 0) -> bytes:
    """One packet (a frame plaintext): header, ``data``, ``pad_len`` zero bytes."""
    if not 0 <= pkt_type <= 0xFF:
        raise ValueError(f"packet type out of range: {pkt_type}")
    if pad_len < 0 or len(data) + pad_len > MAX_PACKET_PAYLOAD_LENGTH:
        raise ValueError(f"packet payload {len(data)} + padding {pad_len} exceeds "
                         f"{MAX_PACKET_PAYLOAD_LENGTH}")
    return bytes((pkt_type, len(data) >> 8, len(data) & 0xFF)) + bytes(data) + bytes(pad_len)


def padding_packets(pad_len: int) -> list[bytes]:
    """Padding-only packets that add exactly ``pad_len`` wire bytes, as ``padBurst`` does.

    ``pad_len`` in [0, 1448]; for 1..21 this takes two frames (see module docs),
    adding ``1448 + 21 + pad_len`` wire bytes, which is what obfs4proxy does.
    """
    if not 0 <= pad_len <= MAXIMUM_SEGMENT_LENGTH:
        raise ValueError(f"padding length out of range: {pad_len}")
    if pad_len > HEADER_LENGTH:
        return [make_packet(PACKET_TYPE_PAYLOAD, b"", pad_len - HEADER_LENGTH)]
    if pad_len > 0:
        return [make_packet(PACKET_TYPE_PAYLOAD, b"", MAX_PACKET_PADDING_LENGTH),
                make_packet(PACKET_TYPE_PAYLOAD, b"", pad_len)]
    return []


def burst_pad_length(burst_wire_length: int, target: int) -> int:
    """Wire bytes of padding ``padBurst`` adds so the burst's last segment is ``target`` long.

    ``target`` is a length-distribution sample in [0, 1448]; the tail is the
    burst length modulo 1448.
    """
    tail = burst_wire_length % MAXIMUM_SEGMENT_LENGTH
    if target >= tail:
        return target - tail
    return MAXIMUM_SEGMENT_LENGTH - tail + target


def make_packets(data: bytes, pad_len: int = 0) -> list[bytes]:
    """Payload packets of up to 1427 bytes of ``data``, then :func:`padding_packets`."""
    packets = [make_packet(PACKET_TYPE_PAYLOAD, data[i:i + MAX_PACKET_PAYLOAD_LENGTH])
               for i in range(0, len(data), MAX_PACKET_PAYLOAD_LENGTH)]
    packets.extend(padding_packets(pad_len))
    return packets


def make_seed_packet(seed: bytes) -> bytes:
    """The PRNG-seed packet the server sends first: the bridge's 24-byte drbg-seed."""
    if len(seed) != SEED_PACKET_PAYLOAD_LENGTH:
        raise ValueError(f"PRNG seed must be {SEED_PACKET_PAYLOAD_LENGTH} bytes, got {len(seed)}")
    return make_packet(PACKET_TYPE_PRNG_SEED, seed)


def parse_packet(frame_payload: bytes) -> tuple[int, bytes]:
    """(type, payload) of one decrypted frame; :class:`PacketError` on bad lengths."""
    if len(frame_payload) < PACKET_OVERHEAD:
        raise PacketError(f"packet: Invalid packet length: {len(frame_payload)}")
    length = (frame_payload[1] << 8) | frame_payload[2]
    if length > len(frame_payload) - PACKET_OVERHEAD:
        raise PacketError(f"packet: Invalid payload length: {length}")
    return frame_payload[0], bytes(frame_payload[PACKET_OVERHEAD:PACKET_OVERHEAD + length])


class PacketEncoder:
    """Application data (plus padding) to wire bytes, in one call per write.

    Builds every packet directly in one output buffer and seals the frames in
    place (:meth:`Encoder.seal_in_place`), so a large write costs one buffer,
    not one object per frame. Padding packets are all zeros, which a fresh
    ``bytearray`` already is.
    """

    __slots__ = ("encoder",)

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder

    def encode(self, data: bytes, pad_len: int = 0) -> bytes:
        """Frames carrying ``data``, then ``pad_len`` wire bytes of padding (see module docs)."""
        n_full, rest = divmod(len(data), MAX_PACKET_PAYLOAD_LENGTH)
        lengths = [MAXIMUM_FRAME_PAYLOAD_LENGTH] * n_full
        if rest:
            lengths.append(rest + PACKET_OVERHEAD)
        n_data = len(lengths)
        if pad_len:
            lengths.extend(len(p) for p in padding_packets(pad_len))
        buf = bytearray(sum(lengths) + FRAME_OVERHEAD * len(lengths))
        off = FRAME_OVERHEAD  # the first packet header, inside the first frame slot
        pos = 0
        with memoryview(data) as view:  # released at once: data may be a caller's bytearray
            for _ in range(n_data):
                chunk = view[pos:pos + MAX_PACKET_PAYLOAD_LENGTH]
                n = len(chunk)
                _pack_into(">H", buf, off + 1, n)  # type byte 0x00 is already there
                buf[off + PACKET_OVERHEAD:off + PACKET_OVERHEAD + n] = chunk
                pos += n
                off += n + PACKET_OVERHEAD + FRAME_OVERHEAD
        self.encoder.seal_in_place(buf, lengths)
        return bytes(buf)

    def encode_burst(self, data: bytes, target: int) -> bytes:
        """What obfs4proxy's ``Write`` sends for iat-mode 0/1: ``data``, padded once.

        ``target`` is a ``lenDist.sample()``; the padding makes the burst's last
        1448-byte segment ``target`` bytes long (:func:`burst_pad_length`).
        """
        n_frames = -(-len(data) // MAX_PACKET_PAYLOAD_LENGTH)
        burst = len(data) + HEADER_LENGTH * n_frames
        return self.encode(data, burst_pad_length(burst, target))

    def encode_seed(self, seed: bytes) -> bytes:
        """The PRNG-seed frame (45 wire bytes), unpadded as the server sends it."""
        return self.encoder.encode(make_seed_packet(seed))


class PacketDecoder:
    """Wire bytes to (application data, PRNG seeds received).

    Acting on a seed (the client resets its length distribution; the server
    ignores them) is the caller's job. Errors are final, as in the frame layer.
    """

    __slots__ = ("decoder", "_error")

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self._error: FramingError | None = None

    def feed(self, data: bytes) -> tuple[bytes, list[bytes]]:
        """Decode what ``data`` completes.

        Raises :class:`FramingError` (:class:`PacketError` for a bad packet),
        with ``data``/``seeds`` set to what decoded before the failure.
        """
        if self._error is not None:
            raise type(self._error)(str(self._error))
        try:
            try:
                block, spans = self.decoder.feed_spans(data)
            except FramingError as err:
                # A malformed packet before the bad frame is the first failure.
                err.data, err.seeds = self._packets_from_frames(err.partial)
                raise
            return self._packets(block, spans)
        except FramingError as err:
            self._error = err
            raise

    @classmethod
    def _packets_from_frames(cls, frames: list[bytes]) -> tuple[bytes, list[bytes]]:
        block = bytearray()
        spans = []
        for frame in frames:
            spans.append((len(block), len(block) + len(frame)))
            block += frame
        return cls._packets(block, spans)

    @staticmethod
    def _packets(block: bytearray, spans: list[tuple[int, int]]) -> tuple[bytes, list[bytes]]:
        view = memoryview(block)
        chunks: list[memoryview] = []
        seeds: list[bytes] = []
        for start, end in spans:
            size = end - start
            if size < PACKET_OVERHEAD:
                err = PacketError(f"packet: Invalid packet length: {size}")
                err.data, err.seeds = b"".join(chunks), seeds
                raise err
            length = (block[start + 1] << 8) | block[start + 2]
            if length > size - PACKET_OVERHEAD:
                err = PacketError(f"packet: Invalid payload length: {length}")
                err.data, err.seeds = b"".join(chunks), seeds
                raise err
            kind = block[start]
            if kind == PACKET_TYPE_PAYLOAD:
                if length:
                    begin = start + PACKET_OVERHEAD
                    chunks.append(view[begin:begin + length])
            elif kind == PACKET_TYPE_PRNG_SEED and length == SEED_PACKET_PAYLOAD_LENGTH:
                begin = start + PACKET_OVERHEAD
                seeds.append(bytes(block[begin:begin + length]))
            # Any other type is ignored, as obfs4proxy does.
        return b"".join(chunks), seeds
