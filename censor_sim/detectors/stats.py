"""Flow statistics: what flow classifiers look at, recorded for the first N packets.

Wang, Dyer, Akella, Ristenpart and Shrimpton (CCS 2015, "Seeing through
Network-Protocol Obfuscation") classify obfuscated flows from the first
message's entropy and length and from simple features of the first 30
packets (lengths, directions, timing). The censor records these per flow so
detectors and the learning censor (issue 9) can use them, and so detection
events can show them as evidence.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

_PRINTABLE = bytes(range(0x20, 0x7F))


def shannon_entropy(data: bytes) -> float:
    """Bits per byte, 0 (constant) to 8 (every byte value equally often)."""
    n = len(data)
    if n == 0:
        return 0.0
    return -sum(c / n * math.log2(c / n) for c in Counter(data).values())


def popcount_mean(data: bytes) -> float:
    """Average set bits per byte (the FET rules' Ex1 statistic)."""
    return int.from_bytes(data, "big").bit_count() / len(data) if data else 0.0


def printable_fraction(data: bytes) -> float:
    return (len(data) - len(data.translate(None, _PRINTABLE))) / len(data) if data else 0.0


def block_entropy(data: bytes, block: int = 8) -> list[float]:
    """Entropy of each `block`-byte window: Wang et al.'s entropy-distribution test
    compares these against what uniformly random bytes give (≈ log2(block))."""
    return [shannon_entropy(data[i:i + block]) for i in range(0, len(data) - block + 1, block)]


class FlowStats:
    """Lengths, directions and inter-arrival times of a flow's first `limit` packets."""

    def __init__(self, limit: int = 30) -> None:
        self.limit = limit
        self.lengths: list[int] = []
        self.directions: list[int] = []
        self.times: list[float] = []
        self.first_payload: dict[int, dict[str, float]] = {}

    @property
    def full(self) -> bool:
        return len(self.lengths) >= self.limit

    def add(self, direction: int, length: int, ts: float) -> None:
        """Record one packet: direction +1 client→server, -1 back; `ts` from the caller's clock."""
        if self.full:
            return
        self.lengths.append(length)
        self.directions.append(direction)
        self.times.append(ts)

    @property
    def iats(self) -> list[float]:
        return [0.0] + [b - a for a, b in zip(self.times, self.times[1:], strict=False)]

    def note_first_payload(self, direction: int, payload: bytes) -> None:
        if direction not in self.first_payload and payload:
            self.first_payload[direction] = {
                "length": len(payload), "entropy": round(shannon_entropy(payload), 4),
                "popcount": round(popcount_mean(payload), 4)}

    def features(self) -> dict[str, Any]:
        return {"lengths": list(self.lengths), "directions": list(self.directions),
                "iats": [round(x, 6) for x in self.iats],
                "first_payload": {("c2s" if d > 0 else "s2c"): v
                                  for d, v in self.first_payload.items()}}
