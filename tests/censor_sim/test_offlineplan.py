"""Pcap mode's planned loop (censor_sim.offlineplan, Engine.skim) gives the verdicts of the
per-packet loop, line for line, on the project's captures and on random ones."""

from __future__ import annotations

import functools
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim import pcapbatch
from censor_sim.offline import replay
from censor_sim.profile import load_profile
from tests.support import quic_vectors
from tests.support.mixcapture import HOSTING, write_mix
from tests.support.tlsrecords import crafted_client_hello

# Profiles with what they exercise: residual blocks and their restarts, SNI (on every
# port, and per segment), the freeze's byte count, QUIC's first datagram, a packet
# censor, per-packet sizes (TLS-in-TLS), every packet of a flow (the ML censor).
PROFILES = {
    "gfw-fet-2021": {"policy": {"rules": [{"detector": "fet", "action": "residual",
                                           "probability": 1.0}]},
                     "actions": {"residual": {"seconds": [20]}}},
    "gfw-fet-2021 p": None,
    "sni-blocklist": None,
    "henan-2025": None,
    "gfw-sni-rst-2025": {"actions": {"residual": {"seconds": [20]}}},
    "iran-protocol-filter-2020": None,
    "tspu-freeze-2025": {"detectors": {"tls": {"servers": HOSTING}}},
    "gfw-quic-sni-2024": None,
    "gfw-443-rst-2025-08-20": None,
    "tls-in-tls-2024": None,
    "ml-2015": None,
    "range-block": {"detectors": {"unclassified": {"servers": HOSTING}}},
}


def lines(profile: str, path, skim: bool, **kw) -> list[dict]:
    name = profile.split()[0]
    return [v.to_json() for v in replay(load_profile(name, PROFILES[profile]), path,
                                        skim=skim, **kw)]


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    path = tmp_path_factory.mktemp("mix") / "mix.pcap"
    write_mix(path, seed=11, flows=1500, span_s=40)
    return path


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_mix_gets_the_same_verdicts_both_ways(mix, profile, monkeypatch):
    plain = lines(profile, mix, skim=False)
    assert lines(profile, mix, skim=True) == plain
    # Small batches: flows and residual blocks span many plans.
    monkeypatch.setattr(pcapbatch, "batches",
                        functools.partial(pcapbatch.batches, batch_bytes=40_000))
    assert lines(profile, mix, skim=True) == plain
    if profile == "gfw-fet-2021":
        assert sum(x["verdict"] == "dropped-by-residual" for x in plain) > 10


def test_named_clients_get_the_same_verdicts_both_ways(mix):
    kw = {"clients": ["198.18.0.0/20", "2001:db8:1::/48"]}
    for profile in ("gfw-fet-2021", "sni-blocklist"):
        assert lines(profile, mix, True, **kw) == lines(profile, mix, False, **kw)


# -- random captures ---------------------------------------------------------------------

def _ip(src: str, dst: str, proto: int, l4: bytes) -> bytes:
    a, b = bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 0, 0, 64, proto, 0, a, b) + l4


def _tcp(src, dst, sport, dport, flags, seq=1, payload=b"") -> bytes:
    return _ip(src, dst, 6, struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 0x50, flags,
                                        1024, 0, 0) + payload)


def _udp(src, dst, sport, dport, payload) -> bytes:
    return _ip(src, dst, 17, struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload)


FIRSTS = [b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", crafted_client_hello("www.blocked.lab"),
          crafted_client_hello("fine.lab"), b"\x00" * 40, None]  # None: random bytes


@st.composite
def captures(draw):
    """Flows that reuse 4-tuples, go quiet past the idle timeout, send SYNs again,
    mix directions and protocols: the cases the plan must get right."""
    rng = random.Random(draw(st.integers(0, 1 << 30)))
    clients = ["198.18.0.2", "198.18.0.3"]
    servers = ["198.19.0.5", "198.19.1.7"]  # the first in HOSTING
    events: list[tuple[float, bytes]] = []
    for _ in range(draw(st.integers(1, 12))):
        c, s = rng.choice(clients), rng.choice(servers)
        cport, sport = rng.choice([40000, 40001]), rng.choice([443, 8388])
        t = draw(st.floats(0, 40))
        if rng.random() < 0.2:
            events.append((t, _udp(c, s, cport, 443, quic_vectors.build_initial(
                "q.blocked.lab" if rng.random() < 0.5 else "q.lab", seed=rng.randrange(9)))))
            for k in range(rng.randrange(4)):
                events.append((t + 0.01 * (k + 1), _udp(s, c, 443, cport, b"r" * 50)))
            continue
        first = rng.choice(FIRSTS)
        if first is None:
            first = rng.randbytes(rng.randrange(10, 300))
        seq = []
        if rng.random() < 0.9:
            seq.append((c, s, cport, sport, 0x02, b""))
            seq.append((s, c, sport, cport, 0x12, b""))
            seq.append((c, s, cport, sport, 0x10, b""))
        seq.append((c, s, cport, sport, 0x18, first))
        for _ in range(rng.randrange(6)):
            if rng.random() < 0.5:
                seq.append((s, c, sport, cport, 0x18, rng.randbytes(rng.choice([40, 1400]))))
            else:
                seq.append((c, s, cport, sport, 0x18, rng.randbytes(30)))
        if rng.random() < 0.3:
            seq.append((c, s, cport, sport, 0x02, b""))  # a retransmitted or new SYN
        for k, (a, b, pa, pb, fl, pay) in enumerate(seq):
            gap = 30.0 if rng.random() < 0.05 else 0.01  # past the 20 s idle timeout
            events.append((t + k * gap, _tcp(a, b, pa, pb, fl, 1000 + k, pay)))
    events.sort(key=lambda e: e[0])
    return events


def write(path, events) -> None:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)
    for t, raw in events:
        out += struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(raw), len(raw)) + raw
    path.write_bytes(out)


@settings(max_examples=60, deadline=None)
@given(captures(), st.sampled_from(["gfw-fet-2021", "sni-blocklist", "henan-2025",
                                    "iran-protocol-filter-2020", "tspu-freeze-2025",
                                    "gfw-quic-sni-2024", "gfw-443-rst-2025-08-20"]),
       st.sampled_from([200, 5000, 1 << 20]), st.booleans())
def test_random_captures_get_the_same_verdicts_both_ways(tmp_path_factory, events, profile,
                                                        batch_bytes, named):
    path = tmp_path_factory.mktemp("cap") / "c.pcap"
    write(path, events)
    over = PROFILES[profile] or {}
    over = {**over, "datapath": {"flow_idle_s": 20}}
    prof = load_profile(profile, over)
    clients = ["198.18.0.0/24"] if named else []
    plain = [v.to_json() for v in replay(prof, path, clients, skim=False)]
    original = pcapbatch.batches
    pcapbatch.batches = functools.partial(original, batch_bytes=batch_bytes)
    try:
        planned = [v.to_json() for v in replay(prof, path, clients, skim=True)]
    finally:
        pcapbatch.batches = original
    assert planned == plain
