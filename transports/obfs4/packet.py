"""obfs4 packets: what travels inside each frame (Go: ``transports/obfs4/packet.go``).

Why a separate layer: the frame layer only authenticates and hides lengths; the
packet layer says what the bytes are (application data or a PRNG seed) and adds
the zero padding that shapes packet lengths (docs/transports/obfs4.md §3.5, §4.3).

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
from collections.abc import Iterable
from typing import Final

from transports.common.drbg import SEED_LENGTH
from transports.obfs4.framing import (
    FRAME_OVERHEAD,
    MAXIMUM_FRAME_PAYLOAD_LENGTH,
    MAXIMUM_SEGMENT_LENGTH,
    Decoder,
    Encoder,
    FramingError,
    Runs,
)

PACKET_OVERHEAD: Final = 1 + 2  # type + length
MAX_PACKET_PAYLOAD_LENGTH: Final = MAXIMUM_FRAME_PAYLOAD_LENGTH - PACKET_OVERHEAD  # 1427
MAX_PACKET_PADDING_LENGTH: Final = MAX_PACKET_PAYLOAD_LENGTH
SEED_PACKET_PAYLOAD_LENGTH: Final = SEED_LENGTH  # 24
HEADER_LENGTH: Final = FRAME_OVERHEAD + PACKET_OVERHEAD  # 21 wire bytes around a payload

PACKET_TYPE_PAYLOAD: Final = 0x00
PACKET_TYPE_PRNG_SEED: Final = 0x01

_pack_into = struct.pack_into
# The header of a full payload packet, column by column (type, length high, length low).
_PAYLOAD_TYPE: Final = bytes((PACKET_TYPE_PAYLOAD,))
_FULL_LENGTH_HI: Final = bytes((MAX_PACKET_PAYLOAD_LENGTH >> 8,))
_FULL_LENGTH_LO: Final = bytes((MAX_PACKET_PAYLOAD_LENGTH & 0xFF,))
# Before every full payload: 18 bytes for the masked length and the tag (written
# when sealing), then the packet header: type 0x00, payload length 1427.
_FULL_FRAME_HEADER: Final = bytearray(FRAME_OVERHEAD) + bytes(
    (PACKET_TYPE_PAYLOAD, MAX_PACKET_PAYLOAD_LENGTH >> 8, MAX_PACKET_PAYLOAD_LENGTH & 0xFF))


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


def _padding_frame_lengths(pad_len: int) -> list[int]:
    """Frame payload lengths (packet bytes) of :func:`padding_packets` ``(pad_len)``."""
    if not 0 <= pad_len <= MAXIMUM_SEGMENT_LENGTH:
        raise ValueError(f"padding length out of range: {pad_len}")
    if pad_len > HEADER_LENGTH:
        return [pad_len - FRAME_OVERHEAD]
    if pad_len > 0:
        return [MAXIMUM_FRAME_PAYLOAD_LENGTH, pad_len + PACKET_OVERHEAD]
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
        return bytes(self.encode_into(data, pad_len))

    def encode_into(self, data: bytes | bytearray | memoryview, pad_len: int = 0) -> bytearray:
        """:meth:`encode` into a fresh ``bytearray`` (no final copy: the session's path).

        The layout is one ``bytearray.join``: every frame is 18 bytes (masked
        length and tag, overwritten when sealing) and a 3-byte packet header
        before its payload, so the full 1427-byte payloads are joined with the
        21 bytes of a full frame's header between them; the last element is the
        short tail payload (its header is patched) followed by the padding
        frames, which are all zeros until sealed.
        """
        size = len(data)
        n_full, rest = divmod(size, MAX_PACKET_PAYLOAD_LENGTH)
        lengths = [MAXIMUM_FRAME_PAYLOAD_LENGTH] * n_full
        if rest:
            lengths.append(rest + PACKET_OVERHEAD)
        if pad_len:
            pads = _padding_frame_lengths(pad_len)
            lengths.extend(pads)
            pad_wire = sum(pads) + FRAME_OVERHEAD * len(pads)
        else:
            pad_wire = 0
        if not lengths:
            return bytearray()
        full_end = n_full * MAX_PACKET_PAYLOAD_LENGTH
        with memoryview(data) as view:  # released at once: data may be a caller's bytearray
            parts: list = [b""]
            parts += [view[i:i + MAX_PACKET_PAYLOAD_LENGTH]
                      for i in range(0, full_end, MAX_PACKET_PAYLOAD_LENGTH)]
            if rest:
                parts.append(bytes(view[full_end:]) + bytes(pad_wire))
            elif pad_wire:
                parts.append(bytes(pad_wire - HEADER_LENGTH))
            buf = _FULL_FRAME_HEADER.join(parts)
            del parts
        if rest or pad_wire:
            # The last separator is the header of the tail frame (or of the first
            # padding frame, an empty payload packet): fix its payload length.
            _pack_into(">H", buf, n_full * MAXIMUM_SEGMENT_LENGTH + FRAME_OVERHEAD + 1, rest)
        self.encoder.seal_in_place(buf, lengths)
        return buf

    def encode_burst(self, data: bytes, target: int) -> bytes:
        """What obfs4proxy's ``Write`` sends for iat-mode 0/1: ``data``, padded once.

        ``target`` is a ``lenDist.sample()``; the padding makes the burst's last
        1448-byte segment ``target`` bytes long (:func:`burst_pad_length`).
        """
        return bytes(self.encode_burst_into(data, target))

    def encode_burst_into(self, data: bytes | bytearray | memoryview, target: int) -> bytearray:
        """:meth:`encode_burst` into a fresh ``bytearray``."""
        n_frames = -(-len(data) // MAX_PACKET_PAYLOAD_LENGTH)
        burst = len(data) + HEADER_LENGTH * n_frames
        return self.encode_into(data, burst_pad_length(burst, target))

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
                block, runs = self.decoder.feed_runs(data)
            except FramingError as err:
                # A malformed packet before the bad frame is the first failure.
                err.data, err.seeds = self._packets_from_frames(err.partial)
                raise
            return self._packets(block, runs)
        except FramingError as err:
            self._error = err
            raise

    def feed_buffer(self, buf: bytearray, end: int) -> tuple[int, bytes, list[bytes]]:
        """:meth:`feed` for a caller-owned receive buffer (``Decoder.decode_in_place``).

        Decodes ``buf[:end]`` in place and returns ``(consumed, data, seeds)``;
        ``buf[consumed:end]`` must lead the next call's buffer. Errors as :meth:`feed`.
        """
        if self._error is not None:
            raise type(self._error)(str(self._error))
        try:
            try:
                consumed, runs = self.decoder.decode_in_place(buf, end)
            except FramingError as err:
                err.data, err.seeds = self._packets_from_frames(err.partial)
                raise
            data, seeds = self._packets(buf, runs)
            return consumed, data, seeds
        except FramingError as err:
            self._error = err
            raise

    @classmethod
    def _packets_from_frames(cls, frames: list[bytes]) -> tuple[bytes, list[bytes]]:
        block = bytearray()
        runs = []
        for frame in frames:
            runs.append((len(block), len(block) + len(frame), 1))
            block += frame
        return cls._packets(block, runs)

    @staticmethod
    def _packets(block: bytearray, runs: Runs) -> tuple[bytes, list[bytes]]:
        """Application data and seeds of decoded frames (``Decoder.decode_in_place`` runs).

        A run of full frames that are all full payload packets (the bulk case)
        is checked with three strided slices and cut with one comprehension.
        """
        view = memoryview(block)
        chunks: list[memoryview] = []
        append = chunks.append
        seeds: list[bytes] = []
        step = MAXIMUM_SEGMENT_LENGTH
        for first, first_end, count in runs:
            frames: Iterable[tuple[int, int]]
            if count > 1:
                last = first + (count - 1) * step
                if (block[first:last + 1:step] == _PAYLOAD_TYPE * count
                        and block[first + 1:last + 2:step] == _FULL_LENGTH_HI * count
                        and block[first + 2:last + 3:step] == _FULL_LENGTH_LO * count):
                    chunks += [view[b:b + MAX_PACKET_PAYLOAD_LENGTH]
                               for b in range(first + PACKET_OVERHEAD, last + step, step)]
                    continue
                frames = zip(range(first, last + 1, step), range(first_end, last + step, step),
                             strict=True)
            else:
                frames = ((first, first_end),)
            for start, end in frames:
                begin = start + PACKET_OVERHEAD
                if begin > end:
                    err = PacketError(f"packet: Invalid packet length: {end - start}")
                    err.data, err.seeds = b"".join(chunks), seeds
                    raise err
                length = (block[start + 1] << 8) | block[start + 2]
                stop = begin + length
                if stop > end:
                    err = PacketError(f"packet: Invalid payload length: {length}")
                    err.data, err.seeds = b"".join(chunks), seeds
                    raise err
                kind = block[start]
                if kind == PACKET_TYPE_PAYLOAD:
                    if length:
                        append(view[begin:stop])
                elif kind == PACKET_TYPE_PRNG_SEED and length == SEED_PACKET_PAYLOAD_LENGTH:
                    seeds.append(bytes(block[begin:stop]))
                # Any other type is ignored, as obfs4proxy does.
        return b"".join(chunks), seeds
