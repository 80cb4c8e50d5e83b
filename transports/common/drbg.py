"""obfs4's HashDrbg: SipHash-2-4 "in OFB mode", exactly as obfs4proxy really runs it.

Why this module exists: obfs4 masks every frame length with two bytes of a
deterministic generator, and derives the per-bridge packet-length table and the
probe-close delay from one. A peer that generates a single different block
desynchronises the length masks and the connection dies on the next frame, so
this must be bit-exact with ``common/drbg/hash_drbg.go``.

What the Go code does (docs/transports/obfs4.md §4.1, §3.3, §7):

* The 24-byte seed is a 16-byte SipHash-2-4 key followed by an 8-byte initial block.
* The Go ``hash.Hash64`` is created once and never reset. Each ``NextBlock()``
  writes the current block into it and takes ``Sum()``. So block *n* is
  SipHash(K, block_0 | block_1 | ... | block_{n-1}) over the **cumulative**
  concatenation, not SipHash(K, block_{n-1}) as the spec's "OFB" suggests.
  We keep one streaming C SipHash object and feed it 8 bytes per block; its
  ``digest()`` finalises a copy of the state, so nothing is ever rehashed.
* A block is the little-endian serialisation of the 64-bit SipHash output
  (what Go's ``Sum`` appends). ``Int63`` reads it big-endian and clears bit 63;
  the frame-length mask is its first two bytes read big-endian.

:class:`Rand` mirrors the parts of Go's ``math/rand`` (Go 1.19, which Debian's
obfs4proxy 0.0.14 was built with) that obfs4 drives from a HashDrbg through
``rand.New(drbg)``: ``Int63``, ``Int31``, ``Int31n``, ``Int63n``, ``Intn``,
``Float64`` and ``Perm``. HashDrbg is a plain ``rand.Source`` (not a
``Source64``), so every call goes through ``Int63``.
"""

from __future__ import annotations

import os
from typing import Final

from siphash24 import siphash24

BLOCK_LENGTH: Final = 8
KEY_LENGTH: Final = 16
SEED_LENGTH: Final = KEY_LENGTH + BLOCK_LENGTH  # 24

_INT63_MASK: Final = (1 << 63) - 1


class DrbgSeed(bytes):
    """A 24-byte HashDrbg seed: SipHash-2-4 key (16) | initial block (8).

    A ``bytes`` subclass so it can be passed anywhere raw seed bytes are expected.
    """

    def __new__(cls, raw: bytes) -> DrbgSeed:
        # Go's SeedFromBytes truncates longer input and rejects shorter; the
        # state file's drbg-seed goes through it, so do the same.
        if len(raw) < SEED_LENGTH:
            raise ValueError(f"invalid DRBG seed length: {len(raw)} (need {SEED_LENGTH})")
        return super().__new__(cls, bytes(raw[:SEED_LENGTH]))

    @classmethod
    def new(cls) -> DrbgSeed:
        """A fresh seed from the OS CSPRNG (Go: ``drbg.NewSeed``)."""
        return cls(os.urandom(SEED_LENGTH))

    @classmethod
    def from_hex(cls, encoded: str) -> DrbgSeed:
        """Parse the hex form used in ``obfs4_state.json`` (Go: ``SeedFromHex``)."""
        try:
            raw = bytes.fromhex(encoded)
        except ValueError as exc:
            raise ValueError(f"invalid DRBG seed hex: {exc}") from None
        return cls(raw)

    @property
    def key(self) -> bytes:
        return bytes(self[:KEY_LENGTH])

    @property
    def iv(self) -> bytes:
        return bytes(self[KEY_LENGTH:])


class HashDrbg:
    """The cumulative-SipHash generator (Go: ``drbg.HashDrbg``)."""

    __slots__ = ("_sip", "_block")

    def __init__(self, seed: bytes) -> None:
        seed = DrbgSeed(seed)
        self._sip = siphash24(key=seed[:KEY_LENGTH])
        self._block = bytes(seed[KEY_LENGTH:])

    def next_block(self) -> bytes:
        """Return the next 8-byte block (Go: ``NextBlock``)."""
        # digest() finalises a copy of the running state, so the hash keeps
        # absorbing the whole history exactly like Go's never-reset Hash64.
        self._sip.update(self._block)
        self._block = block = self._sip.digest()
        return block

    def uint64(self) -> int:
        """The next block read big-endian, all 64 bits."""
        return int.from_bytes(self.next_block(), "big")

    def int63(self) -> int:
        """Go ``Int63``: the next block read big-endian with bit 63 cleared."""
        return int.from_bytes(self.next_block(), "big") & _INT63_MASK

    def length_mask(self) -> int:
        """The 16-bit frame-length mask: the next block's first two bytes, big-endian."""
        block = self.next_block()
        return (block[0] << 8) | block[1]

    def length_masks(self, count: int) -> list[int]:
        """The next ``count`` length masks at once (the framing hot path's batch form)."""
        update, digest = self._sip.update, self._sip.digest
        block = self._block
        masks: list[int] = []
        append = masks.append
        for _ in range(count):
            update(block)
            block = digest()
            append((block[0] << 8) | block[1])
        self._block = block
        return masks


class Rand:
    """Go 1.19 ``math/rand.Rand`` over a :class:`HashDrbg` source, as far as obfs4 uses it.

    obfs4proxy builds its length/IAT tables (``probdist``) and the probe close
    delay (``rng.Intn(60)``) this way; reproducing Go's rejection sampling and
    float conversion exactly lets us derive the same values from a bridge's
    drbg-seed.
    """

    __slots__ = ("_src",)

    def __init__(self, source: HashDrbg) -> None:
        self._src = source

    def int63(self) -> int:
        return self._src.int63()

    def int31(self) -> int:
        """Go ``Int31``: the top 31 bits of ``Int63``."""
        return self._src.int63() >> 32

    def int31n(self, n: int) -> int:
        """Go ``Int31n``: masking for powers of two, otherwise modulo with rejection."""
        if n <= 0 or n > 0x7FFFFFFF:
            raise ValueError(f"invalid argument to Int31n: {n}")
        if n & (n - 1) == 0:
            return self.int31() & (n - 1)
        limit = 0x7FFFFFFF - (1 << 31) % n
        v = self.int31()
        while v > limit:
            v = self.int31()
        return v % n

    def int63n(self, n: int) -> int:
        """Go ``Int63n``: as Int31n but over 63 bits."""
        if n <= 0 or n > _INT63_MASK:
            raise ValueError(f"invalid argument to Int63n: {n}")
        if n & (n - 1) == 0:
            return self.int63() & (n - 1)
        limit = _INT63_MASK - (1 << 63) % n
        v = self.int63()
        while v > limit:
            v = self.int63()
        return v % n

    def intn(self, n: int) -> int:
        """Go ``Intn``: Int31n when n fits in 31 bits, else Int63n."""
        if n <= 0:
            raise ValueError(f"invalid argument to Intn: {n}")
        if n <= 0x7FFFFFFF:
            return self.int31n(n)
        return self.int63n(n)

    def float64(self) -> float:
        """Go ``Float64``: Int63 / 2**63, resampling the (rounding) case that gives 1.0.

        Python's int→float conversion rounds half to even, like Go's.
        """
        while True:
            f = float(self._src.int63()) / 9223372036854775808.0
            if f != 1.0:
                return f

    def perm(self, n: int) -> list[int]:
        """Go ``Perm``: the inside-out shuffle, including the no-op i=0 draw Go keeps."""
        m = [0] * n
        for i in range(n):
            j = self.intn(i + 1)
            m[i] = m[j]
            m[j] = i
        return m
