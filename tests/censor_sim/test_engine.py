"""The policy engine on a fake clock and a seeded RNG: no network, no sleeping."""

from __future__ import annotations

import math
import random

import pytest

from censor_sim.engine import Effects, Engine, unsupported
from censor_sim.packet import ACK, PSH, SYN
from censor_sim.profile import load_profile
from tests.support.engine import CLIENT, SERVER, Clock, connect, tcp, udp


def fet_engine(p: float = 0.263, seconds=(120, 180), seed: int = 1):
    over = {"policy": {"rules": [{"detector": "fet", "action": "residual", "probability": p}]},
            "actions": {"residual": {"seconds": list(seconds)}}}
    clock = Clock()
    eng = Engine(load_profile("gfw-fet-2021", over), clock=clock, rng=random.Random(seed))
    return eng, clock


def test_fet_block_rate_matches_the_paper_over_1000_connections():
    """docs/censors/fet.md §5.2 and docs/censors/statistics.md §1: random 50-byte first
    packets are blocked at P(not exempt | 50) · 0.263 = 0.972 · 0.263, within the 3σ
    binomial band."""
    eng, clock = fet_engine(seconds=(0.001,))
    rng = random.Random(7)
    n, blocked = 1000, 0
    for i in range(n):
        clock.t += 1  # every connection a fresh 3-tuple: residuals never overlap
        v = connect(eng, 20000 + i, 10000 + i, rng.randbytes(50))
        blocked += v.drop
    p = 0.972 * 0.263
    band = 3 * math.sqrt(p * (1 - p) / n)
    assert abs(blocked / n - p) <= band, (blocked / n, p, band)


def test_fet_connections_until_first_block_are_geometric():
    """E[K] = 1/0.263 = 3.80 connections up to and including the first block."""
    ks = []
    for seed in range(300):
        eng, clock = fet_engine(seed=seed, seconds=(0.001,))
        rng = random.Random(seed)
        for k in range(1, 200):
            clock.t += 1
            payload = rng.randbytes(300)
            while _exempt(payload):
                payload = rng.randbytes(300)
            if connect(eng, 30000 + k, 443, payload).drop:
                ks.append(k)
                break
    mean = sum(ks) / len(ks)
    sd = math.sqrt((1 - 0.263) / 0.263**2 / len(ks))
    assert abs(mean - 1 / 0.263) < 3 * sd, mean


def _exempt(payload: bytes) -> bool:
    from censor_sim.detectors import fet

    return fet.exemption(payload) is not None


def test_fet_residual_blocks_the_3_tuple_client_to_server_only():
    eng, clock = fet_engine(p=1.0, seconds=(120,))
    noise = bytes.fromhex("8f3a91c4d2e7b05a6c19f3e8a47d20b6") * 4  # popcount 4.0/byte
    assert _exempt(noise) is False
    v = connect(eng, 40000, 443, noise)
    assert v.drop and eng.effects.residuals[-1] == ((CLIENT, SERVER, 6, 443), 120.0)
    # The same 3-tuple, from a new client port: the SYN is dropped.
    clock.t += 119
    assert connect(eng, 40001, 443, b"GET / HTTP/1.1\r\n\r\n").drop
    # Server→client packets of the 3-tuple pass.
    assert not eng.handle(tcp(SERVER, CLIENT, 443, 40000, PSH | ACK, b"x" * 10), False).drop
    # Another port on the same server, and UDP to the same port, are open.
    assert not connect(eng, 40002, 8443, b"GET / HTTP/1.1\r\n\r\n").drop
    assert not eng.handle(udp(CLIENT, SERVER, 40003, 443, noise), True).drop
    # After 120 s the 3-tuple opens again.
    clock.t += 2
    assert not connect(eng, 40004, 443, b"GET / HTTP/1.1\r\n\r\n").drop


def test_fet_exempt_first_packet_is_offloaded_and_never_blocked():
    eng, _ = fet_engine(p=1.0)
    v = connect(eng, 40000, 443, b"\x16\x03\x01" + bytes(range(200)))
    assert not v.drop and v.flow == "accept"
    assert not eng.effects.residuals


def test_fet_looks_at_the_first_packet_only():
    """docs/censors/fet.md §2.2: '\\x21' then 200 random bytes in a second packet is never
    blocked."""
    eng, _ = fet_engine(p=1.0)
    assert connect(eng, 40000, 443, b"\x21").flow == "accept"
    rest = tcp(CLIENT, SERVER, 40000, 443, PSH | ACK, random.Random(1).randbytes(200))
    assert not eng.handle(rest, True).drop


def test_detections_are_events_with_evidence():
    eng, _ = fet_engine(p=1.0)
    connect(eng, 40000, 443, bytes([0x8f, 0x3a, 0x91, 0xc4] * 20))
    det = [e for e in eng.effects.events if e["event"] == "detection"]
    assert det and det[0]["detector"] == "fet" and "popcount_per_byte" in det[0]["evidence"]
    assert det[0]["flow"] == {"client": CLIENT, "server": SERVER, "proto": 6,
                              "client_port": 40000, "server_port": 443}


def test_engine_rejects_unknown_detectors_when_the_spec_loads():
    prof = load_profile("gfw-fet-2021")
    prof.detectors["bogus"] = {}
    assert "unknown detector kind" in unsupported(prof)
    assert isinstance(Effects(), Effects)


@pytest.mark.parametrize("name", ["none", "ip-blocklist", "gfw-fet-2021"])
def test_shipped_profiles_are_runnable(name):
    assert unsupported(load_profile(name)) is None


def keyword_engine(mode: str = "in-path"):
    clock = Clock()
    prof = load_profile("gfw-keyword", {"datapath": {"mode": mode}})
    return Engine(prof, clock=clock, rng=random.Random(0), in_path=mode == "in-path"), clock


def test_keyword_rsts_land_in_each_receivers_window():
    eng, _ = keyword_engine()
    req = b"GET /falun HTTP/1.1\r\nHost: a.lab\r\n\r\n"
    v = connect(eng, 41000, 80, req)
    to_client = next(i for i in v.inject if i.dst == CLIENT)
    to_server = next(i for i in v.inject if i.dst == SERVER)
    # The client sent seq=1000 ack=5000 with len(req) bytes.
    assert (to_client.src, to_client.sport, to_client.dport) == (SERVER, 80, 41000)
    assert to_client.seq == 5000 and to_client.ack == 1000 + len(req)
    assert to_server.seq == 1000 + len(req) and to_server.ack == 5000
    assert all(i.flags == "RA" and i.count == 3 and i.window == 8192 for i in v.inject)
    assert eng.effects.residuals == [((CLIENT, SERVER, 6, 80), 90.0)]


def test_on_path_censor_injects_but_never_drops():
    eng, _ = keyword_engine("on-path")
    v = connect(eng, 41001, 80, b"GET /ultrasurf HTTP/1.1\r\nHost: a.lab\r\n\r\n")
    assert v.inject and not v.drop


def test_iran_timer_restarts_on_new_attempts():
    clock = Clock()
    prof = load_profile("iran-protocol-filter-2020",
                        {"actions": {"residual": {"seconds": [60]}}})
    eng = Engine(prof, clock=clock, rng=random.Random(0))
    v = connect(eng, 42000, 443, bytes(range(128, 192)))
    assert not v.drop and v.passthrough  # "every packet after the first"
    clock.t += 50
    assert connect(eng, 42001, 443, b"\x16\x03\x01\x00\x05hello").drop  # restarts the timer
    clock.t += 50  # 100 s after the block, 50 s after the restart
    assert connect(eng, 42002, 443, b"\x16\x03\x01\x00\x05hello").drop
    clock.t += 61
    assert not connect(eng, 42003, 443, b"\x16\x03\x01\x00\x05hello").drop
    assert not connect(eng, 42004, 8443, bytes(range(128, 192))).drop  # not a filtered port


def test_every_geneva_profile_loads_its_censor():
    from censor_sim.detectors import geneva

    for name in geneva.CENSORS:
        profile = load_profile(f"geneva-{name}")
        assert unsupported(profile) is None
        eng = Engine(profile, clock=Clock(), rng=random.Random(0))
        censor = eng.packet_censor.censor
        assert censor.name == name and not eng.inspectors
        assert censor.keyword == b"ultrasurf" and censor.port is None
        assert profile.datapath["every_packet"] is True


# --- the learning censor (ml-2015) ------------------------------------------------


def ml_engine(**over):
    clock = Clock()
    return Engine(load_profile("ml-2015", over or None), clock=clock,
                  rng=random.Random(1)), clock


def test_ml_entropy_test_blocks_a_random_first_message_at_packet_4():
    eng, _ = ml_engine()
    v = connect(eng, 40000, 9002, random.Random(3).randbytes(1200))
    assert v.drop and eng.effects.events[0]["detector"] == "entropy"
    assert eng.effects.events[0]["evidence"]["packets"] == 4
    assert eng.effects.residuals  # the pair is blocked for a while
    # Plain HTTP, and a random first message under 149 bytes, pass.
    assert not connect(eng, 40001, 8080, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" * 8).drop
    assert not connect(eng, 40002, 8081, random.Random(4).randbytes(100)).drop


def asking(flow) -> set[str]:
    """The inspectors not yet finished with `flow`."""
    return {i.name for i in flow.active or []}


def test_ml_tree_abstains_until_its_window():
    eng, clock = ml_engine()
    # A TLS-looking exchange on 443: the tree sees it only once 30 packets are in.
    connect(eng, 40003, 443, bytes.fromhex("160301") + bytes(300))
    flow = next(iter(eng.flows._flows.values()))
    assert flow.decided is None and "meek" in asking(flow)
    for _ in range(25):
        clock.t += 0.001
        eng.handle(tcp(SERVER, CLIENT, 443, 40003, ACK, b"\x17\x03\x03" + bytes(100)), False)
    assert len(flow.state["ml.log"]) == 29 and "meek" in asking(flow)
    clock.t += 0.001
    eng.handle(tcp(CLIENT, SERVER, 40003, 443, ACK), True)
    assert "meek" not in asking(flow)  # decided at packet 30 (here: not meek)


def test_an_openvpn_window_beyond_the_budget_is_refused():
    """Xue et al.'s Filter judges at packet n: a budget below it could never match."""
    over = {"datapath": {"inspect_packets": 99}}
    with pytest.raises(ValueError, match="openvpn: it needs 100 packets"):
        Engine(load_profile("openvpn-fingerprint-2022", over), clock=Clock(),
               rng=random.Random(1))
    Engine(load_profile("openvpn-fingerprint-2022", {"datapath": {"inspect_packets": 100}}),
           clock=Clock(), rng=random.Random(1))


def test_a_model_needing_more_than_the_budget_is_refused():
    with pytest.raises(ValueError, match="budget"):
        ml_engine(datapath={"inspect_packets": 12})
    with pytest.raises(ValueError, match="no model"):
        ml_engine(detectors={"meek": {"model": "nonexistent"}})


def test_with_births_watched_the_first_copy_is_the_flows_start_and_a_reused_tuple_is_told_by_seq():
    """The on-path tap that leaves SYNs in the kernel (datapath.watch_births) hands the
    engine a connection's first payload first. The engine judges it (no mid-stream
    pass), keeps copies that race its decision in the decided flow, and takes a
    payload far from the old stream on the same 4-tuple for a new connection."""
    from censor_sim.packet import ACK, PSH

    eng, clock = fet_engine(p=1.0, seconds=(0.001,))
    eng.watch_births()
    random_bytes = random.Random(3).randbytes(200)
    while _exempt(random_bytes):
        random_bytes = random.Random(len(random_bytes)).randbytes(200)
    eng.handle(tcp(CLIENT, SERVER, 40000, 443, PSH | ACK, random_bytes, seq=1000), True)
    assert eng.stats["flows"] == 1 and eng.stats["detections"] == 1
    # A copy of the same connection that raced the decision: no new flow, no new judging.
    eng.handle(tcp(CLIENT, SERVER, 40000, 443, PSH | ACK, random_bytes[:100], seq=1200), True)
    eng.handle(tcp(CLIENT, SERVER, 40000, 443, PSH | ACK, random_bytes[:100], seq=1000), True)
    assert eng.stats["flows"] == 1 and eng.stats["detections"] == 1
    # A new connection on the same 4-tuple, its SYN unseen (after the residual): judged
    # afresh, and its random first payload detected again.
    clock.t += 1
    eng.handle(tcp(CLIENT, SERVER, 40000, 443, PSH | ACK, random_bytes, seq=3_000_000_000),
               True)
    assert eng.stats["flows"] == 2 and eng.stats["detections"] == 2
    # Across the window's edge: 1 MiB past the stream's end is still the same connection.
    clock.t += 1
    end = (3_000_000_000 + len(random_bytes)) % 2**32
    eng.handle(tcp(CLIENT, SERVER, 40000, 443, PSH | ACK, b"y", seq=end + (1 << 20)), True)
    assert eng.stats["flows"] == 2
    end += (1 << 20) + 1  # and the stream now ends after that byte
    eng.handle(tcp(CLIENT, SERVER, 40000, 443, PSH | ACK, b"y", seq=end + (1 << 20) + 1), True)
    assert eng.stats["flows"] == 3


def test_without_births_watched_a_flow_first_seen_mid_stream_is_not_judged():
    from censor_sim.packet import ACK, PSH

    eng, _ = fet_engine(p=1.0)
    v = eng.handle(tcp(CLIENT, SERVER, 40001, 443, PSH | ACK, bytes(range(200))), True)
    assert v.flow == "accept" and eng.stats["detections"] == 0


def test_per_packet_stats_are_kept_only_on_flows_a_reader_of_them_is_scoped_to():
    """tls_in_tls reads flow.stats (its handshake RTT) and judges TCP only: UDP
    flows, and TCP flows outside its ports, carry no per-packet record."""
    eng = Engine(load_profile("tls-in-tls-2024", {"detectors": {"tls_in_tls": {
        "ports": [443]}}}), clock=Clock(), rng=random.Random(1))
    eng.handle(tcp(CLIENT, SERVER, 40000, 443, SYN), True)
    eng.handle(tcp(CLIENT, SERVER, 40001, 80, SYN), True)
    eng.handle(udp(CLIENT, SERVER, 40002, 443, b"x" * 40), True)
    stats = {f.key[3]: f.stats for f in eng.flows._flows.values()}
    assert stats[40000] is not None and stats[40000].lengths == [0]
    assert stats[40001] is None and stats[40002] is None


def test_the_residual_table_is_capped_expired_entries_first_then_the_oldest():
    """A client spraying random payloads at many server ports blocks a triple per
    port; triples that never return must not grow the table without end."""
    eng, clock = fet_engine(p=1.0, seconds=(120,))
    eng.max_residuals = 3
    noise = bytes.fromhex("8f3a91c4d2e7b05a6c19f3e8a47d20b6") * 4
    for port in (1001, 1002):
        assert connect(eng, 40000 + port, port, noise).drop
    clock.t += 121  # both expired, never seen again
    for port in (1003, 1004, 1005):
        assert connect(eng, 40000 + port, port, noise).drop
    assert [k[3] for k in eng.residual] == [1003, 1004, 1005]  # the expired went first
    assert connect(eng, 41006, 1006, noise).drop  # full of live blocks: the oldest goes
    assert [k[3] for k in eng.residual] == [1004, 1005, 1006]
    assert connect(eng, 41005, 1005, b"GET / HTTP/1.1\r\n\r\n").drop  # still blocked


def tap_fet_engine(p: float, seed: int, action: str = "residual"):
    over = {"policy": {"rules": [{"detector": "fet", "action": action, "probability": p}]},
            "actions": {"residual": {"seconds": [120, 180]}},
            "datapath": {"mode": "on-path", "fast_path": "ebpf"}}
    clock = Clock()
    eng = Engine(load_profile("gfw-fet-2021", over), clock=clock, rng=random.Random(seed),
                 in_path=False)
    eng.watch_births()
    return eng, clock


@pytest.mark.parametrize("p", [0.0, 0.263, 1.0])
def test_a_kernel_judged_flow_gets_what_handle_gives_the_same_first_payload(p):
    """The kernel fast path (censor_sim/bpf) hands the engine a not-exempt flow's first
    payload with its evidence; the policy's answer, its events and its residuals are
    those of the tap engine that judged the same payload itself, draw for draw."""
    from censor_sim.detectors import fet

    rng = random.Random(11)
    payloads = [rng.randbytes(64) for _ in range(40)]
    payloads = [x for x in payloads if fet.exemption(x) is None]
    reference, _ = tap_fet_engine(p, seed=5)
    kernel, _ = tap_fet_engine(p, seed=5)
    for i, payload in enumerate(payloads):
        pkt = tcp(CLIENT, SERVER, 20000 + i, 10000 + i, PSH | ACK, payload)  # own triple
        want = reference.handle(pkt, True)
        got = kernel.judged_in_kernel(pkt.flow_tuple(), "fet", fet.not_exempt_evidence(payload),
                                      lambda pkt=pkt: pkt)
        if got is None:  # nothing to do: what handle() says of a flow it lets alone
            assert (want.drop, want.flow, want.inject) == (False, "accept", [])
        else:
            assert (got.drop, got.flow, got.inject) == (want.drop, want.flow, want.inject)
    assert kernel.effects.events == reference.effects.events
    assert kernel.effects.residuals == reference.effects.residuals
    assert kernel.stats == reference.stats
    fired = sum(e["event"] == "action" for e in kernel.effects.events)
    assert (fired == 0) if p == 0 else (fired == len(payloads)) if p == 1 else 0 < fired
    # Each flow is reported once and then forgotten: the table does not grow.
    assert len(kernel.flows._flows) == 0


def test_a_kernel_report_no_rule_fires_on_makes_no_packet():
    """At p = 0 the report costs a detection line and no Packet (nor Flow); at p = 1
    the action reads the packet, so it is made once."""
    from censor_sim.detectors import fet

    payload = bytes.fromhex("8f3a91c4d2e7b05a6c19f3e8a47d20b6") * 4
    for p, made_want in ((0.0, 0), (1.0, 1)):
        eng, _ = tap_fet_engine(p, seed=1)
        pkt = tcp(CLIENT, SERVER, 20000, 443, PSH | ACK, payload)
        made: list[int] = []
        got = eng.judged_in_kernel(pkt.flow_tuple(), "fet", fet.not_exempt_evidence(payload),
                                   lambda pkt=pkt, made=made: made.append(1) or pkt)
        assert len(made) == made_want and (got is None) == (made_want == 0)
        assert [e["event"] for e in eng.effects.events][:1] == ["detection"]


def test_a_kernel_report_inside_a_residual_is_the_residuals():
    from censor_sim.detectors import fet

    eng, clock = tap_fet_engine(1.0, seed=1)
    payload = bytes.fromhex("8f3a91c4d2e7b05a6c19f3e8a47d20b6") * 4
    evidence = fet.not_exempt_evidence(payload)
    def report(port: int):
        pkt = tcp(CLIENT, SERVER, port, 443, PSH | ACK, payload)
        return eng.judged_in_kernel(pkt.flow_tuple(), "fet", evidence, lambda: pkt)

    assert report(20000) is not None
    assert eng.stats["actions"] == 1 and len(eng.effects.residuals) == 1
    clock.t += 1  # a later flow on the same triple (its SYN got through before the entry)
    assert report(20001) is not None  # the residual's verdict
    assert eng.stats["actions"] == 1 and eng.stats["detections"] == 1
    clock.t += 200  # past the entry (120 or 180 s): detected and acted on again
    assert report(20002) is not None
    assert eng.stats["actions"] == 2 and eng.stats["detections"] == 2


@pytest.mark.parametrize("datapath, why", [
    ({"mode": "on-path", "fast_path": "ebpf"}, None),
    ({"mode": "in-path", "fast_path": "ebpf"}, "needs datapath.mode = 'on-path'"),
    ({"mode": "on-path", "fast_path": "xdp"}, "must be 'ebpf'"),
    ({"mode": "on-path", "fast_path": None}, None),
])
def test_the_fast_path_is_checked_when_the_profile_loads(datapath, why):
    got = unsupported(load_profile("gfw-fet-2021", {"datapath": datapath}))
    assert got == why if why is None else why in got


def test_the_fast_path_refuses_detectors_without_a_kernel_program():
    sni = load_profile("sni-blocklist", {"datapath": {"mode": "on-path", "fast_path": "ebpf"}})
    assert "has no kernel program (these do: fet)" in unsupported(sni)
