"""UniformDH: Diffie-Hellman whose public keys look like uniform random bytes.

obfs3 and ScrambleSuit exchange keys in the 1536-bit MODP group of RFC 3526
(group 5, generator 2). A public value g^x mod p is not uniform over 192-byte
strings, so each side sends either X or p - X, chosen by a coin flip; the
receiver cannot tell which, and (p - X)^x = X^x for an even x, so both agree.

Private keys are 192 random bytes with the low bit cleared; that cleared bit,
as it was before clearing, is the coin (even: send X, odd: send p - X), as in
obfs4proxy's ``common/uniformdh``. Public keys and secrets are 192 bytes,
big-endian, zero-padded. Not constant time: fit for obfuscation, not secrecy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

SIZE = 192
P = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22"
    "514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6"
    "F44C42E9A637ED6B0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3D"
    "C2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB"
    "9ED529077096966D670C354E4ABC9804F1746C08CA237327FFFFFFFFFFFFFFFF", 16)
G = 2


class UniformDHError(ValueError):
    pass


@dataclass(frozen=True)
class Keypair:
    private: int  # even
    public: bytes  # what goes on the wire: X or p - X


def keypair_from_bytes(raw: bytes) -> Keypair:
    """The keypair for 192 private bytes (the low bit picks X or p - X)."""
    if len(raw) != SIZE:
        raise UniformDHError(f"a private key is {SIZE} bytes")
    value = int.from_bytes(raw, "big")
    odd = value & 1
    x = value & ~1
    public = pow(G, x, P)
    if odd:
        public = P - public
    return Keypair(x, public.to_bytes(SIZE, "big"))


def new_keypair() -> Keypair:
    return keypair_from_bytes(os.urandom(SIZE))


def shared_secret(own: Keypair, peer_public: bytes) -> bytes:
    """Y^x mod p, 192 bytes; the peer's p - Y gives the same value."""
    if len(peer_public) != SIZE:
        raise UniformDHError(f"a public key is {SIZE} bytes")
    y = int.from_bytes(peer_public, "big")
    if not 1 < y < P - 1:
        raise UniformDHError("public key out of range")
    return pow(y, own.private, P).to_bytes(SIZE, "big")
