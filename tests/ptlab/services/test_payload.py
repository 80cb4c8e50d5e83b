"""Deterministic payloads: same bytes for the same seed, random-looking.

Their speed is measured in benchmarks/primitives.py, not asserted here."""

from __future__ import annotations

import hashlib
import zlib

import pytest

from ptlab.services.payload import expected_sha256, payload_bytes, payload_chunks


def test_deterministic_and_seed_dependent() -> None:
    a = payload_bytes(100_000, seed=7)
    assert a == payload_bytes(100_000, seed=7)
    assert a != payload_bytes(100_000, seed=8)
    assert payload_bytes(1000, seed=-3) != payload_bytes(1000, seed=3)


@pytest.mark.parametrize("size", [0, 1, 4095, 65536, 65537, 300_001])
def test_exact_size_and_chunk_independent(size: int) -> None:
    whole = payload_bytes(size, seed=1)
    assert len(whole) == size
    pieces = list(payload_chunks(size, seed=1, chunk=4096))
    assert all(0 < len(p) <= 4096 for p in pieces)
    assert b"".join(pieces) == whole
    # A prefix of a longer stream equals the shorter stream.
    assert payload_bytes(size + 100, seed=1)[:size] == whole


def test_expected_sha256_matches_stream() -> None:
    size = 3 * 65536 + 17
    assert expected_sha256(size, 5) == hashlib.sha256(payload_bytes(size, 5)).hexdigest()
    assert expected_sha256(size, 5) != expected_sha256(size, 6)
    assert expected_sha256(0, 0) == hashlib.sha256(b"").hexdigest()


def test_incompressible() -> None:
    data = payload_bytes(1 << 20, seed=9)
    assert len(zlib.compress(data, 9)) > 0.99 * len(data)
    # Byte values are spread evenly (a keystream, not a pattern).
    counts = [0] * 256
    for b in data[:65536]:
        counts[b] += 1
    assert max(counts) < 2 * 65536 / 256


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        list(payload_chunks(-1, 0))
    with pytest.raises(ValueError):
        list(payload_chunks(10, 0, chunk=0))

