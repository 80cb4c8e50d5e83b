"""Differentially private usage counts for the broker.

Tor's broker publishes its counts rounded up to a multiple of 8, which hides
little: one extra client still moves a count across a boundary. Ours releases
each period's counts through the discrete Laplace mechanism, with this
guarantee (:func:`guarantee`):

* **Unit of privacy**: one source address (a client's or a proxy's) within one
  reporting period.
* **Clamping**: each unit adds at most ``max_contribution`` to a histogram in
  total, whatever keys (countries, NAT types) it touches, so the histogram's
  L1 sensitivity is Δ = ``max_contribution``.
* **Noise**: every published key gets independent discrete Laplace noise of
  scale Δ/ε, sampled exactly with integer arithmetic (Canonne, Kamath and
  Steinke 2020, Algorithms 1–2), so no floating-point artefact leaks the true
  count (Mironov 2012). The key set is fixed in advance (all countries of the
  GeoIP map, plus ``??``), so which keys appear says nothing.
* **Post-processing**: negative results become 0; post-processing keeps the
  guarantee.
* **Budget**: releases compose sequentially; a ledger holds each period's
  total ε and refuses a release that would exceed it, publishing nothing.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterable
from fractions import Fraction
from typing import Protocol


class Rng(Protocol):
    """What the noise draws from: ``random.Random``, ``secrets.SystemRandom`` or a test's.

    ``stop`` is positional-only because it is passed that way, and the
    standard library names its first parameter ``start``."""

    def randrange(self, stop: int, /) -> int: ...


class BudgetExceeded(RuntimeError):
    """A release would spend more ε than the period has left."""


def _bernoulli(p: Fraction, rng: Rng) -> bool:
    return rng.randrange(p.denominator) < p.numerator


def bernoulli_exp(gamma: Fraction, rng: Rng) -> bool:
    """True with probability exp(-gamma), exactly (CKS20 Algorithm 1), gamma >= 0."""
    if gamma < 0:
        raise ValueError("gamma must be >= 0")
    while gamma > 1:  # exp(-gamma) = exp(-1)^floor · exp(-frac)
        if not bernoulli_exp(Fraction(1), rng):
            return False
        gamma -= 1
    k = 1
    while _bernoulli(gamma / k, rng):
        k += 1
    return k % 2 == 1


def discrete_laplace(scale: Fraction, rng: Rng) -> int:
    """One sample Y with P(Y = y) ∝ exp(-|y| / scale) (CKS20 Algorithm 2)."""
    scale = Fraction(scale)
    if scale <= 0:
        raise ValueError("scale must be > 0")
    t, s = scale.numerator, scale.denominator  # scale = t / s
    while True:
        u = rng.randrange(t)
        if not bernoulli_exp(Fraction(u, t), rng):
            continue
        v = 0
        while bernoulli_exp(Fraction(1), rng):
            v += 1
        y = (u + t * v) // s
        negative = rng.randrange(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def variance(scale: Fraction) -> float:
    """The discrete Laplace variance, 2e^(-1/b)/(1-e^(-1/b))², for tests and docs."""
    import math

    q = math.exp(-1 / float(scale))
    return 2 * q / (1 - q) ** 2


class Ledger:
    """Sequential composition within one period: the ε spent so far, and the cap."""

    def __init__(self, total_epsilon: Fraction) -> None:
        if total_epsilon <= 0:
            raise ValueError("the budget must be > 0")
        self.total = Fraction(total_epsilon)
        self.spent = Fraction(0)

    def spend(self, epsilon: Fraction) -> None:
        if epsilon <= 0:
            raise ValueError("epsilon must be > 0")
        if self.spent + epsilon > self.total:
            raise BudgetExceeded(f"ε {float(epsilon):g} would exceed the period's budget "
                                 f"({float(self.spent):g} of {float(self.total):g} spent)")
        self.spent += epsilon


class Histogram:
    """Counts per key with each unit's total contribution clamped to Δ."""

    def __init__(self, keys: Iterable[str], max_contribution: int = 1) -> None:
        if max_contribution < 1:
            raise ValueError("max_contribution must be >= 1")
        self.keys = sorted(set(keys))
        self.delta = max_contribution
        self.counts: Counter[str] = Counter()
        self._used: Counter[str] = Counter()
        self.clamped = 0

    def add(self, unit: str, key: str, amount: int = 1) -> None:
        if key not in self.keys:
            raise KeyError(f"{key!r} is not a published key")
        room = self.delta - self._used[unit]
        take = max(0, min(amount, room))
        self.clamped += amount - take
        if take:
            self._used[unit] += take
            self.counts[key] += take

    def release(self, epsilon: Fraction, ledger: Ledger, rng: Rng | None = None
                ) -> dict[str, int]:
        """Noisy non-negative counts for every key; spends ``epsilon`` first."""
        ledger.spend(Fraction(epsilon))
        rng = rng or secrets.SystemRandom()
        scale = Fraction(self.delta) / Fraction(epsilon)
        return {k: max(0, self.counts[k] + discrete_laplace(scale, rng)) for k in self.keys}


def guarantee(epsilon: Fraction, max_contribution: int, period: str) -> str:
    return (f"Each {period} release is {float(epsilon):g}-differentially private for one "
            f"source address (client or proxy) per {period}: every address adds at most "
            f"{max_contribution} to a histogram, and each count gets discrete Laplace noise "
            f"of scale {max_contribution}/{float(epsilon):g}; releases within a {period} "
            "compose, and the ledger refuses any beyond the configured total.")
