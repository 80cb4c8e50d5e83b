"""benchmarks/cross_censor.py: our censor and OpenGFW over one capture whose answer
is known flow by flow (docs/censors/crosscheck.md).

The capture holds one flow per case: a random first payload (both flag FET); the
same behind "DEL" (OpenGFW exempts nine three-letter HTTP verb prefixes, Wu et
al. name four verbs with their space, so only ours flags it); a server that
speaks first with random bytes, answered by a ClientHello (OpenGFW judges the
first payload in either direction, the GFW the client's, so only theirs flags
it); ClientHellos naming
a blocked and an unblocked name; a QUIC Initial naming a blocked name, and the same
from a source port below its destination port (the GFW inspects only Initials
whose source port is the higher, Zohaib et al. 2025 §3.3, so only theirs flags
it); and a WireGuard handshake whose response echoes the initiator's index. The OpenGFW half
skips when the peer is not built."""

from __future__ import annotations

import importlib.util
import random
import struct
import sys
from pathlib import Path

from censor_sim.detectors import fet
from tests.support import peers, quic_vectors
from tests.support.mixcapture import ACK, PSH, SYN, FrameBuilder, write_pcap

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "cross_censor.py"


def load():
    spec = importlib.util.spec_from_file_location("bench_cross_censor", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


CLIENT, SERVER = bytes([198, 18, 0, 2]), bytes([198, 19, 0, 2])


def _random_first_payload(seed: int) -> bytes:
    """Random bytes that no FET exemption lets pass (checked, not hoped)."""
    rng = random.Random(seed)
    while True:
        data = rng.randbytes(300)
        if fet.exemption(data) is None and fet.exemption(b"DEL" + data) is None:
            return data


def _tcp_flow(b: FrameBuilder, t: float, cport: int, sport: int, payload: bytes
              ) -> list[tuple[float, bytes]]:
    """Handshake, one client payload, the server's acknowledgement."""
    cseq, sseq = 1000, 5000
    return [(t, b.tcp(CLIENT, SERVER, cport, sport, cseq, 0, SYN)),
            (t + 0.01, b.tcp(SERVER, CLIENT, sport, cport, sseq, cseq + 1, SYN | ACK)),
            (t + 0.02, b.tcp(CLIENT, SERVER, cport, sport, cseq + 1, sseq + 1, ACK)),
            (t + 0.03, b.tcp(CLIENT, SERVER, cport, sport, cseq + 1, sseq + 1, PSH | ACK,
                             payload)),
            (t + 0.04, b.tcp(SERVER, CLIENT, sport, cport, sseq + 1, cseq + 1 + len(payload),
                             ACK))]


def _server_first_flow(b: FrameBuilder, t: float, cport: int, sport: int, server_says: bytes,
                       client_says: bytes) -> list[tuple[float, bytes]]:
    """Handshake, then the server's payload first, then the client's."""
    cseq, sseq = 2000, 9000
    return [(t, b.tcp(CLIENT, SERVER, cport, sport, cseq, 0, SYN)),
            (t + 0.01, b.tcp(SERVER, CLIENT, sport, cport, sseq, cseq + 1, SYN | ACK)),
            (t + 0.02, b.tcp(CLIENT, SERVER, cport, sport, cseq + 1, sseq + 1, ACK)),
            (t + 0.03, b.tcp(SERVER, CLIENT, sport, cport, sseq + 1, cseq + 1, PSH | ACK,
                             server_says)),
            (t + 0.04, b.tcp(CLIENT, SERVER, cport, sport, cseq + 1,
                             sseq + 1 + len(server_says), PSH | ACK, client_says))]


def _hello(name: str) -> bytes:
    msg = quic_vectors.client_hello(name, ["h2"], random.Random(name))
    return b"\x16\x03\x01" + struct.pack("!H", len(msg)) + msg


def known_capture(path: Path) -> None:
    b = FrameBuilder()
    random_payload = _random_first_payload(7)
    frames = []
    frames += _tcp_flow(b, 0.0, 40001, 8388, random_payload)            # FET: both
    frames += _tcp_flow(b, 1.0, 40002, 8388, b"DEL" + random_payload)   # FET: only ours
    frames += _tcp_flow(b, 2.0, 40003, 443, _hello("www.blocked.lab"))  # SNI: both
    frames += _tcp_flow(b, 3.0, 40004, 443, _hello("site.example.lab"))  # SNI: neither
    frames += _server_first_flow(b, 3.5, 40007, 8443, random_payload,
                                 _hello("site.example.lab"))             # FET: only theirs
    initial = quic_vectors.build_initial("q.blocked.lab", seed=3)
    frames.append((4.0, b.udp(CLIENT, SERVER, 40005, 443, initial)))   # QUIC: both
    frames.append((4.5, b.udp(CLIENT, SERVER, 400, 443, initial)))     # QUIC: only theirs
    index = struct.pack("<I", 0x01020304)
    init = b"\x01\x00\x00\x00" + index + bytes(140)
    resp = b"\x02\x00\x00\x00" + struct.pack("<I", 0x0A0B0C0D) + index + bytes(80)
    frames += [(5.0, b.udp(CLIENT, SERVER, 40006, 51820, init)),
               (5.01, b.udp(SERVER, CLIENT, 51820, 40006, resp))]      # WireGuard: both
    write_pcap(path, frames)


EXPECTED = {  # pair -> (both, only ours, only theirs)
    "fet": (1, 1, 1), "tls-sni": (1, 0, 0), "quic-sni": (1, 0, 1),
    "tls-in-tls/trojan": (0, 0, 0), "openvpn": (0, 0, 0), "wireguard": (1, 0, 0)}


def test_our_half_gives_the_known_answer(tmp_path):
    cc = load()
    pcap = tmp_path / "known.pcap"
    known_capture(pcap)
    flagged = {}
    for pair in cc.PAIRS:
        every, mine, _ = cc.ours(pair, pcap)
        assert len(every) == 8, pair.name
        flagged[pair.name] = len(mine)
    assert flagged == {name: both + only_ours for name, (both, only_ours, _) in EXPECTED.items()}


def test_flows_are_the_same_whichever_end_is_named_first():
    cc = load()
    a = cc.flow_id("tcp", ("2001:db8:0::1", 443), ("198.18.0.2", 40001))
    assert a == cc.flow_id("tcp", ("198.18.0.2", 40001), ("2001:db8::1", 443))
    assert cc._endpoint("[2001:db8::1]:443") == ("2001:db8::1", 443)


def test_their_rules_are_log_only_and_scoped_to_a_protocol():
    """A rule with an action would end the flow's analysis at its first match, and
    the other analyzers would not see the rest of it."""
    import json

    cc = load()
    rules = json.loads(cc.rules_yaml(cc.PAIRS))
    assert all(r["log"] is True and "action" not in r for r in rules)
    assert {r["name"] for r in rules} >= {"fet|tcp", "openvpn|tcp", "openvpn|udp",
                                          "wireguard|udp", "quic-sni|udp"}


@peers.needs("opengfw")
def test_opengfw_and_ours_agree_and_disagree_where_the_capture_says(tmp_path):
    cc = load()
    pcap = tmp_path / "known.pcap"
    known_capture(pcap)
    got = {a.pair: (a.both, a.only_ours, a.only_theirs)
           for a in cc.compare("known", pcap, peers.require("opengfw"))}
    assert got == EXPECTED


def test_without_opengfw_the_benchmark_names_the_command_that_builds_it(tmp_path, monkeypatch,
                                                                        capsys):
    monkeypatch.setenv("PTLAB_PEERS_DIR", str(tmp_path / "none"))
    assert load().main(["--mix-flows", "10"]) == 2
    err = capsys.readouterr().err
    assert "peer opengfw (github.com/apernet/OpenGFW@" in err
    assert "is not built: run `scripts/setup --peers`" in err


@peers.needs("opengfw")
def test_the_benchmark_prints_the_table_and_the_times(tmp_path, capsys):
    pcap = tmp_path / "known.pcap"
    known_capture(pcap)
    assert load().main(["--pcap", str(pcap), "--mix-flows", "0"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("known.pcap")]
    assert [r[1] for r in rows] == [p for p in EXPECTED]
    assert [tuple(map(int, r[3:6])) for r in rows] == list(EXPECTED.values())
    assert "OpenGFW, all 6 at once" in out and "reading the captures alone" in out
