"""ScrambleSuit's polymorphic shaping: each server's PRNG seed picks its packet lengths
and (optionally) the gaps between its packets.

The seed (32 bytes; sent to the client in a PRNG-seed frame, which then shapes
its own bursts the same way) seeds obfs4's weighted distribution over 21-1448
bytes, biased, exactly as obfs4proxy's ScrambleSuit client builds it from its
first 24 bytes: the same DRBG and the same table (:mod:`transports.common.probdist`).
Each burst is padded so its last segment has a sampled length.

Timing (``iat-mode=1``, ours; obfs4proxy's ScrambleSuit client has no timing
shaping): bursts go out one segment at a time, each followed by a sampled gap of
0-10 ms in 100 µs steps, from a second table seeded by SHA-256 of the seed, as
obfs4's iat-mode 1 does.
"""

from __future__ import annotations

from transports.common.probdist import WeightedDist, iat_seed

from .framing import MAX_SEGMENT, OVERHEAD

MIN_LEN, MAX_LEN = OVERHEAD, MAX_SEGMENT
MAX_IAT = 100  # in units of 100 µs
IAT_UNIT_S = 100e-6


class Shaping:
    def __init__(self, seed: bytes, iat_mode: int = 0) -> None:
        self.iat_mode = iat_mode
        self.lengths = WeightedDist(seed[:24], MIN_LEN, MAX_LEN, biased=True)
        self.gaps = WeightedDist(iat_seed(seed[:24]), 0, MAX_IAT, biased=True) \
            if iat_mode else None

    def reseed(self, seed: bytes) -> None:
        """The peer's PRNG-seed frame: shape as it does."""
        self.lengths.reset(seed[:24])
        if self.gaps is not None:
            self.gaps.reset(iat_seed(seed[:24]))

    def pad_length(self, burst_len: int) -> int:
        """Padding after a burst so its last segment has a sampled length (0: none)."""
        sample = self.lengths.sample()
        tail = burst_len % MAX_SEGMENT
        pad = sample - tail if sample >= tail else (MAX_SEGMENT - tail) + sample
        if 0 < pad < OVERHEAD:
            pad += MAX_SEGMENT
        return pad

    def gap_s(self) -> float:
        return self.gaps.sample() * IAT_UNIT_S if self.gaps is not None else 0.0
