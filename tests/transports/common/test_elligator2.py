"""Elligator2 keys: the published direct-map vectors, plus independent pure-Python checks.

The 14 vectors are Monocypher's (tis-ci-vectors.h) as used by
edwards25519-extra's elligator2_test.go, which obfs4proxy 0.0.14 decodes with.
No fixed vectors exist for obfs4proxy's key generation (the dirty point and the
inverse map), so those are checked against a slow, independent edwards25519
implementation written here from the curve equations.
"""

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base

from transports.common import elligator2
from transports.common.elligator2 import (
    Keypair,
    new_keypair,
    public_key_from_private,
    representative_to_public,
)

P = 2**255 - 19
A = 486662
D = -121665 * pow(121666, -1, P) % P
L = 2**252 + 27742317777372353535851937790883648493  # prime order of the base point

# (representative, u): Monocypher tis-ci-vectors.h via edwards25519-extra.
DIRECT_MAP_VECTORS = [
    ("0000000000000000000000000000000000000000000000000000000000000000",
     "0000000000000000000000000000000000000000000000000000000000000000"),
    ("0000000000000000000000000000000000000000000000000000000000000040",
     "0000000000000000000000000000000000000000000000000000000000000000"),
    ("0000000000000000000000000000000000000000000000000000000000000080",
     "0000000000000000000000000000000000000000000000000000000000000000"),
    ("00000000000000000000000000000000000000000000000000000000000000c0",
     "0000000000000000000000000000000000000000000000000000000000000000"),
    ("673a505e107189ee54ca93310ac42e4545e9e59050aaac6f8b5f64295c8ec02f",
     "242ae39ef158ed60f20b89396d7d7eef5374aba15dc312a6aea6d1e57cacf85e"),
    ("922688fa428d42bc1fa8806998fbc5959ae801817e85a42a45e8ec25a0d7545a",
     "696f341266c64bcfa7afa834f8c34b2730be11c932e08474d1a22f26ed82410b"),
    ("0d3b0eb88b74ed13d5f6a130e03c4ad607817057dc227152827c0506a538bbba",
     "0b00df174d9fb0b6ee584d2cf05613130bad18875268c38b377e86dfefef177f"),
    ("01a3ea5658f4e00622eeacf724e0bd82068992fae66ed2b04a8599be16662ef5",
     "7ae4c58bc647b5646c9f5ae4c2554ccbf7c6e428e7b242a574a5a9c293c21f7e"),
    ("69599ab5a829c3e9515128d368da7354a8b69fcee4e34d0a668b783b6cae550f",
     "09024abaaef243e3b69366397e8dfc1fdc14a0ecc7cf497cbe4f328839acce69"),
    ("9172922f96d2fa41ea0daf961857056f1656ab8406db80eaeae76af58f8c9f50",
     "beab745a2a4b4e7f1a7335c3ffcdbd85139f3a72b667a01ee3e3ae0e530b3372"),
    ("6850a20ac5b6d2fa7af7042ad5be234d3311b9fb303753dd2b610bd566983281",
     "1287388eb2beeff706edb9cf4fcfdd35757f22541b61528570b86e8915be1530"),
    ("84417826c0e80af7cb25a73af1ba87594ff7048a26248b5757e52f2824e068f1",
     "51acd2e8910e7d28b4993db7e97e2b995005f26736f60dcdde94bdf8cb542251"),
    ("b0fbe152849f49034d2fa00ccc7b960fad7b30b6c4f9f2713eb01c147146ad31",
     "98508bb3590886af3be523b61c3d0ce6490bb8b27029878caec57e4c750f993d"),
    ("a0ca9ff75afae65598630b3b93560834c7f4dd29a557aa29c7becd49aeef3753",
     "3c5fad0516bb8ec53da1c16e910c23f792b971c7e2a0ee57d57c32e3655a646b"),
]

# obfs4proxy's order-8 point (x25519ell2.go feLopX / feLopY).
T8 = (
    int.from_bytes(bytes.fromhex(
        "4ad145c54646a1de38e2e513703c195cbb4ade38329933e9284a3906a0b9d51f"), "little"),
    int.from_bytes(bytes.fromhex(
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"), "little"),
)


# --- a slow, independent edwards25519 / Curve25519 model --------------------------------


def ed_add(p1, p2):
    (x1, y1), (x2, y2) = p1, p2
    t = D * x1 * x2 * y1 * y2
    return ((x1 * y2 + x2 * y1) * pow(1 + t, -1, P) % P,
            (y1 * y2 + x1 * x2) * pow(1 - t, -1, P) % P)


def ed_mul(k, point):
    acc, addend = (0, 1), point
    while k:
        if k & 1:
            acc = ed_add(acc, addend)
        addend = ed_add(addend, addend)
        k >>= 1
    return acc


def on_edwards(point):
    x, y = point
    return (-x * x + y * y - 1 - D * x * x * y * y) % P == 0


def base_point():
    y = 4 * pow(5, -1, P) % P
    xx = (y * y - 1) * pow(D * y * y + 1, -1, P) % P
    x = pow(xx, (P + 3) // 8, P)
    if x * x % P != xx:
        x = x * pow(2, (P - 1) // 4, P) % P
    return (P - x if x & 1 else x, y)


def clamp(k: bytes) -> int:
    n = bytearray(k)
    n[0] &= 248
    n[31] &= 127
    n[31] |= 64
    return int.from_bytes(n, "little")


def edwards_to_u(point):
    _, y = point
    return 0 if y == 1 else (1 + y) * pow(1 - y, -1, P) % P


def montgomery_ladder_u(k: int, u: int) -> int:
    """RFC 7748 x-only ladder without clamping; the point at infinity comes out as 0."""
    x1, x2, z2, x3, z3, swap = u, 1, 0, u, 1, 0
    for t in reversed(range(k.bit_length())):
        bit = (k >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = x2 + z2, x2 - z2
        aa, bb = a * a % P, b * b % P
        e = aa - bb
        c, d = x3 + z3, x3 - z3
        da, cb = d * a % P, c * b % P
        x3, z3 = (da + cb) ** 2 % P, x1 * (da - cb) ** 2 % P
        x2, z2 = aa * bb % P, e * (aa + 121665 * e) % P
    if swap:
        x2, z2 = x3, z3
    return x2 * pow(z2, P - 2, P) % P


def is_square(a: int) -> bool:
    return pow(a % P, (P - 1) // 2, P) in (0, 1)


def counter_rng(seed: bytes):
    """A deterministic rng for new_keypair that never repeats itself."""
    state = {"n": 0}

    def rng(n: int) -> bytes:
        state["n"] += 1
        return hashlib.sha256(seed + state["n"].to_bytes(8, "little")).digest()[:n]

    return rng


# --- tests --------------------------------------------------------------------------------


@pytest.mark.parametrize(("representative", "expected"), DIRECT_MAP_VECTORS)
def test_direct_map_vectors(representative, expected):
    assert representative_to_public(bytes.fromhex(representative)).hex() == expected


def test_t8_is_a_point_of_order_8():
    assert on_edwards(T8)
    assert ed_mul(4, T8) != (0, 1)
    assert ed_mul(8, T8) == (0, 1)


def test_clean_public_key_matches_independent_model():
    priv = bytes(range(32))
    assert public_key_from_private(priv) == crypto_scalarmult_base(priv)
    assert edwards_to_u(ed_mul(clamp(priv), base_point())).to_bytes(32, "little") == (
        public_key_from_private(priv))


@settings(max_examples=25, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_dirty_public_key_matches_independent_model(seed):
    """public = u(clamp(sk)·B + (sk[0] mod 8)·T8), computed here without libsodium."""
    kp = new_keypair(elligator=True, rng=counter_rng(seed))
    point = ed_add(ed_mul(clamp(kp.private), base_point()), ed_mul(kp.private[0] & 7, T8))
    assert on_edwards(point)
    assert edwards_to_u(point).to_bytes(32, "little") == kp.public


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_representative_round_trip_and_dh_agreement(seed):
    kp = new_keypair(elligator=True, rng=counter_rng(seed))
    assert kp.representative is not None and len(kp.representative) == 32
    assert representative_to_public(kp.representative) == kp.public
    # The low-order component vanishes in X25519: dirty and clean keys agree.
    other = hashlib.sha256(seed).digest()
    clean = crypto_scalarmult_base(kp.private)
    assert crypto_scalarmult(other, kp.public) == crypto_scalarmult(other, clean)
    assert crypto_scalarmult(kp.private, crypto_scalarmult_base(other)) == (
        crypto_scalarmult(other, kp.public))


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32))
def test_representative_decodes_to_a_curve_point(representative):
    u = int.from_bytes(representative_to_public(representative), "little")
    assert u < P
    assert is_square(u * u * u + A * u * u + u)
    # The two random high bits never matter.
    flipped = bytearray(representative)
    flipped[31] ^= 0xC0
    assert representative_to_public(bytes(flipped)) == representative_to_public(representative)


def test_public_keys_cover_every_torsion_coset():
    """l·public lands on (5·(sk[0] mod 8))·T8, so representatives don't reveal the subgroup."""
    seen = set()
    rng = counter_rng(b"cosets")
    for _ in range(64):
        kp = new_keypair(elligator=True, rng=rng)
        u = int.from_bytes(kp.public, "little")
        expected = edwards_to_u(ed_mul((L * (kp.private[0] & 7)) % 8, T8))
        assert montgomery_ladder_u(L, u) == expected
        seen.add(kp.private[0] & 7)
    assert seen == set(range(8))


def test_high_bits_and_branches_are_random():
    rng = counter_rng(b"bits")
    tops = {new_keypair(elligator=True, rng=rng).representative[31] >> 6 for _ in range(64)}
    assert tops == {0, 1, 2, 3}


def test_about_half_of_keys_have_a_representative():
    rng = counter_rng(b"half")
    hits = 0
    for _ in range(1000):
        digest = hashlib.sha512(rng(32)).digest()
        u = elligator2._dirty_u(digest[:32])
        hits += elligator2._u_to_representative(u, digest[63]) is not None
    assert 400 < hits < 600


def test_plain_keypair_has_no_representative():
    kp = new_keypair()
    assert isinstance(kp, Keypair)
    assert kp.representative is None
    assert kp.public == crypto_scalarmult_base(kp.private)


def test_bad_lengths():
    with pytest.raises(ValueError):
        representative_to_public(bytes(31))
    with pytest.raises(ValueError):
        public_key_from_private(bytes(33))


def _agl_decode(representative: bytes) -> bytes:
    """agl's ``extra25519.RepresentativeToPublicKey`` as Refraction Networking's obfs4
    fork keeps it: only bit 255 is dropped (``FeFromBytes``), bit 254 stays."""
    r = int.from_bytes(representative, "little") & ((1 << 255) - 1)
    P, A = elligator2.P, elligator2.A
    w = -A * pow(1 + 2 * r * r, -1, P) % P
    e = w * (w * w + A * w + 1) % P
    if pow(e, (P - 1) // 2, P) not in (0, 1):
        w = (-w - A) % P
    return w.to_bytes(32, "little")


def test_keys_without_high_bits_decode_alike_in_old_and_new_decoders():
    """Half of our representatives carry bit 254, which an old decoder reads as
    another point (the ntor AUTH mismatch Conjure's client reported); cleared, old and
    new decoders agree, and the key is the same key."""
    differ = 0
    for i in range(64):
        kp = new_keypair(elligator=True, rng=counter_rng(b"legacy%d" % i))
        assert kp.representative is not None
        differ += _agl_decode(kp.representative) != kp.public
        legacy = elligator2.without_high_bits(kp)
        assert legacy.representative is not None and legacy.representative[31] & 0xC0 == 0
        assert legacy.private == kp.private and legacy.public == kp.public
        assert _agl_decode(legacy.representative) == kp.public
        assert elligator2.representative_to_public(legacy.representative) == kp.public
    assert 16 <= differ <= 48  # about half, as measured against the real client
    with pytest.raises(ValueError):
        elligator2.without_high_bits(new_keypair())
