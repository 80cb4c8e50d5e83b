"""When probes follow the connection that raised suspicion: the published delays.

Alice et al. (IMC 2020, §4.3; docs/censors/probing.md §2.4) measured the delay from a
Shadowsocks connection to its first replay: more than 20 % within 1 s, more
than 50 % within 1 minute, more than 75 % within 15 minutes, minimum 0.28 s,
maximum 570 hours. The paper gives only these points, so the sampler is the
piecewise CDF through them, read as equalities ("more than 20 %" → 20 %, the
slowest distribution the statement allows), interpolated linearly in log-delay
between points because the delays span six orders of magnitude.

Two knobs make it usable in a lab: ``max_s`` caps the tail (a run cannot wait
570 h; the cap applies to the *published* delay, before scaling), and ``scale``
shrinks every delay so a lab keeps the shape in seconds (0.01: 1 s becomes
10 ms, the 15-minute quantile 9 s). Sampling takes a ``random.Random`` so that
a seeded run draws the same delays every time.
"""

from __future__ import annotations

import math
import random

MIN_S = 0.28
MAX_S = 570 * 3600.0

# (cumulative probability, delay in seconds), strictly increasing in both.
QUANTILES: tuple[tuple[float, float], ...] = (
    (0.0, MIN_S), (0.20, 1.0), (0.50, 60.0), (0.75, 900.0), (1.0, MAX_S))


def quantile(u: float) -> float:
    """The published-distribution delay at cumulative probability ``u`` in [0, 1]."""
    if not 0.0 <= u <= 1.0:
        raise ValueError(f"probability out of [0, 1]: {u!r}")
    for (p0, d0), (p1, d1) in zip(QUANTILES, QUANTILES[1:], strict=False):
        if u <= p1:
            frac = (u - p0) / (p1 - p0)
            return math.exp(math.log(d0) + frac * (math.log(d1) - math.log(d0)))
    return QUANTILES[-1][1]  # unreachable: u <= 1.0 == the last p


def cdf(delay_s: float) -> float:
    """P(first replay delay <= ``delay_s``) under the same piecewise model."""
    if delay_s < MIN_S:
        return 0.0
    for (p0, d0), (p1, d1) in zip(QUANTILES, QUANTILES[1:], strict=False):
        if delay_s <= d1:
            return p0 + (p1 - p0) * (math.log(delay_s / d0) / math.log(d1 / d0))
    return 1.0


def sample(rng: random.Random, scale: float = 1.0, max_s: float | None = None) -> float:
    """One delay in seconds by inverse transform: ``min(quantile(U), max_s) * scale``.

    With ``scale=1`` and no cap the result is in [0.28 s, 570 h].
    """
    if not scale > 0:
        raise ValueError(f"scale must be positive: {scale!r}")
    if max_s is not None and not max_s > 0:
        raise ValueError(f"max_s must be positive: {max_s!r}")
    d = quantile(rng.random())
    if max_s is not None:
        d = min(d, max_s)
    return d * scale
