"""Snowflake's packet encapsulation over a byte stream (``common/encapsulation``).

Each chunk is a length prefix and that many bytes. The first prefix byte is
``d c x x x x x x``: ``d`` = 1 for data (0 for padding, which readers skip),
``c`` = 1 if another length byte follows; each following byte is
``c y y y y y y y``. At most three prefix bytes, so a chunk holds at most
2^20 - 1 bytes. Writers emit the shortest prefix; readers also accept longer
ones (docs/transports/turbotunnel.md §2.1). The WebSocket or data channel below is a byte stream
without message boundaries, so :class:`Decoder` takes bytes split anywhere.
"""

from __future__ import annotations

MAX_LEN = (1 << 20) - 1
_MAX_PREFIX = 3


class EncapsulationError(ValueError):
    """A prefix longer than three bytes: the stream is not Snowflake's."""


def _prefix(n: int, data: bool) -> bytes:
    if not 0 <= n <= MAX_LEN:
        raise ValueError(f"chunk of {n} bytes: at most {MAX_LEN}")
    top = 0x80 if data else 0
    if n < 1 << 6:
        return bytes([top | n])
    if n < 1 << 13:
        return bytes([top | 0x40 | n >> 7, n & 0x7F])
    return bytes([top | 0x40 | n >> 14, 0x80 | (n >> 7) & 0x7F, n & 0x7F])


def encode(data: bytes) -> bytes:
    """One data chunk."""
    return _prefix(len(data), True) + data


def encode_padding(n: int) -> bytes:
    """A padding chunk with ``n`` zero bytes (readers skip it)."""
    return _prefix(n, False) + bytes(n)


class Decoder:
    """Incremental reader: :meth:`feed` returns the data chunks completed so far."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while True:
            parsed = self._header()
            if parsed is None:
                return out
            is_data, length, hlen = parsed
            if len(self._buf) < hlen + length:
                return out
            chunk = bytes(self._buf[hlen:hlen + length])
            del self._buf[:hlen + length]
            if is_data:
                out.append(chunk)

    def _header(self) -> tuple[bool, int, int] | None:
        buf = self._buf
        if not buf:
            return None
        first = buf[0]
        length, i, more = first & 0x3F, 1, bool(first & 0x40)
        while more:
            if i >= _MAX_PREFIX:
                raise EncapsulationError("length prefix longer than 3 bytes")
            if i >= len(buf):
                return None
            length = length << 7 | buf[i] & 0x7F
            more = bool(buf[i] & 0x80)
            i += 1
        return bool(first & 0x80), length, i

    @property
    def pending(self) -> int:
        """Bytes held for an incomplete chunk."""
        return len(self._buf)
