"""Censor capacity, measured side by side in one run.

1. **Forwarding throughput** through the censor router with iperf3 (client
   node → bridge node), censor off against censor on, for ``ip-blocklist``
   (blocking another address, so the flow passes the sets) and
   ``gfw-fet-2021`` (the flow is queued, classified exempt and offloaded by
   conntrack mark; and on-path, where its first packets are copied). Target
   ratio on ÷ off ≥ 0.9 (docs/architecture.md §4.4); issue 23's goal is 0.95
   for both. Each censor-on run sits between two censor-off runs, and the
   row's figure is the median of those ratios; a row with the censor off both
   times (A/A) shows how far this measure moves by itself.
2. **Classifier throughput** offline: the FET, TLS (ClientHello + JA3/JA4) and
   HTTP detectors, and the whole engine (4-packet flows), over a corpus of
   recorded first packets. Target ≥ 5,000 flows/s.
3. **Marginal cost of issue 22's detectors** offline: the engine per packet on
   flows they do not match (the TCP corpus, plus DNS- and QUIC-like UDP
   flows), ``gfw-fet-2021`` alone against ``gfw-fet-2021`` with the
   ``openvpn``, ``wireguard``, ``dns_tunnel`` and ``tls_in_tls`` detectors
   added. Target: at most +10 % per packet (issue 22).
4. **Pcap mode** (``ptlab censor --pcap``): packets per second through the
   offline censor over a synthetic capture of the corpus's flows, for
   ``gfw-fet-2021`` and ``sni-blocklist`` (issue 23's goal: 100,000/s; CensorLab
   publishes 22–67 k/s for its PCAP mode). And end to end on a **realistic
   mix** (issue 46): a capture written from a seed (tests/support/mixcapture.py:
   about 235,000 packets in 27,600 flows of TLS with the server's data, fully
   encrypted TCP and QUIC, some naming blocked domains), run through ``ptlab
   censor --pcap ... --out FILE`` as a user runs it, process start included,
   for every profile with an offline mode; best of ``--mix-runs``. Goals:
   100,000 packets/s for each, 250,000 for ``gfw-fet-2021`` and
   ``sni-blocklist``. Then where the time goes (start-up, reading and parsing,
   the plan, the engine and loop, the output), from timings of each stage
   alone (docs/lab/censor.md §5.1).
5. **Live rate of new flows**: short TCP connections (connect, 64 random
   bytes, echo, close) and UDP exchanges as fast as one client can make them,
   censor off against ``gfw-fet-2021`` with p = 0 (every flow fully
   inspected, none blocked), in-path (NFQUEUE) and on-path (the NFLOG tap),
   beside the floor of each mechanism with no engine; and the censor's own
   per-packet cost from its counters: the callback's time, split into reading
   the packet, the engine and the verdict (the verdict's syscall also carries
   the packet on through the kernel), and the process's CPU per packet seen.
   Issue 23's goals: flows on ÷ off ≥ 0.9, at most 15 µs per queued packet.

Run: ``.venv/bin/python benchmarks/censor.py [--seconds 5]`` as root.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from netns.lab import Lab  # noqa: E402
from netns.nsenter import ns_socket  # noqa: E402
from netns.process import LabProcess  # noqa: E402
from netns.topology import default_topology  # noqa: E402
from ptcommon.events import READY_PATTERN, count_events  # noqa: E402


def iperf(lab: Lab, seconds: float) -> float:
    out = subprocess.run(["ip", "netns", "exec", lab.ns("client"), "iperf3", "-c",
                          lab.addr("bridge"), "-t", str(seconds), "-J"],
                         capture_output=True, text=True, timeout=seconds + 30)
    data = json.loads(out.stdout)
    return data["end"]["sum_received"]["bits_per_second"] / 1e6


def start_censor(lab: Lab, tmp: Path, profile: str, overrides: dict,
                 **config: Any) -> LabProcess:
    """The censor in the lab's censor namespace, ready; ``config`` adds keys to its
    config file (``time_kernel_program``)."""
    cfg = tmp / f"{profile}.json"
    cfg.write_text(json.dumps({"profile": profile, "overrides": overrides,
                               "inside": lab.iface("censor", "client"),
                               "outside": lab.iface("censor", "inet"), "seed": 1, **config}))
    p = LabProcess(lab.ns("censor"), [sys.executable, "-m", "censor_sim", "--config", str(cfg)],
                   "censor", tmp / f"{profile}.log").start()
    p.wait_log(READY_PATTERN, timeout=20)
    return p


# The tap's batching in the on-path rows: copies come up to 64 at a time, or
# 10 ms after the first. The packets themselves never wait.
TAP_BATCH, TAP_WAIT_MS = 64, 10
# And the largest batches a profile may ask for, up to 1,024 copies or reports
# or 100 ms after the first: "verdicts in batches", weighed for both the tap and
# the kernel fast path (the censor reacts up to 100 ms later).
BIG_BATCH, BIG_WAIT_MS = 1024, 100


def start_floor(lab: Lab, tmp: Path, mechanism: str = "queue", batch: int = 1) -> LabProcess:
    """The NFQUEUE or NFLOG floor (benchmarks/nfqueue_floor.py) in the censor's
    namespace."""
    script = Path(__file__).resolve().parent / "nfqueue_floor.py"
    p = LabProcess(lab.ns("censor"), [sys.executable, str(script), lab.iface("censor", "client"),
                                      lab.iface("censor", "inet"), mechanism, str(batch)],
                   "floor", tmp / f"floor-{mechanism}.log").start()
    p.wait_log(READY_PATTERN, timeout=20)
    return p


@contextmanager
def censor_running(lab: Lab, tmp: Path, profile: str, overrides: dict) -> Iterator[None]:
    """The censor, started and ready for the block's duration, then stopped."""
    p = start_censor(lab, tmp, profile, overrides)
    try:
        yield
    finally:
        final_counters(p)


def final_counters(p: LabProcess) -> dict:
    p.stop(timeout=5)
    for line in reversed(p.log_text().splitlines()):
        if count_events(line, "counters"):
            return json.loads(line)
    return {}


def corpus(n: int) -> list[bytes]:
    """First client payloads: random, TLS ClientHellos (Python's ssl), HTTP, SSH."""
    rng = random.Random(1)
    hellos = []
    for i in range(20):
        ctx = ssl.create_default_context()
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        obj = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(),
                           server_hostname=f"host{i}.example.com")
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hellos.append(out.read())
    out_list: list[bytes] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            out_list.append(rng.randbytes(rng.randrange(40, 1400)))
        elif kind == 1:
            out_list.append(hellos[i % len(hellos)])
        elif kind == 2:
            out_list.append(f"GET /p{i} HTTP/1.1\r\nHost: h{i}.lab\r\n\r\n".encode())
        else:
            out_list.append(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
    return out_list


def classifier_rates(n: int = 20000) -> dict[str, float]:
    from censor_sim import packet
    from censor_sim.detectors import NeedMore, fet, http
    from censor_sim.engine import Engine
    from censor_sim.profile import load_profile
    from ptcommon import tlshello

    data = corpus(n)
    rates: dict[str, float] = {}
    t = time.perf_counter()
    for d in data:
        fet.exemption(d)
    rates["fet"] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for d in data:
        try:
            h = tlshello.parse_client_hello(d)
            if h is not None:
                tlshello.ja3(h), tlshello.ja4(h)
        except NeedMore:
            pass
    rates["tls+ja3+ja4"] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for d in data:
        try:
            http.parse_request(d)
        except NeedMore:
            pass
    rates["http"] = n / (time.perf_counter() - t)
    for prof in ("gfw-fet-2021", "sni-blocklist", "gfw-keyword"):
        eng = Engine(load_profile(prof, {"policy": {"rules": []}}),
                     clock=time.monotonic, rng=random.Random(1))
        pkts = []
        for i, d in enumerate(data):
            c, s, cp = "198.18.0.2", "198.18.5.2", 10000 + i % 50000
            mk = packet.Packet
            pkts.append([
                (mk(b"", 4, c, s, 6, 64, 0, 20, cp, 443, 1, 0, packet.SYN, 5), True),
                (mk(b"", 4, s, c, 6, 64, 0, 20, 443, cp, 9, 2, packet.SYN | packet.ACK, 5), False),
                (mk(b"", 4, c, s, 6, 64, 0, 20, cp, 443, 2, 10, packet.ACK, 5), True),
                (mk(b"", 4, c, s, 6, 64, 0, 20, cp, 443, 2, 10, packet.ACK | packet.PSH, 5,
                    payload=d), True),
            ])
        t = time.perf_counter()
        for flow in pkts:
            for p, fc in flow:
                eng.handle(p, fc)
        rates[f"engine:{prof}"] = n / (time.perf_counter() - t)
    return rates


def _unmatched_flows(n: int) -> list[list[tuple[object, bool]]]:
    """Flows no VPN detector matches: the TCP corpus (handshake and one payload) and
    UDP flows shaped like DNS (a query, an answer) and QUIC (an Initial, answers)."""
    from censor_sim import packet

    mk, rng, c, s = packet.Packet, random.Random(4), "198.18.0.2", "198.18.5.2"
    flows = []
    for i, d in enumerate(corpus(n)):
        cp = 10000 + i % 50000
        if i % 3 == 0:
            dns = [(mk(b"", 4, c, s, 17, 64, 0, 20, cp, 53, payload=rng.randbytes(40)), True),
                   (mk(b"", 4, s, c, 17, 64, 0, 20, 53, cp, payload=rng.randbytes(90)), False)]
            flows.append(dns)
        elif i % 3 == 1:
            quic = [(mk(b"", 4, c, s, 17, 64, 0, 20, cp, 443,
                        payload=b"\xc3" + rng.randbytes(1199)), True)]
            quic += [(mk(b"", 4, s, c, 17, 64, 0, 20, 443, cp,
                         payload=bytes([0x40 | rng.randrange(64)]) + rng.randbytes(1000)), False)
                     for _ in range(5)]
            flows.append(quic)
        else:
            flows.append([
                (mk(b"", 4, c, s, 6, 64, 0, 20, cp, 443, 1, 0, packet.SYN, 5), True),
                (mk(b"", 4, s, c, 6, 64, 0, 20, 443, cp, 9, 2, packet.SYN | packet.ACK, 5), False),
                (mk(b"", 4, c, s, 6, 64, 0, 20, cp, 443, 2, 10, packet.ACK, 5), True),
                (mk(b"", 4, c, s, 6, 64, 0, 20, cp, 443, 2, 10, packet.ACK | packet.PSH, 5,
                    payload=d), True)])
    return flows


# Issue 22's detectors, as a profile's [detectors] tables.
NEW_DETECTORS = {"openvpn": {"kind": "openvpn"}, "wireguard": {"kind": "wireguard"},
                 "dns_tunnel": {"kind": "dns_tunnel"},
                 "tls_in_tls": {"kind": "tls_in_tls", "model": "tlsintls-2024"}}


def vpn_detector_cost(n: int = 12000, rounds: int = 5) -> dict[str, tuple[float, float]]:
    """Per-packet µs of the engine on unmatched flows, without and with the VPN
    detectors, for TCP flows, UDP flows and the mix; rounds alternate so drift hits
    both alike, and the medians are kept."""
    from censor_sim.engine import Engine
    from censor_sim.profile import load_profile

    mixed = _unmatched_flows(n)
    sets = {"tcp": [f for f in mixed if f[0][0].proto == 6],
            "udp": [f for f in mixed if f[0][0].proto == 17], "mixed": mixed}
    base = load_profile("gfw-fet-2021", {"policy": {"rules": []}})
    out: dict[str, tuple[float, float]] = {}
    for name, flows in sets.items():
        packets = sum(len(f) for f in flows)
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(rounds):
            for with_vpn in (False, True):
                prof = load_profile("gfw-fet-2021", {"policy": {"rules": []}})
                if with_vpn:
                    prof.detectors = {**base.detectors, **NEW_DETECTORS}
                    prof.datapath = {**prof.datapath, "inspect_packets": 400}
                eng = Engine(prof, clock=time.monotonic, rng=random.Random(1))
                t = time.perf_counter()
                for flow in flows:
                    for p, fc in flow:
                        eng.handle(p, fc)
                times[with_vpn].append((time.perf_counter() - t) / packets * 1e6)
        out[name] = (statistics.median(times[False]), statistics.median(times[True]))
    return out


def fet_with_vpn_profile(tmp: Path) -> Path:
    """gfw-fet-2021 plus issue 22's detectors, as a profile file."""
    from censor_sim.profile import profile_path

    text = profile_path("gfw-fet-2021").read_text().replace('name = "gfw-fet-2021"',
                                                             'name = "gfw-fet-2021-vpn"')
    text = text.replace("inspect_packets = 8", "inspect_packets = 400")  # openvpn's window
    for name, table in NEW_DETECTORS.items():
        text += f"\n[detectors.{name}]\n" + "".join(
            f'{k} = "{v}"\n' for k, v in table.items())
    path = tmp / "gfw-fet-2021-vpn.toml"
    path.write_text(text)
    return path


def pcap_rate(n: int = 6000, repeats: int = 3) -> dict[str, float]:
    """Packets per second of the offline censor over a capture of ``n`` flows (the
    corpus's TCP flows with a handshake, a payload, an answer and a teardown): the
    best of ``repeats`` replays, as timeit takes its best, since anything else on
    the machine only ever slows a replay down."""
    from scapy.all import IP, TCP, Raw, wrpcap
    from scapy.utils import wrpcapng

    from censor_sim.offline import replay
    from censor_sim.profile import load_profile
    from ptcommon import gcpolicy

    pkts = []
    for i, d in enumerate(corpus(n)):
        c, s, cp, t0 = "198.18.0.2", "198.18.5.2", 10000 + i % 50000, i * 0.01
        seq = [IP(src=c, dst=s) / TCP(sport=cp, dport=443, flags="S", seq=1),
               IP(src=s, dst=c) / TCP(sport=443, dport=cp, flags="SA", seq=9, ack=2),
               IP(src=c, dst=s) / TCP(sport=cp, dport=443, flags="A", seq=2, ack=10),
               IP(src=c, dst=s) / TCP(sport=cp, dport=443, flags="PA", seq=2, ack=10) / Raw(d),
               IP(src=s, dst=c) / TCP(sport=443, dport=cp, flags="PA", seq=10, ack=2 + len(d))
               / Raw(b"x" * 600),
               IP(src=c, dst=s) / TCP(sport=cp, dport=443, flags="FA", seq=2 + len(d), ack=610)]
        for k, p in enumerate(seq):
            p.time = t0 + k * 0.001
        pkts += seq
    with tempfile.TemporaryDirectory() as td:
        path, ng_path = Path(td) / "corpus.pcap", Path(td) / "corpus.pcapng"
        wrpcap(str(path), pkts)
        wrpcapng(str(ng_path), pkts)
        # Measure the censor as `ptlab censor --pcap` runs it: without this
        # process's scapy packets alive (every collection would walk them).
        n_packets = len(pkts)
        del pkts
        gcpolicy.for_packet_loop()
        rates = {}
        for prof, capture in (("gfw-fet-2021", path), ("sni-blocklist", path),
                              ("gfw-fet-2021 (pcapng)", ng_path)):
            profile = load_profile(prof.split()[0], {"policy": {"rules": []}})
            best = float("inf")
            for _ in range(repeats):
                t = time.perf_counter()
                for _ in replay(profile, capture):
                    pass
                best = min(best, time.perf_counter() - t)
            rates[prof] = n_packets / best
    return rates


def flow_rate(lab: Lab, seconds: float, port: int = 7300) -> float:
    """Short echo connections per second from the client node to the bridge node."""
    stop = threading.Event()
    srv = ns_socket(lab.ns("bridge"))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((lab.addr("bridge"), port))
    srv.listen(512)
    srv.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            with c:
                try:
                    c.sendall(c.recv(4096))
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    rng = random.Random(2)

    def exchange() -> None:
        with ns_socket(lab.ns("client")) as s:
            s.settimeout(2)
            s.connect((lab.addr("bridge"), port))
            s.sendall(rng.randbytes(64))
            s.recv(4096)

    try:
        return _exchanges_per_second(seconds, exchange)
    finally:
        stop.set()
        srv.close()


def _exchanges_per_second(seconds: float, exchange) -> float:
    """How many times ``exchange()`` completes per second over ``seconds``; one that
    raises OSError (a timeout, a refusal) does not count."""
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            exchange()
            n += 1
        except OSError:
            pass
    return n / (time.monotonic() - t0)


def udp_flow_rate(lab: Lab, seconds: float, port: int = 7400) -> float:
    """Short UDP exchanges per second (a fresh source port, 64 random bytes, the echo),
    like DNS: the flows a UDP detector must look at and let go."""
    stop = threading.Event()
    srv = ns_socket(lab.ns("bridge"), socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind((lab.addr("bridge"), port))
    srv.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            try:
                data, peer = srv.recvfrom(2048)
                srv.sendto(data, peer)
            except OSError:
                continue

    threading.Thread(target=serve, daemon=True).start()
    rng = random.Random(3)

    def exchange() -> None:
        with ns_socket(lab.ns("client"), socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(1)
            s.sendto(rng.randbytes(64), (lab.addr("bridge"), port))
            s.recv(2048)

    try:
        return _exchanges_per_second(seconds, exchange)
    finally:
        stop.set()
        srv.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--forwarding-rounds", type=int, default=7,
                    help="forwarding: censor-on runs, each between two censor-off runs")
    ap.add_argument("--only", choices=("offline", "mix", "forwarding", "flows"),
                    help="run one part of the benchmark (default: all)")
    ap.add_argument("--mix-runs", type=int, default=3,
                    help="realistic mix: runs per profile, the best kept")
    ap.add_argument("--mix-profiles", help="realistic mix: only these profiles (comma list)")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.forwarding_rounds < 1 or args.seconds <= 0:
        ap.error("--runs and --forwarding-rounds must be at least 1 and --seconds above 0")
    figures: dict[str, dict[str, float]] = {}
    floors: dict[str, dict[str, float]] = {}
    if args.only in (None, "offline"):
        offline_parts(figures)
    if args.only in (None, "offline", "mix"):
        mix_part(args, figures)
    if args.only not in ("offline", "mix"):
        live_parts(args, figures, floors)
    print_goals(figures, floors)
    return 0


# Issue 23's four speed goals: (what, goal, True if higher is better).
CPU_GOAL = "live censor, CPU per queued packet (µs)"
FLOWS_GOAL = "new TCP flows/s, censor on ÷ off (FET p=0)"
PCAP_GOAL = "pcap mode, packets/s (one core)"
MIX_GOAL = "pcap mode, realistic mix, end to end, packets/s"
FORWARDING_GOAL = "forwarding, censor on ÷ off"
GOALS = {CPU_GOAL: (15.0, False), FLOWS_GOAL: (0.9, True), PCAP_GOAL: (100_000.0, True),
         MIX_GOAL: (100_000.0, True), FORWARDING_GOAL: (0.95, True)}


def print_goals(figures: dict[str, dict[str, float]],
                floors: dict[str, dict[str, float]] | None = None) -> None:
    """Issue 23's goals beside this run's figures, each row met or not, and where
    the run measured one, the floor under the row: the same mechanism with no
    censor's work at all. A goal its floor misses too is out of reach for any
    censor built on that mechanism on this machine."""
    if not figures:
        return
    print("\nissue 23's and issue 46's goals, this run:")
    def meets(x: float, target: float, higher: bool) -> bool:
        return x >= target if higher else x <= target

    for goal, (default, higher) in GOALS.items():
        for label, value in figures.get(goal, {}).items():
            target = MIX_TARGETS.get(label, default) if goal == MIX_GOAL else default
            met = "met" if meets(value, target, higher) else "NOT met"
            line = (f"  {goal:44s} {label:28s} {value:12.3f}   goal "
                    f"{'≥' if higher else '≤'} {target:g}   {met}")
            floor = (floors or {}).get(goal, {}).get(label)
            if floor is not None:
                too = "" if meets(floor, target, higher) else ", which misses it too"
                line += f"   (floor {floor:.3f}{too})"
            print(line)


def offline_parts(figures: dict[str, dict[str, float]] | None = None) -> None:
    """Parts 2–4: the classifiers, issue 22's detectors and pcap mode, one core,
    under the collector policy the censor and ``ptlab censor --pcap`` run with
    (ptcommon/gcpolicy.py)."""
    from ptcommon import gcpolicy

    gcpolicy.for_packet_loop()
    print("classifier throughput (flows/s, offline, one core):")
    for k, v in classifier_rates().items():
        print(f"  {k:28s} {v:10.0f}")
    print("pcap mode (ptlab censor --pcap, one core, packets/s; goal 100,000):")
    for k, v in pcap_rate().items():
        print(f"  {k:28s} {v:10.0f}")
        if figures is not None:
            figures.setdefault(PCAP_GOAL, {})[k] = v
    print("issue 22's detectors (openvpn, wireguard, dns_tunnel, tls_in_tls) on flows "
          "they do not match (engine offline, µs per packet, median of 5):")
    print("  flows    gfw-fet-2021   + the four detectors    ratio")
    for name, (off, on) in vpn_detector_cost().items():
        print(f"  {name:6s}   {off:12.2f}   {on:21.2f}   {on / off:5.3f}")


# Profiles whose scope is a lab role: the mix's addresses for them (a capture has no lab).
def _mix_sets() -> dict[str, dict[str, Any]]:
    from tests.support import mixcapture as mc

    return {
        "ip-blocklist": {"detectors": {"ip_blocklist": {"addresses": mc.HOSTING}}},
        "iran-2026": {"detectors": {"ip_allowlist": {"addresses": mc.ALLOWLISTED,
                                                     "domestic": mc.DOMESTIC}}},
        "range-block": {"detectors": {"unclassified": {"servers": mc.HOSTING}}},
        "tspu-freeze-2025": {"detectors": {"tls": {"servers": mc.HOSTING}}},
    }


# Issue 46's goals for the realistic mix, packets/s end to end.
MIX_TARGETS = {"gfw-fet-2021": 250_000.0, "sni-blocklist": 250_000.0}
MIX_TARGET = 100_000.0


def offline_profiles() -> list[str]:
    """Every profile with an offline mode (a Geneva censor has none)."""
    from censor_sim.profile import available, load_profile
    from censor_sim.registry import make

    out = []
    for name in available():
        prof = load_profile(name)
        censors = [make(n, p) for n, p in prof.detectors.items()
                   if p.get("kind", n) not in ("ip_blocklist", "ip_allowlist")]
        if not any(getattr(c, "no_offline", None) for c in censors):
            out.append(name)
    return out


def mix_part(args: argparse.Namespace, figures: dict[str, dict[str, float]]) -> None:
    """The realistic mix through ``ptlab censor --pcap --out``, every offline profile."""
    from tests.support.mixcapture import write_mix

    load = os.getloadavg()
    names = args.mix_profiles.split(",") if args.mix_profiles else offline_profiles()
    sets = _mix_sets()
    with tempfile.TemporaryDirectory() as td:
        path = Path(td) / "mix.pcap"
        stats = write_mix(path)
        print(f"\nrealistic mix (seed 46): {stats.packets:,} packets in {stats.flows:,} flows "
              f"({', '.join(f'{k} {v:,}' for k, v in sorted(stats.by_kind.items()))}); "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print(f"  {'profile':28s} {'packets/s':>10s} {'(CPU)':>10s}   flows acted on   goal")
        for name in names:
            best, cpu, acted = _mix_run(name, sets.get(name), path, Path(td), args.mix_runs)
            goal = MIX_TARGETS.get(name, MIX_TARGET)
            rate = stats.packets / best
            met = "met" if rate >= goal else "NOT met"
            print(f"  {name:28s} {rate:10,.0f} {stats.packets / cpu:10,.0f}   {acted:14s}   "
                  f"≥ {goal:,.0f} {met}")
            figures.setdefault(MIX_GOAL, {})[name] = rate
        print(f"  (best of {args.mix_runs} wall-clock runs each, process start included; "
              "CPU: the same run's user+system time)")
        for name in ("gfw-fet-2021", "sni-blocklist"):
            if name in names:
                _where_the_time_goes(name, path, stats.packets)


def _mix_run(name: str, sets: dict[str, Any] | None, path: Path, tmp: Path,
             runs: int) -> tuple[float, float, str]:
    """The best wall time (and its run's CPU time) of ``runs`` CLI runs, and the
    summary line's "N of M" flows acted on."""
    argv = [sys.executable, "-m", "ptlab", "censor", "--profile", name, "--pcap", str(path),
            "--out", str(tmp / "verdicts.jsonl")]
    if sets:
        argv += ["--set", json.dumps(sets)]
    best, best_cpu, acted = float("inf"), float("inf"), "?"
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise RuntimeError(f"{name}: {proc.stderr.strip()}")
        if wall < best:
            best = wall
            best_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        acted = proc.stderr.split(":", 1)[1].split("flows")[0].strip()
    return best, best_cpu, acted


def _where_the_time_goes(name: str, path: Path, packets: int, runs: int = 3) -> None:
    """Each stage of ``ptlab censor --pcap`` timed alone (CPU time), best of ``runs``
    each, in one child process: start-up (imports and the profile), reading and parsing the
    capture (censor_sim.pcapbatch), the plan of each batch (censor_sim.offlineplan),
    the engine and the loop (the replay less the two before it), and writing the
    lines (the CLI less the replay, start-up included)."""
    script = f"""
import json, sys, time
t0 = time.process_time()
import censor_sim.offline as offline, censor_sim.pcapbatch as pb, censor_sim.offlineplan as op
from censor_sim.profile import load_profile
from censor_sim.eventjson import encode
from ptcommon import gcpolicy
prof = load_profile({name!r})
gcpolicy.for_packet_loop()
start = time.process_time() - t0
best = {{}}
def clock(key, fn):
    # CPU time, not wall: the stages are differences, and a shared machine's waits
    # would swamp them.
    t = time.process_time(); fn(); best[key] = min(best.get(key, 9e9), time.process_time() - t)
def read():
    for _ in pb.batches({str(path)!r}): pass
def plan():
    n = 0
    for b in pb.batches({str(path)!r}):
        p = op.Plan(b, start_count=n, flush_every=1024, idle_s=120.0, every_packet_protos=set(),
                    censor_may_act=None, residual_keys=[], client_side=None, freeze=False)
        n = p.count_after
def replay():
    for _ in offline.replay(prof, {str(path)!r}): pass
def output():
    with open('/dev/null', 'w') as f:
        for v in offline.replay(prof, {str(path)!r}): f.write(encode(v.to_json()) + '\\n')
for _ in range({runs}):
    clock('read', read); clock('plan', plan); clock('replay', replay); clock('output', output)
print(json.dumps({{'start': start, **best}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=1800, cwd=str(Path(__file__).resolve().parent.parent))
    if proc.returncode != 0:
        print(f"  where the time goes ({name}): failed: {proc.stderr.strip()[-300:]}")
        return
    t = json.loads(proc.stdout)
    parts = {"start-up (imports, profile)": t["start"],
             "read and parse (numpy)": t["read"],
             "plan of each batch": t["plan"] - t["read"],
             "engine and loop": t["replay"] - t["plan"],
             "output (JSON lines)": t["output"] - t["replay"]}
    total = sum(parts.values())
    print(f"  where the time goes, {name} (CPU, best of {runs} per stage; µs per packet):")
    for label, sec in parts.items():
        print(f"    {label:32s} {sec:7.3f} s  {sec / packets * 1e6:6.2f} µs  "
              f"{sec / total:5.1%}")


def live_parts(args: argparse.Namespace,
               figures: dict[str, dict[str, float]] | None = None,
               floors: dict[str, dict[str, float]] | None = None) -> None:
    """Parts 1 and 5: forwarding and new flows through the censor router."""
    with Lab(default_topology(proxies=0)) as lab, tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        iperf_srv = LabProcess(lab.ns("bridge"), ["iperf3", "-s", "-B", lab.addr("bridge")],
                               "iperf3", tmp / "iperf3.log").start()
        time.sleep(0.5)
        try:
            if args.only in (None, "forwarding"):
                forwarding(lab, tmp, args, figures, floors)
            if args.only in (None, "flows"):
                new_flows(lab, tmp, args, figures, floors)
        finally:
            iperf_srv.stop()


class ConntrackFloor:
    """Connection tracking and nothing else in the censor's namespace: the floor
    under any censor that keeps flow state (FET's needs it, for connbytes and
    the flow marks), in-path or on the tap. A table of the lab's own, removed on
    exit whatever happens."""

    TABLE = "ptlctfloor"

    def __init__(self, lab: Lab) -> None:
        self.ns = lab.ns("censor")

    def _nft(self, script: str) -> None:
        subprocess.run(["ip", "netns", "exec", self.ns, "nft", "-f", "-"], input=script,
                       text=True, check=True, capture_output=True, timeout=10)

    def __enter__(self) -> ConntrackFloor:
        self._nft(f"table inet {self.TABLE} {{\n  chain track {{\n    type filter hook forward "
                  "priority -200; policy accept;\n    ct state new counter\n  }\n}\n")
        return self

    def __exit__(self, *exc: object) -> None:
        self._nft(f"delete table inet {self.TABLE}\n")


# Each goal row's floor: the row measured with the same mechanism and no engine.
CONNTRACK_FLOOR = "conntrack alone (floor)"
FORWARDING_FLOORS = {"gfw-fet-2021": CONNTRACK_FLOOR,
                     "gfw-fet-2021 on-path (tap)": CONNTRACK_FLOOR,
                     "gfw-fet-2021 in the kernel": CONNTRACK_FLOOR}


NO_CENSOR_AA = "censor off (A/A: off ÷ off)"


def bracketed_ratios(measure_off: Callable[[], float], measure_on: Callable[[], float],
                     rounds: int) -> tuple[list[float], list[float], list[float]]:
    """``rounds`` on-runs, each between two off-runs (off, on, off, on, ..., off:
    neighbours share their off-run), and each on-run's ratio to the mean of the
    off-runs on either side. Why: this VM's iperf3 figure drifts by ±10 % from
    one run to the next, with the censor or without; a ratio to both neighbours
    cancels the drift that a ratio of two medians keeps."""
    offs, ons = [measure_off()], []
    for _ in range(rounds):
        ons.append(measure_on())
        offs.append(measure_off())
    ratios = [on / ((offs[i] + offs[i + 1]) / 2) for i, on in enumerate(ons)]
    return offs, ons, ratios


def forwarding(lab: Lab, tmp: Path, args: argparse.Namespace,
               figures: dict[str, dict[str, float]] | None = None,
               floors: dict[str, dict[str, float]] | None = None) -> None:
    """Part 1: iperf3 through the router, censor off and on, bracketed; the floor
    under the stateful censors, conntrack with no censor at all; and the same
    measure with the censor off both times, which shows its own noise."""
    rounds = args.forwarding_rounds
    print(f"\nforwarding throughput (iperf3, {args.seconds:.0f} s runs; {rounds} rounds, each "
          "censor-on run between two censor-off runs; on ÷ off is the median of the "
          "rounds' ratios, with their range):")
    cases: dict[str, Any] = {
        NO_CENSOR_AA: None,
        "ip-blocklist": lambda: censor_running(lab, tmp, "ip-blocklist", {"detectors": {
            "ip_blocklist": {"addresses": ["198.19.255.1"]}}}),
        CONNTRACK_FLOOR: lambda: ConntrackFloor(lab),
        "gfw-fet-2021": lambda: censor_running(lab, tmp, "gfw-fet-2021", {}),
        "gfw-fet-2021 on-path (tap)": lambda: censor_running(lab, tmp, "gfw-fet-2021", {
            "datapath": {"mode": "on-path", "tap_batch": TAP_BATCH,
                         "tap_wait_ms": TAP_WAIT_MS}}),
        # The tc program runs on every packet from the client side, bulk data too.
        "gfw-fet-2021 in the kernel": lambda: censor_running(lab, tmp, "gfw-fet-2021", {
            "datapath": {"mode": "on-path", "tap_batch": TAP_BATCH,
                         "tap_wait_ms": TAP_WAIT_MS, "fast_path": "ebpf"}}),
    }
    ratios: dict[str, float] = {}
    for label, running in cases.items():
        def on(running=running) -> float:
            if running is None:
                return iperf(lab, args.seconds)
            with running():
                return iperf(lab, args.seconds)
        offs, ons, per_round = bracketed_ratios(lambda: iperf(lab, args.seconds), on, rounds)
        ratio = statistics.median(per_round)
        ratios[label] = ratio
        print(f"  {label:28s} off {statistics.median(offs):8.0f}  on {statistics.median(ons):8.0f}"
              f" Mbit/s   on/off = {ratio:.3f}   (rounds {min(per_round):.3f}–"
              f"{max(per_round):.3f}: {[round(x, 3) for x in per_round]})")
        if figures is not None and label not in (CONNTRACK_FLOOR, NO_CENSOR_AA):
            figures.setdefault(FORWARDING_GOAL, {})[label] = ratio
    if floors is not None:
        for label, floor in FORWARDING_FLOORS.items():
            floors.setdefault(FORWARDING_GOAL, {})[label] = ratios[floor]


# new_flows's rows that issue 23's goals are about, and the floor under each (the same
# mechanism with no engine), with the name the goal summary gives both.
QUEUE_FLOOR = "NFQUEUE floor (no engine)"
TAP_FLOOR = f"NFLOG floor (no engine, batch {TAP_BATCH})"
FET_IN_PATH = "gfw-fet-2021 (p=0, all inspected)"
FET_TAP = "gfw-fet-2021 on-path (NFLOG tap)"
FET_KERNEL = "gfw-fet-2021 on-path, FET in the kernel"
FET_TAP_BIG = f"gfw-fet-2021 on-path, batch {BIG_BATCH}/{BIG_WAIT_MS} ms"
FET_KERNEL_BIG = f"FET in the kernel, batch {BIG_BATCH}/{BIG_WAIT_MS} ms"
GOAL_ROWS = {FET_IN_PATH: "gfw-fet-2021 in-path", FET_TAP: "gfw-fet-2021 on-path (tap)",
             FET_KERNEL: "gfw-fet-2021 kernel fast path",
             FET_TAP_BIG: f"tap, batch {BIG_BATCH}/{BIG_WAIT_MS} ms",
             FET_KERNEL_BIG: f"kernel, batch {BIG_BATCH}/{BIG_WAIT_MS} ms"}
FLOW_FLOORS = {QUEUE_FLOOR: GOAL_ROWS[FET_IN_PATH], TAP_FLOOR: GOAL_ROWS[FET_TAP]}


def _record_live(table: dict[str, dict[str, float]] | None, name: str, ratio: float,
                 fin: dict) -> None:
    """A live row's flow ratio and CPU per queued packet, under the goal summary's
    ``name``, into ``table`` (the run's figures, or its floors)."""
    if table is None:
        return
    table.setdefault(FLOWS_GOAL, {})[name] = ratio
    cpu = kernel_cpu_per_flow_us(fin) if fin.get("mechanism") == "ebpf" else fin.get(
        "cpu_per_packet_us")
    if cpu is not None:
        table.setdefault(CPU_GOAL, {})[name] = cpu


def kernel_cpu_per_flow_us(fin: dict) -> float | None:
    """The kernel fast path's CPU per judged first payload: the censor process's
    (which hears only of not-exempt flows) plus the program's own run time on
    every packet it ran on (BPF run-time stats), over the payloads it judged.
    Nothing is queued on this path, so this is its "per queued packet" figure."""
    kernel = fin.get("kernel") or {}
    judged = kernel.get("judged")
    if not judged or fin.get("cpu_s") is None or kernel.get("run_ns") is None:
        return None
    return round((fin["cpu_s"] + kernel["run_ns"] / 1e9) / judged * 1e6, 2)


def new_flows(lab: Lab, tmp: Path, args: argparse.Namespace,
              figures: dict[str, dict[str, float]] | None = None,
              floors: dict[str, dict[str, float]] | None = None
              ) -> dict[str, dict[str, float]]:
    """Part 5: short flows through the router, each row against censor off.

    This machine's rate drifts by 10–20 % within a minute, so every row is
    measured as ``--runs`` pairs (off, then on, back to back) and reports the
    median of its pairs' ratios. Returns {protocol: {row: ratio}}."""
    fet_p0 = {"policy": {"rules": [
        {"detector": "fet", "action": "residual", "probability": 0.0}]}}
    tap = {**fet_p0, "datapath": {"mode": "on-path", "tap_batch": TAP_BATCH,
                                  "tap_wait_ms": TAP_WAIT_MS}}
    kernel = {**fet_p0, "datapath": {**tap["datapath"], "fast_path": "ebpf"}}
    big = {"tap_batch": BIG_BATCH, "tap_wait_ms": BIG_WAIT_MS}
    tap_big = {**fet_p0, "datapath": {**tap["datapath"], **big}}
    kernel_big = {**fet_p0, "datapath": {**kernel["datapath"], **big}}
    rows: list[tuple[str, Any]] = [
        (QUEUE_FLOOR, lambda: start_floor(lab, tmp, "queue")),
        (TAP_FLOOR, lambda: start_floor(lab, tmp, "tap", TAP_BATCH)),
        (FET_IN_PATH, lambda: start_censor(lab, tmp, "gfw-fet-2021", fet_p0)),
        ("+ issue 22's detectors", lambda: start_censor(lab, tmp, str(fet_with_vpn_profile(tmp)),
                                                        fet_p0)),
        ("gfw-fet-2021 on-path, SYNs copied", lambda: start_censor(
            lab, tmp, "gfw-fet-2021", {**tap, "datapath": {**tap["datapath"],
                                                           "watch_births": False}})),
        (FET_TAP, lambda: start_censor(lab, tmp, "gfw-fet-2021", tap)),
        (FET_KERNEL, lambda: start_censor(lab, tmp, "gfw-fet-2021", kernel,
                                          time_kernel_program=True)),
        (FET_TAP_BIG, lambda: start_censor(lab, tmp, "gfw-fet-2021", tap_big)),
        (FET_KERNEL_BIG, lambda: start_censor(lab, tmp, "gfw-fet-2021", kernel_big,
                                              time_kernel_program=True)),
    ]
    ratios: dict[str, dict[str, float]] = {}
    port = 7300
    for proto, what, rate_of in (
            ("tcp", "TCP flows (connect, 64 bytes, echo, close)", flow_rate),
            ("udp", "UDP flows (a query and its answer)", udp_flow_rate)):
        print(f"\nnew {what} through the router ({args.seconds:g} s each, one client; "
              f"median of {args.runs} off/on pairs):")
        ratios[proto] = {}
        costs = []
        for label, start in rows:
            offs, ons, pair = [], [], []
            fin: dict = {}
            for _ in range(args.runs):
                offs.append(rate_of(lab, args.seconds, port=port))
                proc = start()
                ons.append(rate_of(lab, args.seconds, port=port + 1))
                fin = final_counters(proc)
                pair.append(ons[-1] / offs[-1] if offs[-1] else 0.0)
                port += 2
            ratio = statistics.median(pair)
            ratios[proto][label] = ratio
            print(f"  {label:40s} {statistics.median(ons):6.0f} flows/s (off "
                  f"{statistics.median(offs):.0f})   on/off = {ratio:.3f}   "
                  f"pairs {[round(r, 3) for r in pair]}")
            seen = fin.get("queued")
            if proto == "tcp" and label in GOAL_ROWS:
                _record_live(figures, GOAL_ROWS[label], ratio, fin)
            if proto == "tcp" and label in FLOW_FLOORS:
                _record_live(floors, FLOW_FLOORS[label], ratio, fin)
            if fin.get("mechanism") == "ebpf":
                k = fin.get("kernel") or {}
                runs = k.get("runs") or 0
                print(f"  {'':40s} last run: ebpf, {k.get('judged')} payloads judged in the "
                      f"kernel, {seen} reported; CPU per judged payload "
                      f"{kernel_cpu_per_flow_us(fin)} µs (process {fin.get('cpu_s')} s, "
                      f"program {round(k.get('run_ns', 0) / runs, 1) if runs else None} ns "
                      f"per packet over {runs} packets)")
            elif "engine" in fin:
                costs.append(fin.get("per_packet_us") or 0.0)
                print(f"  {'':40s} last run: {fin.get('mechanism')}, {seen} packets seen; per "
                      f"packet CPU {fin.get('cpu_per_packet_us')} µs (user "
                      f"{fin.get('user_per_packet_us')}); callback "
                      f"{fin.get('per_packet_us')} µs, split {fin.get('per_packet_split_us')}")
            else:
                print(f"  {'':40s} last run: {seen} packets seen; per packet CPU "
                      f"{fin.get('cpu_per_packet_us')} µs (user {fin.get('user_per_packet_us')})")
        if len(costs) > 1 and costs[0]:
            print(f"  per-packet cost, issue 22's detectors / FET alone = "
                  f"{costs[1] / costs[0]:.3f}")
        else:  # FET reads TCP alone: its censor sees no UDP (docs/lab/censor.md §1)
            print("  per-packet cost, issue 22's detectors / FET alone: FET saw no packet")
    return ratios


if __name__ == "__main__":
    raise SystemExit(main())
