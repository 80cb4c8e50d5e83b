"""The censor over a capture (censor_sim.offline; ``ptlab censor --pcap``)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from typing import Any

import pytest
from scapy.all import IP, TCP, UDP, Raw, wrpcap

from censor_sim.offline import replay
from censor_sim.profile import load_profile

CLIENT, SERVER, WEB = "198.18.0.2", "198.18.3.2", "198.18.7.2"
FET_P1 = {"policy": {"rules": [{"detector": "fet", "action": "residual", "probability": 1.0}]},
          "actions": {"residual": {"seconds": [20]}}}


def connection(sport: int, dst: str, dport: int, payload: bytes, t0: float) -> list:
    """A TCP handshake and one client payload, with capture times."""
    pkts = [IP(src=CLIENT, dst=dst) / TCP(sport=sport, dport=dport, flags="S", seq=100),
            IP(src=dst, dst=CLIENT) / TCP(sport=dport, dport=sport, flags="SA", seq=500, ack=101),
            IP(src=CLIENT, dst=dst) / TCP(sport=sport, dport=dport, flags="A", seq=101, ack=501),
            IP(src=CLIENT, dst=dst) / TCP(sport=sport, dport=dport, flags="PA", seq=101,
                                          ack=501) / Raw(payload)]
    for i, p in enumerate(pkts):
        p.time = t0 + 0.001 * i
    return pkts


@pytest.fixture
def capture(tmp_path):
    rng = random.Random(1)
    pkts = (connection(40000, SERVER, 9850, rng.randbytes(300), 10.0)      # random: blocked
            + connection(40001, WEB, 80, b"GET / HTTP/1.1\r\nHost: web.lab\r\n\r\n", 11.0)
            + connection(40002, SERVER, 9850, rng.randbytes(300), 12.0)    # inside 20 s
            + connection(40003, SERVER, 9850, rng.randbytes(300), 31.0))   # after it
    dns = IP(src=CLIENT, dst="198.18.8.2") / UDP(sport=5353, dport=53) / Raw(b"\x00" * 30)
    dns.time = 13.0
    path = tmp_path / "cap.pcap"
    wrpcap(str(path), pkts + [dns])
    return path


def verdicts(path, **kw):
    return {(v.flow["server"], v.flow["client_port"]): v
            for v in replay(load_profile("gfw-fet-2021", FET_P1), path, **kw)}


def test_the_engine_judges_each_flow_of_a_capture_on_its_clock(capture):
    v = verdicts(capture)
    first = v[(SERVER, 40000)]
    assert (first.verdict, first.detector, first.packet, first.data_packet) == \
        ("residual", "fet", 4, 1)
    assert first.evidence["rule"] == "not-exempt"
    assert v[(WEB, 40001)].verdict == "pass"  # HTTP is exempt
    assert v[(SERVER, 40002)].verdict == "dropped-by-residual"  # 2 s later: inside 20 s
    assert v[(SERVER, 40003)].verdict == "residual"  # 21 s later: judged afresh
    assert v[("198.18.8.2", 5353)].verdict == "pass"  # UDP: the FET rules read TCP


def test_the_censored_side_can_be_named_or_inferred(capture):
    assert verdicts(capture, clients=["198.18.0.0/24"])[(SERVER, 40000)].verdict == "residual"
    # Naming the wrong side makes every packet server-to-client: nothing to judge.
    wrong = verdicts(capture, clients=["198.18.3.0/24"])
    assert all(v.verdict == "pass" for v in wrong.values())


def test_a_geneva_censor_has_no_offline_mode(capture):
    with pytest.raises(ValueError, match="no offline mode"):
        list(replay(load_profile("geneva-censor1"), capture))


def test_the_cli_writes_one_line_per_flow(capture, tmp_path):
    out = tmp_path / "v.jsonl"
    proc = subprocess.run([sys.executable, "-m", "ptlab", "censor", "--profile",
                           "gfw-fet-2021", "--set", json.dumps(FET_P1), "--pcap", str(capture),
                           "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 5 and sum(x["verdict"] != "pass" for x in lines) == 3
    assert "3 of 5 flows acted on" in proc.stderr
    bad = subprocess.run([sys.executable, "-m", "ptlab", "censor", "--profile", "gfw-fet-2021",
                          "--pcap", str(tmp_path / "none.pcap")], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("ptlab: censor --pcap:")


def test_the_cli_stops_quietly_when_its_reader_leaves(tmp_path):
    """`ptlab censor --pcap F | head -1`: one line read, then the pipe closes while the
    censor still has far more than a pipe's buffer (64 KiB) to write."""
    from scapy.layers.inet import IP, TCP
    from scapy.utils import wrpcap

    big = tmp_path / "many.pcap"
    wrpcap(str(big), [IP(src="198.18.0.2", dst="198.18.5.2") / TCP(sport=1024 + i, dport=443,
                                                                    flags="S")
                      for i in range(3000)])
    proc = subprocess.Popen([sys.executable, "-m", "ptlab", "censor", "--profile",
                             "gfw-fet-2021", "--pcap", str(big)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"{")
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and b"Broken pipe" not in err, err


def test_the_kernels_address_lists_judge_offline_too(tmp_path):
    from scapy.layers.inet import IP, TCP
    from scapy.utils import wrpcap

    pcap = tmp_path / "two.pcap"
    wrpcap(str(pcap), [IP(src="198.18.0.2", dst=dst) / TCP(sport=40000, dport=443, flags="S")
                       for dst in ("198.18.5.2", "198.18.7.2")])
    block = load_profile("ip-blocklist", {"detectors": {"ip_blocklist": {
        "addresses": ["198.18.5.0/24"]}}})
    got = {v.flow["server"]: (v.verdict, v.detector) for v in replay(block, pcap)}
    assert got == {"198.18.5.2": ("drop", "ip_blocklist"), "198.18.7.2": ("pass", None)}
    # Iran 2026's source allowlist: an unlisted client reaches the domestic address only.
    allow = load_profile("iran-2026", {"detectors": {"ip_allowlist": {
        "addresses": [], "domestic": ["198.18.7.2"]}}})
    got = {v.flow["server"]: v.verdict for v in replay(allow, pcap)}
    assert got == {"198.18.5.2": "drop", "198.18.7.2": "pass"}
    listed = load_profile("iran-2026", {"detectors": {"ip_allowlist": {
        "addresses": ["198.18.0.2"], "domestic": []}}})
    assert {v.verdict for v in replay(listed, pcap)} == {"pass"}
    with pytest.raises(ValueError, match="ip_blocklist.addresses names 'role:bridge', a lab role"):
        list(replay(load_profile("ip-blocklist"), pcap))


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux's setpriv")
def test_the_cli_needs_no_privilege(capture, tmp_path):
    """With every capability dropped (no CAP_NET_ADMIN, no raw sockets), a capture is
    judged all the same."""
    drop = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"]
    caps = subprocess.run([*drop, sys.executable, "-c",
                           "print([l for l in open('/proc/self/status') if "
                           "l.startswith('CapEff')][0])"],
                          capture_output=True, text=True, timeout=30)
    assert caps.stdout.split() == ["CapEff:", "0000000000000000"], caps
    out = tmp_path / "v.jsonl"
    proc = subprocess.run([*drop, sys.executable, "-m", "ptlab", "censor", "--profile",
                           "gfw-fet-2021", "--set", json.dumps(FET_P1), "--pcap", str(capture),
                           "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert len(out.read_text().splitlines()) == 5


def test_a_flow_without_its_handshake_passes_marked_mid_stream(tmp_path, capture):
    """A capture that lost (or began after) a connection's SYN: FET's censor needs the
    handshake, so it does not judge the flow, and the verdict says why it passed."""
    from scapy.utils import rdpcap

    pkts = list(rdpcap(str(capture)))
    cut = tmp_path / "cut.pcap"
    wrpcap(str(cut), pkts[1:])  # the first connection's SYN, lost
    v = verdicts(cut)
    first = v[(SERVER, 40000)]
    assert (first.verdict, first.midstream, first.detections) == ("pass", True, 0)
    assert first.to_json()["midstream"] is True
    # Every flow whose SYN is there is judged as before, and none is marked.
    assert v[(SERVER, 40002)].verdict == "residual"  # no earlier block now
    assert not any(x.midstream for k, x in v.items() if k != (SERVER, 40000))
    proc = subprocess.run([sys.executable, "-m", "ptlab", "censor", "--profile",
                           "gfw-fet-2021", "--set", json.dumps(FET_P1), "--pcap", str(cut)],
                          capture_output=True, text=True, timeout=60)
    assert "1 TCP flows passed unjudged, first seen mid-stream" in proc.stderr, proc.stderr


def test_a_censor_that_needs_no_handshake_judges_mid_stream_flows(tmp_path):
    """Henan's firewall inspects flows it meets mid-stream (datapath.midstream): its
    verdict on a SYN-less flow is a real one, so the flow is not marked."""
    hello = bytes.fromhex("1603010005") + b"\x01\x00\x00\x01\x00"
    pkts = connection(40010, SERVER, 443, hello, 5.0)[2:]  # no SYN, no SYN+ACK
    path = tmp_path / "henan.pcap"
    wrpcap(str(path), pkts)
    (only,) = replay(load_profile("henan-2025"), path)
    assert only.midstream is False


def test_a_reused_four_tuple_is_a_new_connection_judged_on_its_own_line(tmp_path):
    """A client reusing its source port (Go's dialer does, often) opens a connection
    the censor judges afresh: the capture's verdicts say so, flow by flow."""
    rng = random.Random(5)
    http = connection(40000, SERVER, 9850, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 10.0)
    fin = IP(src=CLIENT, dst=SERVER) / TCP(sport=40000, dport=9850, flags="FA", seq=200)
    fin.time = 10.5
    again = connection(40000, SERVER, 9850, rng.randbytes(300), 12.0)  # same 4-tuple
    path = tmp_path / "reuse.pcap"
    wrpcap(str(path), [*http, fin, *again])
    got = list(replay(load_profile("gfw-fet-2021", FET_P1), path))
    assert [(v.verdict, v.packets, v.packet, v.data_packet) for v in got] == [
        ("pass", 5, None, None), ("residual", 4, 4, 1)]
    assert got[1].after_s == pytest.approx(0.003)


def test_verdicts_stream_once_their_flows_are_idle(monkeypatch):
    """A flow idle past the engine's flow_idle_s (on the capture's clock) is handed out
    while the capture is still being read, in order of first packet; memory then
    follows the flows live at once, not the capture's length."""
    from censor_sim import pcapbatch

    rng = random.Random(6)
    first = connection(40000, SERVER, 9850, rng.randbytes(300), 0.0)
    later = [IP(src=CLIENT, dst=WEB) / TCP(sport=41000 + i % 7, dport=80, flags="A")
             for i in range(3000)]
    read_past_the_idle_flow = []

    def batches(_path):
        yield pcapbatch.from_packets([(float(p.time), bytes(p)) for p in first])
        for start in range(0, len(later), 100):  # 121 s on, for 3,000 packets
            chunk = later[start:start + 100]
            read_past_the_idle_flow.extend(range(start, start + len(chunk)))
            yield pcapbatch.from_packets([(121.0 + (start + k) * 0.001, bytes(p))
                                          for k, p in enumerate(chunk)])
        raise RuntimeError("the capture goes on")

    monkeypatch.setattr(pcapbatch, "batches", batches)
    verdicts = replay(load_profile("gfw-fet-2021", FET_P1), "unused.pcap")
    v = next(verdicts)
    assert (v.flow["client_port"], v.verdict) == (40000, "residual")
    assert 0 < len(read_past_the_idle_flow) < len(later)
    with pytest.raises(RuntimeError, match="goes on"):
        list(verdicts)


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_the_cli_reads_a_capture_from_a_pipe(capture, tmp_path, fmt):
    """`tcpdump -w - | ptlab censor --pcap -`: read front to back, never rewound."""
    from scapy.utils import rdpcap, wrpcapng

    data = capture.read_bytes()
    if fmt == "pcapng":
        wrpcapng(str(tmp_path / "c.pcapng"), rdpcap(str(capture)))
        data = (tmp_path / "c.pcapng").read_bytes()
    proc = subprocess.run([sys.executable, "-m", "ptlab", "censor", "--profile",
                           "gfw-fet-2021", "--set", json.dumps(FET_P1), "--pcap", "-"],
                          input=data, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.decode().splitlines()]
    assert [x["verdict"] for x in lines] == ["residual", "pass", "dropped-by-residual",
                                             "residual", "pass"]


def test_a_packet_censor_that_forges_udp_says_what_it_would_inject(tmp_path, monkeypatch):
    """A plugin's packet censor may forge UDP (a DNS answer): the replay reports it
    as a UDP injection, as it does the engine's own, rather than reading a TCP
    segment's flags off a datagram."""
    from censor_sim import registry
    from censor_sim.actions import InjectUdp, Verdict

    class DnsForger:
        whole_packets = True

        def __init__(self, name, params):
            self.name, self.detections = name, []

        def process(self, pkt, from_client):
            if not (from_client and pkt.proto == 17 and pkt.dport == 53):
                return Verdict()
            return Verdict(inject=[InjectUdp(pkt.dst, pkt.src, 53, pkt.sport, b"answer",
                                             count=2)])

    monkeypatch.setitem(registry.BUILTIN, "dns_forger", DnsForger)
    query = IP(src=CLIENT, dst="198.18.8.2") / UDP(sport=5353, dport=53) / Raw(b"\x00" * 30)
    path = tmp_path / "dns.pcap"
    wrpcap(str(path), [query])
    profile = load_profile("gfw-443-rst-2025-08-20",
                           {"detectors": {"gfw443": {"kind": "dns_forger"}}})
    [v] = replay(profile, path)
    assert (v.detector, v.would) == ("gfw443", [
        {"action": "inject", "direction": "to-client", "proto": "udp", "count": 2}])


# -- pcap mode for real captures (issue 46) ---------------------------------------------

def cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptlab", "censor", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("profile", "option"), [
    ("tspu-freeze-2025", "detectors.tls.servers"),
    ("range-block", "detectors.unclassified.servers"),
    ("ip-blocklist", "detectors.ip_blocklist.addresses"),
    ("iran-2026", "detectors.ip_allowlist.domestic"),
])
def test_a_profile_that_needs_lab_roles_refuses_in_one_line_naming_the_option(
        capture, profile, option):
    """A capture has no lab: a profile whose scope is a lab role would otherwise act
    on every server in it (or none); it says what to set instead."""
    proc = cli(["--profile", profile, "--pcap", str(capture)])
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert option in proc.stderr and "a lab role" in proc.stderr and "--set" in proc.stderr
    # With the addresses set, it judges the capture.
    detector, part = option.split(".")[1:]
    sets = {"detectors": {detector: {part: ["198.18.3.0/24"]}}}
    if profile == "iran-2026":
        sets["detectors"]["ip_allowlist"]["addresses"] = []
    ok = cli(["--profile", profile, "--set", json.dumps(sets), "--pcap", str(capture)])
    assert ok.returncode == 0, ok.stderr


def test_a_residual_verdict_names_the_flow_triple_and_time_that_caused_it(capture):
    got = {v.flow["client_port"]: v for v in replay(load_profile("gfw-fet-2021", FET_P1),
                                                    capture)}
    setter, caught = got[40000], got[40002]
    assert caught.verdict == "dropped-by-residual" and caught.detector is None
    assert caught.cause == {"flow": setter.id, "client_port": 40000, "detector": "fet",
                            "triple": {"from": CLIENT, "to": SERVER, "proto": 6,
                                       "port": 9850},
                            "set_at": 10.003, "expires": 30.003}
    assert {"action": "residual", "direction": "to-server", "seconds": 20.0,
            "triple": caught.cause["triple"]} in setter.would
    assert got[40003].cause is None  # judged afresh after the block lapsed


def hello_capture(path, sni: str, dport: int = 443) -> None:
    from tests.support.tlsrecords import crafted_client_hello

    pkts = (connection(40000, SERVER, dport, crafted_client_hello(sni), 10.0)
            + connection(40001, SERVER, dport, b"x", 11.0))
    wrpcap(str(path), pkts)


def test_every_would_entry_names_its_direction(tmp_path):
    """The GFW's injectors reset both ends, Henan's only the client; the replay
    says which is which, and so for every other entry."""
    path = tmp_path / "h.pcap"
    hello_capture(path, "www.blocked.lab")
    gfw = list(replay(load_profile("gfw-sni-rst-2025"), path))
    injected = [w for w in gfw[0].would if w["action"] == "inject"]
    assert sorted((w["direction"], w["flags"], w["count"]) for w in injected) == [
        ("to-client", "R", 1), ("to-client", "RA", 1), ("to-client", "RA", 3),
        ("to-server", "R", 1), ("to-server", "RA", 1), ("to-server", "RA", 3)]
    assert gfw[1].verdict == "dropped-by-residual"
    henan = next(replay(load_profile("henan-2025"), path))
    assert henan.would == [{"action": "inject", "direction": "to-client", "proto": "tcp",
                            "count": 1, "flags": "RA"}]
    prober = next(replay(load_profile("gfw-prober"), path.parent / "h.pcap"))
    assert prober.verdict == "pass"  # a TLS hello is exempt from the FET rules
    path2 = tmp_path / "r.pcap"
    wrpcap(str(path2), connection(40000, SERVER, 9850, random.Random(2).randbytes(300), 1.0))
    probed = next(replay(load_profile("gfw-prober"), path2))
    assert {"action": "probe", "direction": "to-server", "target": f"{SERVER}:9850"} \
        in probed.would
    blocked = next(replay(load_profile("ip-blocklist", {"detectors": {"ip_blocklist": {
        "addresses": [SERVER]}}}), path2))
    assert blocked.would == [{"action": "drop", "direction": "both", "by": "ip_blocklist"}]
    outside = next(replay(load_profile("iran-2026", {"detectors": {"ip_allowlist": {
        "addresses": [], "domestic": []}}}), path2))
    assert outside.would == [{"action": "drop", "direction": "to-server", "by": "ip_allowlist"}]


# -- the schema of docs/lab/censor.md §4.1 ------------------------------------------------

def schema_tables() -> dict[str, dict[str, str]]:
    """The §4.1 tables: each table's name and its fields' types."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs/lab/censor.md").read_text()
    section = text[text.index("### 4.1 The verdict lines"):text.index("## 5. What it costs")]
    tables: dict[str, dict[str, str]] = {}
    name = None
    for line in section.splitlines():
        if line and not line.startswith("|") and line.rstrip().endswith(":"):
            name = line.split("(")[0].strip(" :").split()[-1].lower()
            tables[name] = {}
        elif line.startswith("| ") and name and not line.startswith("| field"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            tables[name][cells[0]] = cells[1]
    return tables


def check(value, type_text: str, tables: dict[str, dict[str, str]], where: str) -> None:
    """``value`` against a type of the §4.1 grammar; an AssertionError says where not."""
    choices = [c.strip() for c in type_text.replace(", optional", "").split("\\|")]
    for choice in choices:
        try:
            _check_one(value, choice, tables, where)
            return
        except AssertionError:
            continue
    raise AssertionError(f"{where}: {value!r} is not {type_text}")


def _check_one(value, choice: str, tables, where: str) -> None:
    if choice.startswith('"'):
        assert value == choice.strip('"')
    elif choice == "int":
        assert isinstance(value, int) and not isinstance(value, bool)
    elif choice == "float":
        assert isinstance(value, int | float) and not isinstance(value, bool)
    elif choice == "string":
        assert isinstance(value, str)
    elif choice == "bool":
        assert isinstance(value, bool)
    elif choice == "object":
        assert isinstance(value, dict)
    elif choice == "null":
        assert value is None
    elif choice.startswith("list of "):
        assert isinstance(value, list)
        for k, item in enumerate(value):
            check(item, choice[len("list of "):], tables, f"{where}[{k}]")
    else:
        table = tables[choice]
        assert isinstance(value, dict)
        assert set(value) <= set(table), f"{where}: undocumented {set(value) - set(table)}"
        for field_name, type_text in table.items():
            if "optional" not in type_text:
                assert field_name in value, f"{where}: no {field_name}"
            if field_name in value:
                check(value[field_name], type_text, tables, f"{where}.{field_name}")


def test_every_line_follows_the_documented_schema(tmp_path, capture):
    """Lines from several profiles and captures, through the CLI: every field is in
    §4.1's tables with its type, and every kind of line and entry turns up."""
    from tests.censor_sim.test_tspu_profiles import freeze_capture

    tables = schema_tables()
    assert set(tables) >= {"line", "flow", "would", "cause", "triple", "armed"}
    hello = tmp_path / "h.pcap"
    hello_capture(hello, "www.blocked.lab")
    froze, armed = tmp_path / "f.pcap", tmp_path / "a.pcap"
    freeze_capture(froze, [16000, 500, 500])
    freeze_capture(armed, [8000])
    runs = [(["gfw-fet-2021", "--set", json.dumps(FET_P1)], capture),
            (["gfw-sni-rst-2025"], hello), (["henan-2025"], hello), (["gfw-prober"], capture),
            (["ip-blocklist", "--set", '{"detectors": {"ip_blocklist": {"addresses": '
              '["198.18.3.2"]}}}'], capture),
            (["tspu-freeze-2025", "--set", '{"detectors": {"tls": {"servers": '
              '["198.18.5.0/24"]}}}'], froze),
            (["tspu-freeze-2025", "--set", '{"detectors": {"tls": {"servers": '
              '["198.18.5.0/24"]}}}'], armed),
            (["gfw-443-rst-2025-08-20"], hello)]
    seen_fields: set[str] = set()
    seen_would: set[tuple[str, str]] = set()
    for k, (args, pcap) in enumerate(runs):
        out = tmp_path / f"v{k}.jsonl"
        proc = cli(["--profile", *args, "--pcap", str(pcap), "--out", str(out)])
        assert proc.returncode == 0, proc.stderr
        for n, text in enumerate(out.read_text().splitlines()):
            line = json.loads(text)
            # The standard encoder's exact text, whichever wrote it (orjson, checked or
            # trusted to hold no float: censor_sim/eventjson.py).
            assert text == json.dumps(line, separators=(",", ":"))
            check(line, "line", tables, f"{args[0]} line {n + 1}")
            assert list(line) == list(tables["line"])  # every field, in the table's order
            seen_fields |= {f for f, v in line.items() if v not in (None, [], {})}
            seen_would |= {(w["action"], w.get("by", w["direction"])) for w in line["would"]}
    assert seen_fields >= {"cause", "armed", "would", "evidence", "detector"}
    assert seen_would >= {("inject", "to-client"), ("inject", "to-server"),
                          ("residual", "to-server"), ("probe", "to-server"),
                          ("drop", "ip_blocklist"), ("drop", "freeze")}


def _floats_in(value: Any) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [f for v in value.values() for f in _floats_in(v)]
    if isinstance(value, list | tuple):
        return [f for v in value for f in _floats_in(v)]
    return []


def test_a_verdict_said_to_hold_no_float_holds_none(capture, tmp_path):
    """The CLI trusts holds_no_float() to skip the encoder's look for odd floats; each
    verdict of these captures that says so has none, and both kinds turn up."""
    from tests.censor_sim.test_tspu_profiles import freeze_capture

    froze = tmp_path / "f.pcap"
    freeze_capture(froze, [16000, 500, 500])
    runs = [(load_profile("gfw-fet-2021", FET_P1), capture),
            (load_profile("tspu-freeze-2025", {"detectors": {"tls": {
                "servers": ["198.18.5.0/24"]}}}), froze)]
    said = {True: 0, False: 0}
    for profile, pcap in runs:
        for fv in replay(profile, pcap):
            plain = fv.holds_no_float()
            said[plain] += 1
            if plain:
                assert _floats_in(fv.to_json()) == [], fv
            else:
                assert _floats_in(fv.to_json()) or fv.evidence or fv.would, fv
    assert said[True] and said[False]
