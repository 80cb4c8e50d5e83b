"""X25519 keypairs whose public keys hide behind Elligator2 representatives.

obfs4 sends its ephemeral Curve25519 keys as *representatives*: 32 bytes that a
censor cannot tell from random.  A plain X25519 public key is distinguishable
(only about half of all 255-bit strings are valid curve points, and the top bit is
always zero), so obfs4 only uses keys whose point has a preimage under the
Elligator2 map, and it sends that preimage instead.

This module reproduces the key generation of obfs4proxy 0.0.14
(``internal/x25519ell2``), which fixed two distinguishers of older releases:

* The public key is the "dirty" point ``clamp(sk)·B + T``, where ``T`` is one of
  the 8 low-order points, chosen by the low 3 bits of the *unclamped* ``sk[0]``.
  Representatives of clean (prime-order) points all decode into the prime-order
  subgroup, which a censor can test.  X25519 clamps scalars to multiples of 8,
  so ``T`` vanishes from every Diffie-Hellman result: dirty keys interoperate
  with any standard X25519 peer.
* The two high bits of the representative (always zero in the map's output,
  since it is below (p-1)/2) are filled with random bits.

A keypair's private key is ``SHA512(32 random bytes)[:32]``; the last digest
byte is the "tweak" that picks the Elligator2 branch and the random high bits.
Scalar multiplication uses libsodium (through PyNaCl); the map itself is a few
modular exponentiations on Python ints.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass

from nacl.bindings import (
    crypto_core_ed25519_add,
    crypto_scalarmult_base,
    crypto_scalarmult_ed25519_base,
)

KEY_LENGTH = 32
REPRESENTATIVE_LENGTH = 32

P = 2**255 - 19
A = 486662  # Montgomery coefficient of Curve25519
_D = -121665 * pow(121666, -1, P) % P  # twisted Edwards d of edwards25519
_SQRT_M1 = pow(2, (P - 1) // 4, P)
_MASK_254 = (1 << 254) - 1
_MASK_255 = (1 << 255) - 1

# A generator of the 8-torsion of edwards25519, the point obfs4proxy calls "lop"
# (low-order point).  obfs4proxy adds (sk[0] mod 8) times this point; using a
# different generator would still hide the subgroup, but then our keys would
# differ bit for bit from obfs4proxy's for the same private key.
_T8_X = int.from_bytes(
    bytes.fromhex("4ad145c54646a1de38e2e513703c195cbb4ade38329933e9284a3906a0b9d51f"), "little"
)
_T8_Y = int.from_bytes(
    bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"), "little"
)


@dataclass(frozen=True)
class Keypair:
    """A Curve25519 keypair; ``representative`` is set only for Elligator2 keys."""

    private: bytes
    public: bytes
    representative: bytes | None = None


def _edwards_add(p1: tuple[int, int], p2: tuple[int, int]) -> tuple[int, int]:
    """Affine addition on edwards25519 (complete, so it also handles doubling)."""
    x1, y1 = p1
    x2, y2 = p2
    t = _D * x1 * x2 * y1 * y2 % P
    x3 = (x1 * y2 + y1 * x2) * pow(1 + t, -1, P) % P
    y3 = (y1 * y2 + x1 * x2) * pow(1 - t, -1, P) % P
    return x3, y3


def _encode_edwards(point: tuple[int, int]) -> bytes:
    """RFC 8032 point encoding: y, with the parity of x in the top bit."""
    x, y = point
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _torsion_table() -> tuple[bytes, ...]:
    """The encodings of k·T8 for k = 0..7, indexed by k."""
    table = []
    point = (0, 1)
    for _ in range(8):
        table.append(_encode_edwards(point))
        point = _edwards_add(point, (_T8_X, _T8_Y))
    return tuple(table)


_TORSION = _torsion_table()


def _is_square(a: int) -> bool:
    """Euler's criterion; zero counts as a square."""
    return pow(a % P, (P - 1) // 2, P) in (0, 1)


def _sqrt(a: int) -> int | None:
    """A square root of ``a`` mod p (p ≡ 5 mod 8), or None if there is none."""
    a %= P
    root = pow(a, (P + 3) // 8, P)
    if root * root % P == a:
        return root
    root = root * _SQRT_M1 % P
    if root * root % P == a:
        return root
    return None


def _dirty_u(private: bytes) -> int:
    """Montgomery u of ``clamp(sk)·B + (sk[0] mod 8)·T8``.

    libsodium clamps the scalar exactly as X25519 does; the torsion index uses the
    unclamped first byte, which is why it is not simply zero.
    """
    prime_part = crypto_scalarmult_ed25519_base(private)
    point = crypto_core_ed25519_add(prime_part, _TORSION[private[0] & 7])
    y = int.from_bytes(point, "little") & _MASK_255
    if y == 1:  # the identity; cannot happen for a clamped scalar
        return 0
    return (1 + y) * pow(1 - y, -1, P) % P


def _u_to_representative(u: int, tweak: int) -> bytes | None:
    """The inverse Elligator2 map (non-square 2), or None if ``u`` has no preimage.

    ``u`` has a preimage iff ``-2u(u+A)`` is a non-zero square.  Tweak bit 0 picks
    which of the two preimage families to use, the root is taken in [0, (p-1)/2],
    and tweak bits 6-7 become the representative's (otherwise zero) top bits.
    """
    u_plus_a = (u + A) % P
    if u * u_plus_a % P == 0:
        return None
    numerator, other = (u_plus_a, u) if tweak & 1 else (u, u_plus_a)
    root = _sqrt(-numerator * pow(2 * other, -1, P))
    if root is None:
        return None
    root = min(root, P - root)
    out = bytearray(root.to_bytes(32, "little"))
    out[31] |= tweak & 0xC0
    return bytes(out)


def representative_to_public(representative: bytes) -> bytes:
    """Decode a representative to an X25519 public key (the Elligator2 direct map).

    The top 2 bits are random padding and are masked off first.  With r the
    remaining value: ``w = -A / (1 + 2r²)``; the result is ``w`` if
    ``w³ + Aw² + w`` is a square, else ``-w - A``.  Every input decodes.
    """
    if len(representative) != REPRESENTATIVE_LENGTH:
        raise ValueError(f"representative must be {REPRESENTATIVE_LENGTH} bytes")
    r = int.from_bytes(representative, "little") & _MASK_254
    w = -A * pow(1 + 2 * r * r, -1, P) % P
    if not _is_square(w * (w * w + A * w + 1)):
        w = (-w - A) % P
    return w.to_bytes(32, "little")


def without_high_bits(keypair: Keypair) -> Keypair:
    """The same key with the representative's two padding bits cleared.

    Decoders before obfs4proxy 0.0.12 (agl's ``extra25519``, kept in Refraction
    Networking's obfs4 fork that Conjure's station and client use) drop only bit
    255, so bit 254 set means another point: half of this module's keys then fail
    the ntor AUTH check against them (measured with gotapdance v1.7.10,
    docs/transports/conjure.md §9). Cleared, every decoder gets the same point;
    the price is the old distinguisher of two bits that are always zero."""
    if keypair.representative is None:
        raise ValueError("not an Elligator2 keypair")
    rep = keypair.representative
    return Keypair(keypair.private, keypair.public, rep[:31] + bytes([rep[31] & 0x3F]))


def public_key_from_private(private: bytes) -> bytes:
    """The standard ("clean") X25519 public key, as used for bridge identity keys."""
    if len(private) != KEY_LENGTH:
        raise ValueError(f"private key must be {KEY_LENGTH} bytes")
    return crypto_scalarmult_base(private)


def new_keypair(elligator: bool = False, rng: Callable[[int], bytes] = os.urandom) -> Keypair:
    """Generate a keypair the way obfs4proxy 0.0.14 does.

    With ``elligator=True`` about half of the candidates have no representative,
    so this retries until one does (two attempts on average).  ``rng`` is
    injectable for reproducible tests; it must keep returning fresh bytes.
    """
    while True:
        digest = hashlib.sha512(rng(32)).digest()
        private = digest[:32]
        if not elligator:
            return Keypair(private, public_key_from_private(private), None)
        u = _dirty_u(private)
        representative = _u_to_representative(u, digest[63])
        if representative is not None:
            return Keypair(private, u.to_bytes(32, "little"), representative)
