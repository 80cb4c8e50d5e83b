"""The entropy-distribution and length test on a flow's first client message.

Wang et al. (CCS 2015) flag obfs3/obfs4 by asking whether the first
client→server payload looks uniformly random. Their published scripts
(liangw89/obfs-detection, ``entropy.py``) fix the construction this module
follows:

* the message is the first client→server packet with payload, cut to its
  first **2048** bytes, and it is only tested when at least **149** bytes long
  (the scripts' constant; obfs4's shortest client hello is 141 bytes, so about
  one obfs4 hello in 1,000 is too short to be tested);
* it is split into non-overlapping **8-byte** blocks, and the plug-in Shannon
  entropy of each block is computed;
* that sample is compared with block entropies of random bytes by a
  two-sample **Kolmogorov-Smirnov** test, and the flow is flagged when the
  p-value is **at least 0.1** (it is *not* distinguishable from random).

Their reference sample was ``os.urandom(2**22)``; here it is the exact
distribution (:func:`censor_sim.detectors.stats.block_entropy_distribution`),
the limit of that sample, so the test is deterministic. With a reference
that large the two-sample statistic's null distribution is the one-sample
one, and the p-value is Kolmogorov's asymptotic series, as scipy's
``ks_2samp`` computes it for large samples. Because block entropies are
discrete, the test is conservative: random messages score p-values above
uniform, which is why the paper's TPR is 1.0 rather than 0.9.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import asdict, dataclass
from typing import Any

from ..stats import block_entropy, block_entropy_distribution

MIN_LENGTH = 149
BYTES_USED = 2048
BLOCK = 8
P_THRESHOLD = 0.1


@dataclass(frozen=True)
class EntropyVerdict:
    """What the test concluded about one message."""

    length: int
    tested: bool  # long enough to test
    blocks: int
    ks_d: float
    p_value: float
    random_looking: bool  # flagged

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def kolmogorov_sf(x: float) -> float:
    """P(K > x) for Kolmogorov's limiting distribution: 2·Σ (-1)^(k-1)·exp(-2k²x²)."""
    if x <= 0.0:
        return 1.0
    if x < 0.18:  # the series converges slowly here, and the value is 1 to 1e-15
        return 1.0
    total = 0.0
    for k in range(1, 101):
        term = math.exp(-2.0 * k * k * x * x)
        total += term if k % 2 else -term
        if term < 1e-17:
            break
    return min(max(2.0 * total, 0.0), 1.0)


def ks_statistic(sample: list[float], block: int = BLOCK) -> float:
    """sup |F_n - F| between the sample's ECDF and random blocks' exact CDF.

    Both are step functions that jump only at the support points (every
    sample value is one, see the module docstring), so comparing just after
    each support point, and just before the first, is exact.
    """
    if not sample:
        raise ValueError("empty sample")
    dist = block_entropy_distribution(block)
    ordered = sorted(sample)
    n = len(ordered)
    d = 0.0
    cdf = 0.0
    for h, p in dist:
        below = bisect_right(ordered, h - 1e-12) / n
        d = max(d, abs(below - cdf))
        cdf += p
        d = max(d, abs(bisect_right(ordered, h + 1e-12) / n - cdf))
    return d


def test_message(payload: bytes, *, min_length: int = MIN_LENGTH,
                 bytes_used: int = BYTES_USED, block: int = BLOCK,
                 p_threshold: float = P_THRESHOLD) -> EntropyVerdict:
    """Apply the length rule and the entropy-distribution test to one message."""
    data = payload[:bytes_used]
    if len(data) < max(min_length, block):
        return EntropyVerdict(len(payload), False, 0, 0.0, 0.0, False)
    sample = block_entropy(data, block)
    d = ks_statistic(sample, block)
    p = kolmogorov_sf(math.sqrt(len(sample)) * d)
    return EntropyVerdict(len(payload), True, len(sample), d, p, p >= p_threshold)


# A detector, not a pytest test (pytest would collect it where a test imports it).
test_message.__test__ = False  # type: ignore[attr-defined]  # pytest reads a function's attribute
