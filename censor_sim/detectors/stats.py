"""Flow statistics: what passive flow classifiers look at, for the first N packets.

Wang, Dyer, Akella, Ristenpart and Shrimpton (CCS 2015, "Seeing through
Network-Protocol Obfuscation", docs/censors/ml.md §1) detect obfs3/obfs4 from the
entropy and length of a flow's first message, and meek with decision trees
over simple features of the *first 30 packets* (lengths, directions, timing).
The censor keeps these per flow (:class:`FlowStats`) so detectors can use them
and detection events can show them as evidence; the byte statistics here
(entropy, popcount, printable fraction) are shared with the FET rules
(Wu et al. 2023, docs/censors/fet.md §2).

docs/censors/ml.md §1.2 marks the Wang et al. figures as second-hand: the exact
construction of their entropy test (block size 8) is not re-verified against
the PDF, so :func:`block_entropy` and :func:`expected_block_entropy` are
building blocks with precisely documented semantics, not a claim to reproduce
the paper's classifier.

Everything is pure and clock-free: timestamps come from the caller, so tests
and the engine's injectable clock agree.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

_PRINTABLE_MASK = bytes(1 if 0x20 <= b <= 0x7E else 0 for b in range(256))

DEFAULT_PACKETS = 30
"""Wang et al. 2015's classifiers look at a flow's first 30 packets (docs/censors/ml.md §1.4)."""

C2S, S2C = 1, -1
"""Packet directions: +1 client→server (the censored side sends), -1 server→client."""


def shannon_entropy(data: bytes) -> float:
    """Empirical (plug-in) Shannon entropy of the byte histogram, in bits per byte.

    0.0 for empty or constant data, 8.0 when all 256 values occur equally
    often. Note the plug-in estimate is biased low for short inputs: n random
    bytes give at most log2(n) bits, which is why short first messages need
    :func:`expected_block_entropy` as a reference, not the value 8.
    """
    n = len(data)
    if n == 0:
        return 0.0
    h = -math.fsum(c / n * math.log2(c / n) for c in Counter(data).values())
    return h if h > 0.0 else 0.0  # never -0.0 (constant data)


def popcount_mean(data: bytes) -> float:
    """Average set bits per byte, 0..8 (the FET rules' Ex1 statistic; 4 for random data).
    0.0 for empty data."""
    return int.from_bytes(data, "little").bit_count() / len(data) if data else 0.0


def printable_fraction(data: bytes) -> float:
    """Fraction of bytes that are printable ASCII [0x20, 0x7e] (FET Ex3; ≈ 0.37 for random
    data). 0.0 for empty data."""
    if not data:
        return 0.0
    return int.from_bytes(data.translate(_PRINTABLE_MASK), "little").bit_count() / len(data)


def block_entropy(data: bytes, block: int = 8) -> list[float]:
    """Shannon entropy (:func:`shannon_entropy`) of each consecutive, non-overlapping
    `block`-byte slice of `data`; a trailing partial block is ignored.

    This is the raw material of an entropy-distribution test in the style of
    Wang et al. 2015 (block size 8): encrypted or random bytes give block
    entropies concentrated just below log2(block) (mean
    :func:`expected_block_entropy`), while plaintext and most protocol headers
    repeat bytes within a block and score lower. Comparing a message's block
    entropies with that reference (mean, or a distribution test) is the
    detector's business.
    """
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    # A block of all-distinct bytes (most random blocks) has entropy log2(block),
    # which shannon_entropy computes as exactly this value: skip the histogram.
    distinct = -math.fsum([1 / block * math.log2(1 / block)] * block)
    out = []
    for i in range(0, len(data) - block + 1, block):
        chunk = data[i:i + block]
        if len(set(chunk)) == block:
            out.append(distinct)
        else:
            # The entropy depends on the counts alone, and fsum's exact rounding makes
            # it the same whatever their order: one value per multiset, looked up.
            out.append(_entropy_of_counts(tuple(sorted(Counter(chunk).values()))))
    return out


@functools.lru_cache(maxsize=4096)
def _entropy_of_counts(counts: tuple[int, ...]) -> float:
    """:func:`shannon_entropy` of any data whose byte counts are ``counts``."""
    n = sum(counts)
    h = -math.fsum(c / n * math.log2(c / n) for c in counts)
    return h if h > 0.0 else 0.0


def _partitions(n: int, largest: int | None = None) -> list[tuple[int, ...]]:
    """Integer partitions of n (non-increasing parts, each at most `largest`)."""
    largest = n if largest is None else largest
    if n == 0:
        return [()]
    return [(k, *rest) for k in range(min(n, largest), 0, -1) for rest in _partitions(n - k, k)]


@functools.lru_cache(maxsize=64)
def block_entropy_distribution(block: int = 8,
                               alphabet: int = 256) -> tuple[tuple[float, float], ...]:
    """Exact distribution of :func:`shannon_entropy` over uniformly random `block`-byte
    strings, as ``((entropy, probability), ...)`` in increasing entropy.

    The plug-in entropy of a block depends only on how many times each distinct
    value occurs, i.e. on an integer partition λ of `block` into k parts. The
    number of strings with that pattern is (ways to pick the k values for the
    parts, equal-sized parts interchangeable) × (arrangements of the block):
    ``alphabet!/(alphabet-k)! / prod(m_j!)`` × ``block! / prod(λ_i!)``, where m_j
    counts equal parts. Entropies are summed with :func:`math.fsum` (correctly
    rounded, so independent of order), exactly as :func:`shannon_entropy` does,
    so a sample's values fall on these support points bit for bit. Limited to
    block <= 32 (the number of partitions grows quickly); results are cached.
    """
    if not 1 <= block <= 32:
        raise ValueError(f"block must be in 1..32, got {block}")
    total = 0
    counts: dict[float, int] = {}
    for parts in _partitions(block):
        k = len(parts)
        if k > alphabet:
            continue
        choose_values = math.perm(alphabet, k)
        for m in Counter(parts).values():
            choose_values //= math.factorial(m)
        arrangements = math.factorial(block)
        for p in parts:
            arrangements //= math.factorial(p)
        count = choose_values * arrangements
        h = -math.fsum(p / block * math.log2(p / block) for p in parts)
        h = h if h > 0.0 else 0.0
        total += count
        counts[h] = counts.get(h, 0) + count
    assert total == alphabet ** block  # every string counted exactly once
    return tuple((h, counts[h] / total) for h in sorted(counts))


def expected_block_entropy(block: int = 8, alphabet: int = 256) -> float:
    """Exact mean of :func:`shannon_entropy` over uniformly random `block`-byte strings
    (:func:`block_entropy_distribution`). For block 8 this is 2.9728 bits, not
    log2(8) = 3, because about 10 % of random 8-byte blocks repeat a value."""
    return math.fsum(h * p for h, p in block_entropy_distribution(block, alphabet))


@dataclass(frozen=True)
class PayloadStats:
    """Byte statistics of one payload (a flow's first in one direction)."""

    length: int
    entropy: float
    popcount: float
    printable_fraction: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def payload_stats(payload: bytes) -> PayloadStats:
    """The statistics Wang et al.'s first-message test (entropy, length) and the FET
    rules (popcount, printable fraction) read."""
    return PayloadStats(len(payload), shannon_entropy(payload), popcount_mean(payload),
                        printable_fraction(payload))


class FlowStats:
    """Sizes, directions and timing of a flow's first `limit` packets, and its first payloads.

    `limit` defaults to Wang et al. 2015's 30 packets. Recording stops once
    `limit` packets are in (:attr:`full`), so per-flow memory is bounded
    whatever the flow's length. Timestamps are the caller's clock values in
    seconds (the engine passes time since the flow's first packet), so the
    class never reads a clock itself.
    """

    __slots__ = ("limit", "lengths", "directions", "times", "_first_raw", "_first_stats")

    def __init__(self, limit: int = DEFAULT_PACKETS) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self.lengths: list[int] = []
        self.directions: list[int] = []
        self.times: list[float] = []
        # First non-empty payload per direction (C2S / S2C). Its statistics are
        # computed when first asked for: the censor's packet path records every
        # flow, and an entropy per flow was most of its per-packet cost.
        self._first_raw: dict[int, bytes] = {}
        self._first_stats: dict[int, PayloadStats] = {}

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def full(self) -> bool:
        """True once `limit` packets are recorded; later packets are ignored."""
        return len(self.lengths) >= self.limit

    def add(self, direction: int, length: int, ts: float) -> None:
        """Record one packet: `direction` +1 client→server or -1 server→client, `length`
        its payload length (0 for a bare ACK), `ts` the caller's clock in seconds."""
        if direction not in (C2S, S2C):
            raise ValueError(f"direction must be +1 or -1, got {direction!r}")
        if length < 0:
            raise ValueError(f"length must be non-negative, got {length}")
        if len(self.lengths) >= self.limit:
            return
        self.lengths.append(length)
        self.directions.append(direction)
        self.times.append(ts)

    @property
    def iats(self) -> list[float]:
        """Inter-arrival times in seconds, one per recorded packet; the first is 0.0."""
        t = self.times
        return [0.0] + [t[i] - t[i - 1] for i in range(1, len(t))] if t else []

    def note_first_payload(self, direction: int, payload: bytes) -> None:
        """Keep the statistics of the first non-empty payload seen in `direction`;
        later calls for that direction, and empty payloads, are ignored."""
        if direction not in (C2S, S2C):
            raise ValueError(f"direction must be +1 or -1, got {direction!r}")
        if payload and direction not in self._first_raw:
            self._first_raw[direction] = bytes(payload)

    @property
    def first_payload(self) -> dict[int, PayloadStats]:
        """The first non-empty payload's statistics per direction (C2S / S2C)."""
        for d, raw in self._first_raw.items():
            if d not in self._first_stats:
                self._first_stats[d] = payload_stats(raw)
        return self._first_stats

    def features(self) -> dict[str, Any]:
        """A JSON-safe summary: the per-packet sequences, per-direction totals, and
        the first payloads' statistics keyed "c2s" / "s2c"."""
        c2s_bytes = sum(n for n, d in zip(self.lengths, self.directions, strict=True) if d > 0)
        return {
            "packets": len(self.lengths),
            "full": self.full,
            "lengths": list(self.lengths),
            "directions": list(self.directions),
            "iats": self.iats,
            "c2s_packets": self.directions.count(C2S),
            "s2c_packets": self.directions.count(S2C),
            "c2s_bytes": c2s_bytes,
            "s2c_bytes": sum(self.lengths) - c2s_bytes,
            "first_payload": {("c2s" if d == C2S else "s2c"): s.to_json()
                              for d, s in sorted(self.first_payload.items(), reverse=True)},
        }
