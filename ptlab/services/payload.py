"""Deterministic bulk payloads shared by the web server and the workload client.

The server streams ``payload_chunks(size, seed)`` and the client checks the
download against ``expected_sha256(size, seed)`` without the payload ever
being stored. The bytes are an AES-256-CTR keystream keyed by the seed: they
look random (so a transport cannot win by compressing), cost almost nothing
to produce (several GB/s with AES-NI), and depend only on ``(size, seed)``,
never on the chunk size, so any prefix of a stream equals a shorter stream.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from functools import lru_cache

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

DEFAULT_CHUNK = 65536
_KEY_LABEL = b"ptlab payload v1\x00"


def _key(seed: int) -> bytes:
    """The AES key for a seed; any int (even negative or huge) is a valid seed."""
    return hashlib.sha256(_KEY_LABEL + str(int(seed)).encode()).digest()


def payload_chunks(size: int, seed: int, chunk: int = DEFAULT_CHUNK) -> Iterator[bytes]:
    """Yield ``size`` pseudorandom bytes for ``seed`` in pieces of at most ``chunk`` bytes."""
    if size < 0:
        raise ValueError(f"payload size must be >= 0, got {size}")
    if chunk <= 0:
        raise ValueError(f"chunk must be > 0, got {chunk}")
    encryptor = Cipher(algorithms.AES(_key(seed)), modes.CTR(bytes(16))).encryptor()
    zeros = bytes(min(chunk, size))
    remaining = size
    while remaining >= chunk:
        yield encryptor.update(zeros)
        remaining -= chunk
    if remaining:
        yield encryptor.update(zeros[:remaining])


def payload_bytes(size: int, seed: int) -> bytes:
    """The whole payload at once (for small sizes and tests)."""
    return b"".join(payload_chunks(size, seed))


@lru_cache(maxsize=64)
def expected_sha256(size: int, seed: int) -> str:
    """Hex SHA-256 of the payload, so a client can verify a download it never stores."""
    digest = hashlib.sha256()
    for piece in payload_chunks(size, seed, chunk=1 << 20):
        digest.update(piece)
    return digest.hexdigest()
