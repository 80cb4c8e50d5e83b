"""SNI matching: the censor's rule (the parser's tests: tests/ptcommon/test_tlshello.py)."""

from __future__ import annotations

import pytest

from censor_sim.detectors import tls


@pytest.mark.parametrize("sni, pattern, mode, hit", [
    ("twitter.com", "twitter.com", "suffix", True),
    ("abs.twimg.com", "twimg.com", "suffix", True),
    ("nottwitter.com", "twitter.com", "suffix", False),
    ("microsoft.com", "t.co", "suffix", False),
    ("microsoft.com", "t.co", "substring", True),  # the TSPU's March 2021 bug
    ("reddit.com", "t.co", "substring", True),  # ... and reddit.com too
    ("example.org", "t.co", "substring", False),
    ("www.twitter.com", "twitter.com", "exact", False),
    ("Twitter.COM.", "twitter.com", "exact", True),
])
def test_sni_match_modes(sni, pattern, mode, hit):
    assert (tls.sni_matches(sni, [pattern], mode) == pattern) is hit
