"""When probes follow the connection that raised suspicion: the published delays.

Alice et al. (IMC 2020, §4.3; censors.md §3.2) measured the delay from a
Shadowsocks connection to its first replay: more than 20 % within 1 s, more
than 50 % within 1 minute, more than 75 % within 15 minutes, minimum 0.28 s,
maximum 570 hours. This sampler interpolates log-linearly between those
quantiles, with the tail capped by ``max_s`` (a lab run cannot wait 570 h),
and ``scale`` shrinks every delay so a lab can keep the shape in seconds.
"""

from __future__ import annotations

import math
import random

# (cumulative probability, delay in seconds)
QUANTILES: tuple[tuple[float, float], ...] = (
    (0.0, 0.28), (0.20, 1.0), (0.50, 60.0), (0.75, 900.0), (1.0, 570 * 3600.0))


def sample(rng: random.Random, scale: float = 1.0, max_s: float | None = None) -> float:
    """One delay in seconds, drawn by inverse transform from the quantiles."""
    u = rng.random()
    for (p0, d0), (p1, d1) in zip(QUANTILES, QUANTILES[1:], strict=False):
        if u <= p1:
            frac = (u - p0) / (p1 - p0)
            d = math.exp(math.log(d0) + frac * (math.log(d1) - math.log(d0)))
            break
    d = min(d, max_s) if max_s is not None else d
    return d * scale
