"""HashDrbg (cumulative SipHash-2-4) and the Go math/rand mirror."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from siphash24 import siphash24

from transports.common.drbg import SEED_LENGTH, DrbgSeed, HashDrbg, Rand

# jmwample/ptrs crates/obfs4/src/common/drbg.rs::sample_compat_compare: Int63 outputs
# of Go's HashDrbg (docs/transports/obfs4.md §9). They match only the cumulative form.
GO_INT63_VECTORS = [
    ("000000000000000000000000000000000000000000000000",
     [7432626515892259304, 5773523046280711756, 4537542203639783680]),
    ("0c10867722204c856e78315d669449dcb6e66f2fe5247a80",
     [9059004827137905928, 6853924365612632173, 1485252377529977150]),
    ("ddbb886aefbe2a65c2509dfc3bb0932c5e881965afca80a0",
     [3952461850862704951, 6715353867928838006, 5560038622741453571]),
    ("e691b1eaa81018e8b16bbf84d71f3ba0c5f965bace2da7cc",
     [8251725530906761037, 5718043109939568014, 7585544303175018394]),
]


@pytest.mark.parametrize(("seed_hex", "expected"), GO_INT63_VECTORS)
def test_go_compat_int63(seed_hex, expected):
    drbg = HashDrbg(DrbgSeed.from_hex(seed_hex))
    assert [drbg.int63() for _ in expected] == expected


def _reference_blocks(seed: bytes, n: int) -> list[bytes]:
    """Block k = SipHash(K, block_0 | ... | block_{k-1}), rehashing the whole history."""
    history = seed[16:]
    out = []
    for _ in range(n):
        block = siphash24(history, key=seed[:16]).digest()
        out.append(block)
        history += block
    return out


@given(st.binary(min_size=SEED_LENGTH, max_size=SEED_LENGTH))
def test_streaming_equals_cumulative_rehash(seed):
    drbg = HashDrbg(seed)
    assert [drbg.next_block() for _ in range(20)] == _reference_blocks(seed, 20)


def test_not_the_naive_ofb_of_the_spec():
    seed = bytes.fromhex(GO_INT63_VECTORS[1][0])
    drbg = HashDrbg(seed)
    first, second = drbg.next_block(), drbg.next_block()
    assert second != siphash24(first, key=seed[:16]).digest()


def test_int63_uint64_and_masks_views_of_the_same_blocks():
    seed = bytes(range(24))
    blocks = _reference_blocks(seed, 6)
    a, b, c = HashDrbg(seed), HashDrbg(seed), HashDrbg(seed)
    assert [a.uint64() for _ in range(6)] == [int.from_bytes(x, "big") for x in blocks]
    assert [b.int63() for _ in range(6)] == [int.from_bytes(x, "big") & (2**63 - 1)
                                             for x in blocks]
    masks = [int.from_bytes(x[:2], "big") for x in blocks]
    assert c.length_masks(3) + [c.length_mask() for _ in range(3)] == masks


def test_seed_parsing():
    raw = bytes(range(24))
    seed = DrbgSeed(raw)
    assert seed == raw and seed.key == raw[:16] and seed.iv == raw[16:]
    assert DrbgSeed.from_hex(seed.hex()) == seed
    assert DrbgSeed(raw + b"extra") == raw  # Go's SeedFromBytes truncates
    with pytest.raises(ValueError):
        DrbgSeed(raw[:23])
    with pytest.raises(ValueError):
        DrbgSeed.from_hex("zz" * 24)
    fresh = DrbgSeed.new()
    assert len(fresh) == SEED_LENGTH and fresh != DrbgSeed.new()


class _Scripted:
    """A Source returning fixed Int63 values, to pin down Go's algorithms."""

    def __init__(self, values):
        self.values = list(values)

    def int63(self):
        return self.values.pop(0)


def test_rand_int31n_rejection_and_power_of_two():
    # Int31 = Int63 >> 32. For n=3, Go rejects Int31 > 2**31 - 1 - (2**31 % 3) = 2147483645.
    rejected = 2147483646 << 32
    accepted = 2147483645 << 32
    rng = Rand(_Scripted([rejected, accepted]))
    assert rng.int31n(3) == 2147483645 % 3
    rng = Rand(_Scripted([(0x7FFFFFFF << 32) | 0xFFFFFFFF]))
    assert rng.intn(64) == 63  # a mask, no rejection
    with pytest.raises(ValueError):
        rng.intn(0)


def test_rand_intn_large_uses_int63n():
    rng = Rand(_Scripted([12345678901234]))
    assert rng.intn(2**40 + 3) == 12345678901234 % (2**40 + 3)


def test_rand_float64_resamples_one():
    rng = Rand(_Scripted([2**63 - 1, 2**62]))  # the first rounds to exactly 1.0
    assert rng.float64() == 0.5


def test_rand_perm_matches_go_inside_out_shuffle():
    # With every Intn returning 0, Go's Perm(3) is [2, 0, 1].
    assert Rand(_Scripted([0] * 3)).perm(3) == [2, 0, 1]
    rng = Rand(HashDrbg(bytes(24)))
    p = rng.perm(1449)
    assert sorted(p) == list(range(1449))


def test_rand_close_delay_is_deterministic_per_seed():
    # obfs4proxy's probe close delay is rand.New(HashDrbg(drbg-seed)).Intn(60).
    seed = bytes.fromhex(GO_INT63_VECTORS[2][0])
    first = Rand(HashDrbg(seed)).intn(60)
    assert first == Rand(HashDrbg(seed)).intn(60)
    assert 0 <= first < 60
    # No rejection is possible here unless Int31 is in the top 8 values.
    assert first == (GO_INT63_VECTORS[2][1][0] >> 32) % 60
