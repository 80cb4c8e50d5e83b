import random

from censor_sim.prober import delays


def test_quantiles_match_the_published_ones():
    rng = random.Random(4)
    xs = sorted(delays.sample(rng) for _ in range(4000))
    frac = lambda s: sum(x <= s for x in xs) / len(xs)  # noqa: E731
    assert min(xs) >= 0.28
    assert 0.17 <= frac(1.0) <= 0.23
    assert 0.47 <= frac(60.0) <= 0.53
    assert 0.72 <= frac(900.0) <= 0.78


def test_scale_and_cap():
    rng = random.Random(1)
    assert all(delays.sample(rng, scale=0.01, max_s=60) <= 0.6 for _ in range(500))
