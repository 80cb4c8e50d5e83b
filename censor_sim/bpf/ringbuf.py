"""A BPF ring buffer's records, read straight from its shared memory.

Why not libbpf's ring_buffer__consume: it hands each record to a C callback,
and a ctypes callback per record cost the censor more than decoding it
(benchmarks/censor.py, the kernel row). The layout is the kernel's
(kernel/bpf/ringbuf.c): a consumer page we write, then a producer page and the
data area, mapped twice in a row so a record that wraps reads as one piece.
Each record is an 8-byte header (its length, with a busy and a discard bit)
and its bytes, 8-aligned. As libbpf does, reading stops at a record still being
written (busy). The consumer position is published once per drain, after every
record read has been copied out (libbpf writes it after each record).

Ordering: the reads here are plain loads. x86-64 keeps loads in order, which
is what libbpf's acquire loads ask for; the lab runs there.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from typing import TypeVar

BUSY = 1 << 31
DISCARD = 1 << 30
HEADER = 8
_U64 = struct.Struct("=Q")
_U32 = struct.Struct("=I")
T = TypeVar("T")


def _copy(memory: mmap.mmap, offset: int, length: int) -> bytes:
    return memory[offset:offset + length]


class RingReader:
    """The records of the ring buffer map ``map_fd`` of ``size`` bytes (its
    max_entries, a power of two). The map's descriptor is pollable: it turns
    readable when the program wakes the reader."""

    def __init__(self, map_fd: int, size: int) -> None:
        if size <= 0 or size & (size - 1):
            raise ValueError(f"a ring buffer's size is a power of two, not {size}")
        page = mmap.PAGESIZE
        self.fd, self.mask = map_fd, size - 1
        self._consumer = mmap.mmap(map_fd, page, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._producer = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ,
                                   offset=page)
        self._data = page

    def drain(self) -> list[bytes]:
        """Every complete record waiting now, oldest first, each taken off the ring."""
        return self.drain_with(_copy)

    def drain_with(self, decode: Callable[[mmap.mmap, int, int], T]) -> list[T]:
        """:meth:`drain`, each record given to ``decode(memory, offset, length)``
        where it lies, so that a reader which makes an object of it copies only
        what the object keeps. ``decode`` must be done with the memory when it
        returns: the record's room is handed back to the kernel after the drain.
        If it raises, the records up to and including that one are taken off."""
        out: list[T] = []
        prod, cons = self._producer, self._consumer
        pos = _U64.unpack_from(cons, 0)[0]
        start = pos
        try:
            while True:
                end = _U64.unpack_from(prod, 0)[0]
                if pos >= end:
                    return out
                while pos < end:
                    at = self._data + (pos & self.mask)
                    length = _U32.unpack_from(prod, at)[0]
                    if length & BUSY:
                        return out
                    body = length & ~(BUSY | DISCARD)
                    # Past the record before decoding it: a record decode raises on
                    # is lost with its drain, never read again at every drain after.
                    pos += (body + HEADER + 7) & ~7
                    if not length & DISCARD:
                        out.append(decode(prod, at + HEADER, body))
        finally:
            if pos != start:
                _U64.pack_into(cons, 0, pos)

    def close(self) -> None:
        self._producer.close()
        self._consumer.close()
