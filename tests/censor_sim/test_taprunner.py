"""The tap runner's bookkeeping, with the kernel's sockets replaced by fakes."""

from __future__ import annotations

import random

from scapy.layers.inet import IP, TCP
from scapy.packet import Raw, raw

from censor_sim import datapath
from censor_sim.engine import Engine
from censor_sim.profile import load_profile
from censor_sim.runners import TapRunner

NOISE = bytes.fromhex("8f3a91c4d2e7b05a6c19f3e8a47d20b6") * 4
C, S = "198.18.0.2", "198.18.5.2"


class Copies:
    def __init__(self, batches):
        self.batches = list(batches)
        self.overruns = 0

    def read(self):
        return self.batches.pop(0) if self.batches else []


class Marks:
    def __init__(self):
        self.calls = []
        self.written = self.missing = 0

    def mark(self, flows):
        self.calls.append(flows)
        self.written += len(flows)
        return [True] * len(flows)


def tcp(sport: int, flags: str, payload: bytes = b"") -> bytes:
    pkt = IP(src=C, dst=S) / TCP(sport=sport, dport=443, flags=flags)
    return raw(pkt / Raw(payload) if payload else pkt)


def runner(action: str) -> TapRunner:
    prof = load_profile("gfw-fet-2021", {
        "policy": {"rules": [{"detector": "fet", "action": action, "probability": 1.0}]},
        "datapath": {"mode": "on-path"}})
    eng = Engine(prof, clock=lambda: 0.0, rng=random.Random(0), in_path=False)
    r = TapRunner(eng)
    r.marker = Marks()
    return r


def test_a_dropped_flow_is_marked_once_however_many_copies_follow():
    r = runner("drop")
    c2s = datapath.QUEUE_C2S
    r.reader = Copies([[(c2s, tcp(40000, "S")), (c2s, tcp(40000, "PA", NOISE)),
                        (c2s, tcp(40000, "PA", NOISE))],
                       [(c2s, tcp(40000, "PA", NOISE))]])
    r._drain()
    r._drain()
    assert r.marker.calls == [[((C, S, 6, 40000, 443), datapath.MARK_DROP)]]
    assert r.queued == 4 and r.errors == 0
    assert r.engine.stats["detections"] == 1


def test_accepted_flows_write_no_mark_and_a_bad_copy_is_skipped():
    r = runner("residual")
    c2s = datapath.QUEUE_C2S
    r.reader = Copies([[(c2s, tcp(40001, "S")), (c2s, tcp(40001, "PA", b"GET / HTTP/1.1\r\n")),
                        (c2s, b"\x45\x00garbage")]])
    r._drain()
    assert r.marker.calls == [] and r.errors == 0 and r.queued == 3


def test_a_new_connection_on_a_marked_4_tuple_is_marked_again():
    """Go reuses a source port right after a reset: the new connection is a new flow
    with a new conntrack entry, and its own decision must reach the kernel too."""
    r = runner("drop")
    c2s = datapath.QUEUE_C2S
    r.reader = Copies([[(c2s, tcp(40002, "S")), (c2s, tcp(40002, "PA", NOISE))],
                       [(c2s, tcp(40002, "S")), (c2s, tcp(40002, "PA", NOISE))]])
    r._drain()
    r._drain()
    mark = [((C, S, 6, 40002, 443), datapath.MARK_DROP)]
    assert r.marker.calls == [mark, mark]
    assert r.engine.stats["detections"] == 2 and r.engine.stats["flows"] == 2
