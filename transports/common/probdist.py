"""obfs4's weighted length / inter-arrival-time distribution (Go: ``common/probdist``).

Why: obfs4 pads each write burst up to a length drawn from a per-bridge
distribution, so all connections to one bridge share a length "fingerprint"
that differs between bridges. The table is generated deterministically from a
24-byte seed (the server's drbg-seed, sent to the client in the first frame), so
both ends of a connection, and every connection to the bridge, use the same one.

The table is built exactly as ``weighted_dist.go`` does, with the seed's
:class:`~transports.common.drbg.HashDrbg` driving a Go-compatible ``math/rand``
(:class:`~transports.common.drbg.Rand`):

* ``values``: the first *n* entries of ``Perm(max - min + 1)``, where
  ``n = Intn(clamp(max - min + 1, 1, 100)) + 1``;
* weights: ``Float64()`` each, or with ``biased`` the ScrambleSuit-style
  ``(1 - cumulative) * Float64()``;
* Vose's alias tables, with FIFO small/large work lists like Go's ``container/list``.

Sampling uses the OS CSPRNG, as Go's does (``csrand``), not the DRBG: only the
table is meant to be reproducible. Nothing on the wire is checked against the
table, so interop does not depend on it; being bit-exact keeps our bridges'
length profiles indistinguishable from obfs4proxy's for the same seed.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque

from transports.common.drbg import HashDrbg, Rand

MIN_VALUES = 1
MAX_VALUES = 100

_csprng = random.SystemRandom()


def iat_seed(seed: bytes) -> bytes:
    """The IAT distribution's seed for a length-distribution seed: SHA-256(seed)[:24].

    obfs4.go derives it this way on both ends (server start-up, client on a
    PRNG-seed packet) so the IAT table is as per-bridge as the length table.
    """
    return hashlib.sha256(bytes(seed)).digest()[:24]


class WeightedDist:
    """A seeded weighted distribution over the integers ``[min, max]``."""

    def __init__(self, seed: bytes, min: int, max: int, biased: bool = False) -> None:
        if max <= min:
            raise ValueError(f"WeightedDist: min >= max ({min}, {max})")
        self.min_value = min
        self.max_value = max
        self.biased = biased
        self.values: list[int] = []
        self.weights: list[float] = []
        self.prob: list[float] = []
        self.alias: list[int] = []
        self.reset(seed)

    def reset(self, seed: bytes) -> None:
        """Regenerate the table from a new seed (the client does this on a PRNG-seed packet)."""
        rng = Rand(HashDrbg(seed))
        self._gen_values(rng)
        if self.biased:
            self._gen_biased_weights(rng)
        else:
            self._gen_uniform_weights(rng)
        self._gen_tables()

    def _gen_values(self, rng: Rand) -> None:
        span = self.max_value + 1 - self.min_value
        # Go draws the whole permutation before choosing how many to keep; the
        # draw order matters for reproducing the table.
        perm = rng.perm(span)
        n = min(max(span, MIN_VALUES), MAX_VALUES)
        n = rng.intn(n) + 1
        self.values = perm[:n]

    def _gen_biased_weights(self, rng: Rand) -> None:
        weights = []
        cumulative = 0.0
        for _ in self.values:
            p = (1.0 - cumulative) * rng.float64()
            weights.append(p)
            cumulative += p
        self.weights = weights

    def _gen_uniform_weights(self, rng: Rand) -> None:
        self.weights = [rng.float64() for _ in self.values]

    def _gen_tables(self) -> None:
        # Vose's alias method, in the same order as Go so floating-point
        # rounding matches.
        n = len(self.weights)
        total = 0.0
        for w in self.weights:
            total += w
        alias = [0] * n
        prob = [0.0] * n
        scaled = [w * float(n) / total for w in self.weights]
        small: deque[int] = deque()
        large: deque[int] = deque()
        for i, p in enumerate(scaled):
            (small if p < 1.0 else large).append(i)
        while small and large:
            lo = small.popleft()
            hi = large.popleft()
            prob[lo] = scaled[lo]
            alias[lo] = hi
            scaled[hi] = (scaled[hi] + scaled[lo]) - 1.0
            (small if scaled[hi] < 1.0 else large).append(hi)
        for hi in large:
            prob[hi] = 1.0
        for lo in small:  # only reachable through rounding
            prob[lo] = 1.0
        self.prob = prob
        self.alias = alias

    def sample(self) -> int:
        """Draw one value (a fair die roll, then a biased coin, from the OS CSPRNG)."""
        i = _csprng.randrange(len(self.values))
        idx = i if _csprng.random() <= self.prob[i] else self.alias[i]
        return self.min_value + self.values[idx]

    def __str__(self) -> str:
        # Same shape as Go's String(): value: weight, tiny weights squelched.
        parts = [f"{v}: {p:f}" for v, p in zip(self.values, self.weights, strict=True) if p > 0.01]
        return "[ " + " ".join(parts) + (" " if parts else "") + "]"
