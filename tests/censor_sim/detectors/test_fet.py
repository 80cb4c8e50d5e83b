"""The FET exemption rules (Wu et al., USENIX Security 2023, Algorithm 1; docs/censors/fet.md §2).

T-FET-1 of docs/censors/fet.md §8.1: every rule pinned on both sides of its threshold,
with payloads built so that only the rule under test changes. Where the
authors' artifact (gfw-report/usenixsecurity23-artifact@04df911) holds a
probe design with *measured* GFW outcomes, the same construction is replayed
here and must give the measured answer. Then the derived numbers of
docs/censors/fet.md §5, and a property-based cross-check of exemption() against
features() and against a deliberately naive re-measurement.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from censor_sim.detectors import fet

# Filler bytes with a known popcount. NP* are not printable ASCII, so they
# leave Ex2–Ex5 alone while Ex1 is being tested; "U" (0x55) is printable with
# popcount 4, so it moves Ex2–Ex4 without moving Ex1.
NP3 = b"\x07"
NP4 = b"\x0f"
NP5 = b"\x1f"
P4 = b"U"

# The authors' default 50-byte random payload (artifacts/test-printable-prefixes/
# generate_test_probes.py and test-protocol-fingerprints/generate_fingerprints.py).
AUTHORS_PAYLOAD = bytes.fromhex(
    "dadd034913c52da75fd9f05dc76803917134808efed97ef8884f2151b712f60f"
    "ed634f609f132033a15b77ed3ccaa2d20f5b")

RULES = ("ex1", "ex2", "ex3", "ex4", "ex5")


def _printable(b: int) -> bool:
    return 0x20 <= b <= 0x7E


def naive_features(data: bytes) -> fet.FetFeatures:
    """Algorithm 1's quantities measured the slow, obvious way (one loop per quantity),
    independent of the module's translate/bit_count tricks."""
    n = len(data)
    lead = 0
    while lead < n and _printable(data[lead]):
        lead += 1
    longest = run = 0
    for b in data:
        run = run + 1 if _printable(b) else 0
        longest = max(longest, run)
    proto = None
    if len(data) >= 3 and data[0] in (0x16, 0x17) and data[1] == 3 and data[2] <= 9:
        proto = "tls"
    elif any(data.startswith(p) for p in (b"GET ", b"PUT ", b"POST ", b"HEAD ")):
        proto = "http"
    return fet.FetFeatures(n, sum(bin(b).count("1") for b in data) / n, lead,
                           sum(map(_printable, data)) / n, longest, proto)


def rule_from_features(f: fet.FetFeatures) -> str | None:
    """Algorithm 1 restated from the paper's wording over the measured quantities."""
    if f.popcount_per_byte <= 3.4 or f.popcount_per_byte >= 4.6:
        return "ex1"
    if f.leading_printable >= 6:
        return "ex2"
    if f.printable_fraction > 0.5:
        return "ex3"
    if f.longest_printable_run > 20:
        return "ex4"
    if f.protocol is not None:
        return "ex5"
    return None


def assert_only(payload: bytes, rule: str | None) -> None:
    """`payload` is exempted by exactly `rule` (or by nothing), no other rule holding,
    so a vector really tests the threshold it is named after."""
    f = fet.features(payload)
    held = {
        "ex1": f.popcount_per_byte <= 3.4 or f.popcount_per_byte >= 4.6,
        "ex2": f.leading_printable >= 6,
        "ex3": f.printable_fraction > 0.5,
        "ex4": f.longest_printable_run > 20,
        "ex5": f.protocol is not None,
    }
    assert {r for r, h in held.items() if h} == ({rule} if rule else set()), (rule, f)
    assert fet.exemption(payload) == rule


# -- T-FET-1: each rule on both sides of its threshold -------------------------------


def test_ex1_popcount_3_40_and_4_60_are_exempt_3_42_and_4_58_are_not():
    # 50 bytes: 170 set bits is 3.40 per byte, 171 is 3.42; 229 is 4.58, 230 is 4.60.
    assert_only(NP4 * 20 + NP3 * 30, "ex1")   # 3.40 exactly: exempt (<=)
    assert_only(NP4 * 21 + NP3 * 29, None)    # 3.42
    assert_only(NP4 * 21 + NP5 * 29, None)    # 4.58
    assert_only(NP4 * 20 + NP5 * 30, "ex1")   # 4.60 exactly: exempt (>=)


def test_ex1_thresholds_are_exact_at_every_length():
    """3.4·n and 4.6·n set bits are exempt and one bit inside is not, for every length
    where those are whole numbers. Division-based float code happens to get this
    right too, but e.g. ``bits * (1 / n) <= 3.4`` fails at 68 of these lengths
    (5, 10, 20, 40, …); the module compares integers and so cannot."""
    for n in range(5, 1501, 5):
        k = 2 * n // 5                      # k × popcount-4 + (n−k) × popcount-3 = 3.4·n
        assert fet.exemption(NP4 * k + NP3 * (n - k)) == "ex1", n
        assert fet.exemption(NP4 * (k + 1) + NP3 * (n - k - 1)) is None, n
        k = 3 * n // 5                      # k × popcount-5 + (n−k) × popcount-4 = 4.6·n
        assert fet.exemption(NP5 * k + NP4 * (n - k)) == "ex1", n
        assert fet.exemption(NP5 * (k - 1) + NP4 * (n - k + 1)) is None, n


def test_popcount_sweep_like_the_authors_experiment():
    """artifacts/test-entropy/pops.py: 50-byte payloads with i of 400 bits set, shuffled.
    The measured GFW outcome (pop-results.out, 2023-02-16) was blocked strictly
    inside (3.4, 4.6) bits per byte, except payloads another rule exempts."""
    rng = random.Random(20230216)
    for ones in range(400):
        bits = ["1"] * ones + ["0"] * (400 - ones)
        rng.shuffle(bits)
        payload = int("".join(bits), 2).to_bytes(50, "big")
        rule = fet.exemption(payload)
        if 170 < ones < 230:
            assert rule != "ex1", ones
        else:
            assert rule == "ex1", ones


def test_ex2_five_vs_six_leading_printable():
    body = NP4 * 60
    assert_only(P4 * 5 + body, None)
    assert_only(P4 * 6 + body, "ex2")
    # Shorter than six bytes, Ex2 cannot hold: five printable bytes are exempt by Ex3.
    assert fet.exemption(P4 * 5) == "ex3"
    assert fet.features(P4 * 5).leading_printable == 5


def test_ex2_prefix_probes_like_the_authors_experiment():
    """artifacts/test-printable-prefixes: a byte repeated 5 or 6 times, then the default
    payload. Six printable bytes exempt; five, or six unprintable ones, do not."""
    for b in range(256):
        five, six = bytes([b]) * 5 + AUTHORS_PAYLOAD, bytes([b]) * 6 + AUTHORS_PAYLOAD
        assert fet.exemption(five) is None, hex(b)
        assert fet.exemption(six) == ("ex2" if _printable(b) else None), hex(b)


def test_ex3_50_percent_is_not_exempt_51_percent_is():
    half = (NP4 + P4) * 50                        # 50 of 100, longest run 1
    assert fet.features(half).printable_fraction == 0.5
    assert_only(half, None)
    more = (NP4 + P4) * 49 + P4 * 2               # 51 of 100, longest run 3
    assert fet.features(more).printable_fraction == 0.51
    assert_only(more, "ex3")


def test_printable_fraction_sweep_like_the_authors_experiment():
    """artifacts/test-printable-fraction: n random printable and 100−n random unprintable
    bytes, shuffled; all 100 measured outcomes (2023-03-08) matched Algorithm 1."""
    rng = random.Random(20230308)
    printable = [b for b in range(256) if _printable(b)]
    unprintable = [b for b in range(256) if not _printable(b)]
    for n in range(101):
        data = rng.choices(printable, k=n) + rng.choices(unprintable, k=100 - n)
        rng.shuffle(data)
        rule = fet.exemption(bytes(data))
        if n > 50:
            assert rule in ("ex1", "ex2", "ex3"), n   # Ex3 holds; an earlier rule may too
        else:
            assert rule != "ex3", n


def test_ex4_run_of_20_is_not_exempt_21_is():
    filler = NP4 * 30
    assert_only(filler + P4 * 20 + filler, None)
    assert_only(filler + P4 * 21 + filler, "ex4")


def test_ex4_longest_run_probes_match_the_measured_outcome():
    """artifacts/test-printable-longest-run: ``e8``×10, ``4b``×n, ``e8``×(90−n) (all
    popcount 4). Measured 2023-02-14 (printable-results.out): blocked for n ≤ 20,
    never blocked for n ≥ 21."""
    for n in range(91):
        rule = fet.exemption(b"\xe8" * 10 + b"K" * n + b"\xe8" * (90 - n))
        assert (rule is None) == (n <= 20), n
        if 21 <= n <= 50:
            assert rule == "ex4", n
        elif n > 50:
            assert rule == "ex3", n                   # more than half printable comes first


def test_ex5_tls_third_byte_follows_the_paper():
    """The paper: ``[\\x16-\\x17]\\x03[\\x00-\\x09]``. The authors' detect.py accepts
    up to 0x0f (despite its own comment); OpenGFW stops at 0x09, as we do."""
    body = NP4 * 60
    assert_only(b"\x16\x03\x09" + body, "ex5")
    assert_only(b"\x16\x03\x0a" + body, None)           # detect.py would exempt this
    assert_only(b"\x17\x03\x00" + body, "ex5")
    assert_only(b"\x16\x03\x0f" + body, None)           # …and this
    for other in (b"\x15\x03\x01", b"\x18\x03\x01", b"\x16\x02\x01", b"\x16\x04\x01"):
        assert_only(other + body, None)
    assert fet.exemption(b"\x16\x03") == "ex1"          # too short for Ex5; Ex1 anyway


def test_ex5_tls_probe_grid_like_the_authors_experiment():
    """artifacts/test-protocol-fingerprints: ``{15,16,17} 03 {00..0f}`` + default payload."""
    for first in (0x15, 0x16, 0x17):
        for third in range(0x10):
            rule = fet.exemption(bytes([first, 0x03, third]) + AUTHORS_PAYLOAD)
            expected = "ex5" if first != 0x15 and third <= 0x09 else None
            assert rule == expected, (hex(first), hex(third))


def test_ex5_http_prefixes_need_the_space():
    body = NP4 * 60
    for prefix in (b"GET ", b"PUT ", b"POST ", b"HEAD "):
        assert_only(prefix + body, "ex5")
    for near_miss in (b"GET", b"GET\t", b"get ", b"Get ", b" GET ", b"POST", b"HEAD"):
        assert_only(near_miss + body, None)
    # OpenGFW exempts these three-letter verb prefixes too; the paper does not.
    for opengfw_only in (b"DEL", b"CON", b"OPT", b"TRA", b"PAT", b"HEA", b"POS"):
        assert_only(opengfw_only + body, None)


def test_ex5_http_probe_grid_like_the_authors_experiment():
    """artifacts/test-protocol-fingerprints: each verb, then every possible next byte,
    then the default payload: exempt exactly when the next byte is a space."""
    for verb in (b"GET", b"PUT", b"POST", b"HEAD"):
        for b in range(256):
            rule = fet.exemption(verb + bytes([b]) + AUTHORS_PAYLOAD)
            assert rule == ("ex5" if b == 0x20 else None), (verb, hex(b))


def test_rules_are_reported_in_order():
    # "GET " + 100 printable bytes holds Ex2, Ex3, Ex4 and Ex5; Ex1 ("U" is popcount 4,
    # "GET " pulls the mean to 3.95) does not: the first holding rule is reported.
    assert fet.exemption(b"GET " + P4 * 100) == "ex2"
    assert fet.exemption(b"\x16\x03\x01" + P4 * 100) == "ex3"


# -- T-FET-1: the 40 repeated-byte patterns ---------------------------------------------


@pytest.mark.parametrize("repeat", [50, 100])
def test_forty_single_byte_patterns_are_not_exempt_all_with_popcount_4(repeat):
    """docs/censors/fet.md §5.1; measured too (artifacts/test-entropy/test-entropy.out, 2023-02-13,
    50 repetitions): 40 of 256 patterns blocked. They are exactly the 70 popcount-4
    bytes minus the 30 printable ones (Ex2–Ex4 exempt those)."""
    blocked = {b for b in range(256) if fet.exemption(bytes([b]) * repeat) is None}
    assert len(blocked) == 40
    assert all(b.bit_count() == 4 for b in blocked)
    assert blocked == {b for b in range(256) if b.bit_count() == 4 and not _printable(b)}


def test_first_packet_of_one_byte():
    # docs/censors/fet.md §2.2: "\x21" then 200 random bytes in a second packet was never blocked:
    # only the first packet counts, and one byte of popcount 2 is exempt by Ex1.
    assert fet.exemption(b"\x21") == "ex1"


def test_every_one_and_two_byte_payload():
    """Exhaustive at lengths 1 and 2, against counting by (popcount, printable) class:
    Ex2, Ex4 and Ex5 cannot hold, so a payload is not exempt iff its bits lie strictly
    inside (3.4·L, 4.6·L) and at most half its bytes are printable."""
    classes = Counter((b.bit_count(), _printable(b)) for b in range(256))
    assert sum(fet.exemption(bytes([b])) is None for b in range(256)) == 40
    expected = sum(ca * cb for (pa, qa), ca in classes.items() for (pb, qb), cb in classes.items()
                   if 6.8 < pa + pb < 9.2 and qa + qb <= 1)
    assert expected == 30178  # P = 0.46048, as an exact dynamic programme also gives
    got = sum(fet.exemption(bytes([a, b])) is None for a in range(256) for b in range(256))
    assert got == expected


# -- derived numbers (docs/censors/fet.md §5) ----------------------------------------------


def test_authors_default_payload_is_not_exempt():
    """docs/censors/fet.md §5.3: popcount/len 4.10, no leading printable byte, longest run 3,
    printable fraction 0.40: not exempt (detect.py agrees)."""
    f = fet.features(AUTHORS_PAYLOAD)
    assert (f.length, f.leading_printable, f.longest_printable_run, f.protocol) == (50, 0, 3, None)
    assert f.popcount_per_byte == 4.1 and f.printable_fraction == 0.4
    assert fet.exemption(AUTHORS_PAYLOAD) is None
    assert fet.exemption(bytes(50)) == "ex1"       # the authors' all-zero control payload


# P(not exempt) for uniformly random payloads of length L: docs/censors/fet.md §5.2 (20,000-sample
# Monte Carlo) and exact values from a dynamic programme over (popcount, printable count,
# leading printable) that ignores Ex4/Ex5 (each below 1e-5 here); for L=200, where Ex1 is
# below 1e-8 too, from binomial tails: P(≤100 printable) − (95/256)^6·P(≤94 of the other 194).
RANDOM_RATES = [(8, 0.641, 0.638023), (16, 0.823, 0.820159), (32, 0.940, 0.937096),
                (50, 0.972, 0.972306), (100, 0.994, 0.994249), (200, 0.997, 0.997313)]


@pytest.mark.parametrize("length, table, exact", RANDOM_RATES)
def test_random_payload_exemption_rates_match_the_derived_table(length, table, exact):
    rng = random.Random(1000 + length)
    n = 4000
    rate = sum(fet.exemption(rng.randbytes(length)) is None for _ in range(n)) / n
    for p in (table, exact):
        band = 4 * math.sqrt(p * (1 - p) / n)
        assert abs(rate - p) <= band, (length, rate, p, band)


def test_blocking_constants_and_the_geometric_facts():
    """docs/censors/fet.md §3.1, §3.2 (p = 26.3 %, residual 120 or 180 s) and §5.4 (geometric)."""
    p = fet.P_BLOCK
    assert p == 0.263 and fet.RESIDUAL_CHOICES_S == (120, 180)
    assert round(1 - (1 - p) ** 5, 3) == 0.783
    assert round(1 - (1 - p) ** 10, 3) == 0.953
    assert round(1 - (1 - p) ** 25, 4) == 0.9995
    assert round(1 / p, 2) == 3.80


# -- features, errors, fuzz -------------------------------------------------------------


def test_empty_payload_is_an_error():
    with pytest.raises(ValueError):
        fet.exemption(b"")
    with pytest.raises(ValueError):
        fet.features(b"")


def test_features_json_and_longest_run_edges():
    f = fet.features(b"\x16\x03\x01" + AUTHORS_PAYLOAD)
    assert f.protocol == "tls"
    assert json.loads(json.dumps(f.to_json())) == f.to_json()
    assert set(f.to_json()) == {"length", "popcount_per_byte", "leading_printable",
                                "printable_fraction", "longest_printable_run", "protocol"}
    with pytest.raises(AttributeError):
        f.length = 1  # type: ignore[misc]  # frozen: evidence is immutable
    # The longest-run search gallops in powers of two: check around each boundary.
    for run in range(0, 70):
        data = NP4 + P4 * run + NP4 + P4 * (run // 2)
        assert fet.features(data).longest_printable_run == run
        assert fet.features(P4 * run + NP4).leading_printable == run
    assert fet.features(P4 * 64).longest_printable_run == 64


def test_random_1000_byte_payloads_sanity():
    # Throughput is a benchmark concern (benchmarks/censor.py); here only that a batch
    # of MTU-sized random payloads classifies as docs/censors/fet.md §5.2 says
    # (P(not exempt) ≈ 0.997).
    rng = random.Random(7)
    verdicts = Counter(fet.exemption(rng.randbytes(1000)) for _ in range(2000))
    assert verdicts[None] >= 1970 and set(verdicts) <= {None, "ex2", "ex3"}


# Payloads near the thresholds: bytes drawn from a small alphabet mixing popcounts and
# printability, behind an optional prefix that exercises Ex2 and Ex5 edges.
_NEAR = st.builds(
    lambda prefix, body: prefix + bytes(body),
    st.sampled_from([b"", b"GET ", b"GET", b"POST ", b"\x16\x03\x09", b"\x16\x03\x0a",
                     b"\x17\x03\x00", P4 * 5, P4 * 6]),
    st.lists(st.sampled_from([0x07, 0x0F, 0x1F, 0x3F, 0x01, 0xE8, 0x55, 0x4B, 0x20, 0x7E,
                              0x7F, 0xFF, 0x00]), min_size=1, max_size=120),
)


@settings(max_examples=300, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(min_size=1, max_size=600), _NEAR))
def test_fuzz_exemption_agrees_with_features_and_a_naive_measurement(data):
    rule = fet.exemption(data)
    assert rule is None or rule in RULES
    f = fet.features(data)
    assert f == naive_features(data)
    assert rule_from_features(f) == rule
    # The censor's one-pass judge gives the same rule, and the same features
    # whenever no rule exempts the payload.
    judged, feats = fet.judge(data)
    assert judged == rule
    assert feats == (f if rule is None else None)
