"""Our censor beside OpenGFW, a second implementation, on the same flows.

Every censor model in censor_sim is ours alone. OpenGFW (apernet/OpenGFW, pinned in
scripts/peers.toml, built by ``scripts/setup --peers``) implements several of the
same detectors independently, in Go, from the same papers. This runs both over the
same captures and prints, for each analyzer both have, how often they agree:

    source   pair   flows   both   only-ours   only-theirs

Sources: the client-side captures of a lab run (``--results DIR``, every cell's
``__censor-client.pcap``; ``ptlab run`` keeps them), any capture (``--pcap FILE``),
and the benign mix of tests/support/mixcapture.py (TLS, fully encrypted TCP and
QUIC, some naming blocked names; ``--mix-flows``, 0 for none).

OpenGFW runs offline here: its live I/O needs the nftables ``queue`` statement,
which this kernel lacks (docs/lab/kernel-limits.md), so it reads each capture
with its pcap mode (``-p FILE``), in which its actions do nothing. Its rules are
log-only, one per analyzer, so a flow is judged by every analyzer to its end
(a rule with an action stops the flow's analysis at its first match), and its
log's ``ruleset log`` lines say which rule matched which flow. Ours runs each
pair's profile through :func:`censor_sim.offline.replay` (``ptlab censor --pcap``)
with the pair's rule made certain (``drop``, probability 1), so a flag is the
detector's verdict, not a coin's. docs/censors/crosscheck.md reads every
disagreement against the paper behind our model.

Run: ``.venv/bin/python benchmarks/cross_censor.py [--results DIR ...] [--json]``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from censor_sim import offline, pcapbatch  # noqa: E402
from censor_sim.profile import load_profile  # noqa: E402
from ptlab.common import peers  # noqa: E402

#: A flow, the same to both censors whichever end each calls the client:
#: (protocol, the two endpoints sorted).
FlowId = tuple[str, tuple[tuple[str, int], tuple[str, int]]]

#: Names the SNI pairs block: the mix's blocked names and the lab's own (the
#: proxies' certificate names and the web.lab site REALITY borrows).
SNI_BLOCKLIST = ["blocked.lab", "ptl.example", "web.lab"]
TCP, UDP = "tcp", "udp"


def _sni_expr(field_path: str, names: list[str]) -> str:
    """OpenGFW's expression for our suffix mode: the name itself or a subdomain."""
    alts = " || ".join(f'sni == "{n}" || sni endsWith ".{n}"' for n in names)
    return f"let sni = string({field_path}); sni != \"\" && ({alts})"


@dataclass(frozen=True)
class Pair:
    """One analyzer both censors have: our profile and detector, their analyzer and
    the rule expression that makes its properties a flag."""

    name: str
    profile: str
    detector: str
    analyzer: str
    expr: str
    protocols: tuple[str, ...]
    overrides: dict[str, Any] = field(default_factory=dict)

    def our_overrides(self) -> dict[str, Any]:
        rule = {"detector": self.detector, "action": "drop", "probability": 1.0}
        return {**self.overrides, "policy": {"rules": [rule]}}


PAIRS: tuple[Pair, ...] = (
    # Wu et al. 2023's Algorithm 1 on the first client payload; theirs as their
    # rules page writes it. Ours is scoped to the lab's and the mix's ranges.
    Pair("fet", "gfw-fet-2021", "fet", "fet", "fet != nil && fet.yes", (TCP,),
         {"detectors": {"fet": {"servers": [], "ports": []}}}),
    # The ClientHello's server_name against the same names (suffix on labels).
    Pair("tls-sni", "sni-blocklist", "tls", "tls", _sni_expr("tls?.req?.sni", SNI_BLOCKLIST),
         (TCP,), {"detectors": {"tls": {"sni": SNI_BLOCKLIST}}}),
    # QUIC Initial's SNI: ours is the GFW's parser as Zohaib et al. measured it.
    Pair("quic-sni", "gfw-quic-sni-2024", "quic_sni", "quic",
         _sni_expr("quic?.req?.sni", SNI_BLOCKLIST), (UDP,),
         {"detectors": {"quic_sni": {"sni": SNI_BLOCKLIST}}}),
    # TLS inside a TLS (or other) tunnel: ours is Xue et al. 2024's classifier,
    # theirs a decision tree on the four byte counts after the client's CCS.
    Pair("tls-in-tls/trojan", "tls-in-tls-2024", "tls_in_tls", "trojan",
         "trojan != nil && trojan.yes", (TCP,)),
    # Xue et al. 2022: ours their opcode and ACK fingerprints over 100 packets;
    # theirs a hard-reset exchange then valid opcodes, flagged past 50 packets.
    Pair("openvpn", "openvpn-fingerprint-2022", "openvpn", "openvpn",
         "openvpn != nil && openvpn.rx_pkt_cnt + openvpn.tx_pkt_cnt > 50", (TCP, UDP)),
    # A handshake initiation answered by a response that echoes its index.
    Pair("wireguard", "tspu-wireguard-2023", "wireguard", "wireguard",
         "wireguard?.handshake_response?.receiver_index_matched == true", (UDP,)),
)

def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return ipaddress.ip_address(host.strip("[]")).compressed, int(port)


def flow_id(proto: str, a: tuple[str, int], b: tuple[str, int]) -> FlowId:
    ends = sorted([(ipaddress.ip_address(a[0]).compressed, a[1]),
                   (ipaddress.ip_address(b[0]).compressed, b[1])])
    return proto, (ends[0], ends[1])


# -- ours ---------------------------------------------------------------------------

def ours(pair: Pair, pcap: Path) -> tuple[set[FlowId], set[FlowId], dict[FlowId, Any]]:
    """(every flow of ``pcap``, those ``pair``'s detector flags, our evidence per flag)."""
    profile = load_profile(pair.profile, pair.our_overrides())
    every, flagged, evidence = set(), set(), {}
    for fv in offline.replay(profile, pcap):
        f = fv.flow
        proto = {6: TCP, 17: UDP}.get(f["proto"])
        if proto is None:
            continue
        fid = flow_id(proto, (f["client"], f["client_port"]), (f["server"], f["server_port"]))
        every.add(fid)
        if fv.detector == pair.detector and fv.verdict != "pass":
            flagged.add(fid)
            evidence[fid] = fv.evidence
    return every, flagged, evidence


# -- theirs -------------------------------------------------------------------------

def rules_yaml(pairs: Iterable[Pair]) -> str:
    """Log-only rules, one per pair and protocol (JSON is YAML, and needs no quoting
    rules of its own)."""
    rules = [{"name": f"{p.name}|{proto}", "log": True,
              "expr": f'proto == "{proto}" && ({p.expr})'}
             for p in pairs for proto in p.protocols]
    return json.dumps(rules, indent=1)


#: Their engine's settings for a replay: one worker (the flows' order is the capture's).
CONFIG_YAML = json.dumps({"workers": {"count": 1, "queueSize": 4096},
                          "replay": {"realtime": False}})


def theirs(binary: str, pcap: Path, pairs: Iterable[Pair], timeout: float = 600.0
           ) -> tuple[dict[str, set[FlowId]], dict[FlowId, Any]]:
    """(flows each pair's rule matched; their last properties per matched flow),
    from OpenGFW's pcap mode over ``pcap``."""
    pairs = list(pairs)
    with tempfile.TemporaryDirectory(prefix="ptl-opengfw-") as tmp:
        rules, config = Path(tmp, "rules.yaml"), Path(tmp, "config.yaml")
        rules.write_text(rules_yaml(pairs))
        config.write_text(CONFIG_YAML)
        proc = subprocess.run([binary, "-c", str(config), "-p", str(pcap), "-f", "json",
                               "-l", "info", str(rules)], capture_output=True, text=True,
                              timeout=timeout, cwd=tmp)
    matched: dict[str, set[FlowId]] = {p.name: set() for p in pairs}
    props: dict[FlowId, Any] = {}
    errors = []
    for line in proc.stderr.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("level") in ("error", "fatal"):
            errors.append(entry.get("msg", "") + " " + str(entry.get("error", "")))
        if entry.get("msg") != "ruleset log":
            continue
        name, _, proto = entry["name"].rpartition("|")
        fid = flow_id(proto, _endpoint(entry["src"]), _endpoint(entry["dst"]))
        matched[name].add(fid)
        props[fid] = entry.get("props")
    if proc.returncode != 0 or errors:
        raise RuntimeError(f"OpenGFW on {pcap} exited {proc.returncode}: "
                           + "; ".join(errors[:3] or proc.stderr.strip().splitlines()[-3:]))
    return matched, props


# -- the comparison -----------------------------------------------------------------

@dataclass
class Agreement:
    source: str
    pair: str
    flows: int
    both: int
    only_ours: int
    only_theirs: int
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def row(self) -> str:
        return (f"{self.source:<36} {self.pair:<18} {self.flows:>6} {self.both:>6} "
                f"{self.only_ours:>10} {self.only_theirs:>12}")


HEADER = (f"{'source':<36} {'pair':<18} {'flows':>6} {'both':>6} "
          f"{'only-ours':>10} {'only-theirs':>12}")


@dataclass
class Timing:
    """Seconds each side took over the same captures, and the floor: reading them."""

    packets: int = 0
    captures: int = 0
    read_s: float = 0.0  # the captures read and their headers parsed, nothing judged
    ours_s: float = 0.0  # one replay per pair and capture
    pairs: int = len(PAIRS)
    theirs_s: float = 0.0  # one OpenGFW run per capture, every analyzer at once

    def lines(self) -> list[str]:
        def rate(sec: float) -> str:
            return f"{self.packets / sec:>11,.0f} packets/s" if sec > 0 else ""

        per_pair = self.ours_s / max(1, self.pairs)
        # Its pcap mode waits a second after each capture's last packet (io/pcap.go).
        drained = self.theirs_s - self.captures
        rows = [("reading the captures alone", self.read_s, True),
                ("ours, one pair (a replay each)", per_pair, True),
                (f"ours, all {self.pairs} pairs", self.ours_s, False),
                (f"OpenGFW, all {self.pairs} at once (a run each)", self.theirs_s, False),
                ("  less its 1 s wait after each", drained, True)]
        return [f"time over {self.packets:,} packets in {self.captures} capture(s):"] + [
            f"  {label:<40} {sec:8.2f} s {rate(sec) if with_rate else ''}".rstrip()
            for label, sec, with_rate in rows]


def read_floor(pcap: Path) -> tuple[int, float]:
    """(packets, seconds) to read ``pcap`` and parse its headers, as both replays must."""
    started = time.perf_counter()
    packets = sum(batch.n for batch in pcapbatch.batches(pcap))
    return packets, time.perf_counter() - started


def _describe(fid: FlowId, info: Any) -> dict[str, Any]:
    proto, (a, b) = fid
    return {"proto": proto, "ends": [f"{a[0]}:{a[1]}", f"{b[0]}:{b[1]}"], "detail": info}


def compare(source: str, pcap: Path, binary: str, pairs: Iterable[Pair] = PAIRS,
            examples: int = 3, timing: Timing | None = None) -> list[Agreement]:
    """Each pair's agreement over ``pcap``; up to ``examples`` flows of each kind of
    disagreement, with the evidence of whichever side flagged it."""
    pairs = list(pairs)
    timing = timing if timing is not None else Timing()
    packets, read_s = read_floor(pcap)
    timing.packets += packets
    timing.captures += 1
    timing.read_s += read_s
    timing.pairs = len(pairs)
    started = time.perf_counter()
    matched, props = theirs(binary, pcap, pairs)
    timing.theirs_s += time.perf_counter() - started
    out = []
    for pair in pairs:
        started = time.perf_counter()
        every, mine, evidence = ours(pair, pcap)
        timing.ours_s += time.perf_counter() - started
        other = matched[pair.name]
        universe = every | other
        only_o, only_t = sorted(mine - other), sorted(other - mine)
        out.append(Agreement(
            source, pair.name, len(universe), len(mine & other), len(only_o), len(only_t),
            {"only_ours": [_describe(f, evidence.get(f)) for f in only_o[:examples]],
             "only_theirs": [_describe(f, (props.get(f) or {}).get(pair.analyzer))
                             for f in only_t[:examples]]}))
    return out


def lab_captures(results: Path) -> list[tuple[str, Path]]:
    """(row/column, its client-side capture) of every cell of a lab run."""
    data = json.loads((results / "results.json").read_text())
    found = []
    for row in data["rows"]:
        for rel in row.get("pcaps") or []:
            if rel.endswith("__censor-client.pcap") and (results / rel).is_file():
                found.append((f"{row['transport']}/{row['censor']}", results / rel))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, action="append", default=[],
                        help="a lab run's results directory (repeatable)")
    parser.add_argument("--pcap", type=Path, action="append", default=[],
                        help="a capture (classic pcap, Ethernet) (repeatable)")
    parser.add_argument("--mix-flows", type=int, default=3000,
                        help="flows of the benign mix (0: none)")
    parser.add_argument("--mix-seed", type=int, default=46)
    parser.add_argument("--opengfw", help="the OpenGFW binary (default: the built peer)")
    parser.add_argument("--json", action="store_true",
                        help="print the agreements, with examples, as JSON")
    args = parser.parse_args(argv)
    if args.mix_flows < 0:
        parser.error("--mix-flows: at least 0")
    built = peers.locate("opengfw")
    if args.opengfw:
        binary, which = args.opengfw, args.opengfw
    elif built is not None:
        binary, which = built[0], built[1].removeprefix("peers ")
    else:
        print(f"cross_censor: {peers.ToolMissing('opengfw')}", file=sys.stderr)
        return 2
    sources: list[tuple[str, Path]] = []
    for results in args.results:
        sources += lab_captures(results)
    sources += [(p.name, p) for p in args.pcap]
    with tempfile.TemporaryDirectory(prefix="ptl-mix-") as tmp:
        if args.mix_flows:
            from tests.support.mixcapture import write_mix

            mix = Path(tmp, "mix.pcap")
            write_mix(mix, seed=args.mix_seed, flows=args.mix_flows,
                      span_s=max(10.0, args.mix_flows / 100))
            sources.append((f"benign-mix ({args.mix_flows} flows)", mix))
        if not sources:
            parser.error("nothing to compare: give --results, --pcap or --mix-flows")
        rows: list[Agreement] = []
        timing = Timing()
        if not args.json:
            print(f"OpenGFW: {which}")
            print(HEADER)
        for label, pcap in sources:
            for agreement in compare(label, pcap, binary, timing=timing):
                rows.append(agreement)
                if not args.json:
                    print(agreement.row(), flush=True)
    if args.json:
        print(json.dumps({"agreements": [vars(r) for r in rows], "timing": vars(timing)},
                         indent=1))
    else:
        totals: dict[str, list[int]] = {}
        for r in rows:
            t = totals.setdefault(r.pair, [0, 0, 0, 0])
            for i, v in enumerate((r.flows, r.both, r.only_ours, r.only_theirs)):
                t[i] += v
        print()
        for pair, (flows, both, mine, other) in totals.items():
            print(Agreement("all sources", pair, flows, both, mine, other).row())
        print()
        print("\n".join(timing.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
