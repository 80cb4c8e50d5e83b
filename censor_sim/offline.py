"""The censor over a capture: the live engine and detectors, with no network and no root.

Why this exists: researchers want to ask "what would this censor have done to my
traffic?" of a pcap they already have, as CensorLab's and OpenGFW's pcap modes let
them (docs/censors/blocking.md §3.2, §3.3; docs/lab/censor.md §4). :func:`replay`
feeds every packet of a classic pcap to the same :class:`~censor_sim.engine.Engine`
the live censor runs, on the capture's own clock, and reports per flow what the
censor decided and would have done. Actions that need a live network (injecting
packets, probing a server, blocking it) are reported as ``would inject``, ``would
probe`` and ``would block``, never carried out.

Which side is the censored user's: the hosts in ``clients`` (CIDRs), or, when none
are given, whoever opened the flow (the sender of a TCP SYN, or of a UDP flow's
first packet). A capture taken on the censor's client-side interface, as the lab's
are, holds every client-to-server packet the live censor saw, so a lab cell's pcap
replayed gives the verdict the live censor gave.
"""

from __future__ import annotations

import ipaddress
import random
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import packet
from .engine import Effects, Engine, unsupported
from .inspectors import Match
from .pcapflows import read_packets
from .profile import Profile

FlowKey = tuple[str, str, int, int, int]


class OfflineEffects(Effects):
    """Records what a live censor would do; does none of it.

    Keeps only what :func:`replay` has yet to read (it empties ``events`` and
    ``would`` after each packet), so a capture of any size costs no memory here.
    """

    def __init__(self) -> None:
        super().__init__()
        self.would: list[str] = []

    def residual(self, key: Any, seconds: float) -> None:
        pass  # the engine keeps its own residual table; nothing to carry out

    def probe(self, flow: dict[str, Any], first_payload: bytes, match: Match) -> None:
        self.would.append(f"probe {flow['server']}:{flow['server_port']}")

    def block_server(self, server: str, port: int) -> None:
        self.would.append(f"block {server}:{port}")


@dataclass
class FlowVerdict:
    """What the censor decided about one flow of the capture."""

    flow: dict[str, Any]
    packets: int = 0  # the flow's packets in the capture
    # pass; the first action taken on it (drop, residual, rst, ...); or
    # dropped-by-residual, when an earlier flow's block caught it.
    verdict: str = "pass"
    detector: str | None = None
    packet: int | None = None  # the flow's packet (1-based) the decision came on
    data_packet: int | None = None  # its client-to-server data packet, as live events say
    after_s: float | None = None  # seconds from the flow's first packet
    evidence: dict[str, Any] = field(default_factory=dict)
    detections: int = 0  # detections, including those the rule's chance let pass
    would: list[str] = field(default_factory=list)
    start: float = field(default=0.0, repr=False)  # capture time of its first packet
    last: float = field(default=0.0, repr=False)  # and of its latest
    # A TCP flow whose client SYN the capture does not hold (it began before the
    # capture, or the capture lost packets). A censor that needs the handshake takes
    # such a flow as established and does not judge it, so its "pass" says nothing
    # about the traffic; reported apart so a reader can tell the two "pass"es apart.
    midstream: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"flow": self.flow, "packets": self.packets, "verdict": self.verdict,
                "detector": self.detector, "packet": self.packet,
                "data_packet": self.data_packet, "after_s": self.after_s,
                "detections": self.detections, "evidence": self.evidence,
                "would": self.would, "midstream": self.midstream}


class _Sides:
    """Which end of each packet is the censored user."""

    def __init__(self, clients: Iterable[str]) -> None:
        self.nets = [ipaddress.ip_network(c, strict=False) for c in clients]
        self.opened: dict[tuple[str, int, str, int, int], bool] = {}
        self.memo: dict[str, bool] = {}

    def from_client(self, pkt: packet.Packet) -> bool:
        if self.nets:
            a = self.memo.get(pkt.src)
            if a is None:
                addr = ipaddress.ip_address(pkt.src)
                a = self.memo[pkt.src] = any(addr in n for n in self.nets)
            return a
        fwd = (pkt.src, pkt.sport, pkt.dst, pkt.dport, pkt.proto)
        rev = (pkt.dst, pkt.dport, pkt.src, pkt.sport, pkt.proto)
        if fwd in self.opened:
            return True
        if rev in self.opened:
            return False
        # A new flow: its opener is the client (for TCP, the SYN's sender; a flow seen
        # mid-way is put to its first sender, and the engine lets such flows pass).
        if pkt.proto == packet.TCP and pkt.has(packet.SYN) and pkt.has(packet.ACK):
            self.opened[rev] = True
            return False
        self.opened[fwd] = True
        return True

    def forget(self, key: FlowKey) -> None:
        """A finished flow's orientation (its 4-tuple's next packet starts afresh)."""
        self.opened.pop((key[0], key[3], key[1], key[4], key[2]), None)


class _KernelLists:
    """The address lists the live censor leaves to nftables (ip_blocklist,
    ip_allowlist), checked once per flow by its addresses and server port, as the
    kernel's rules check them (datapath.ruleset)."""

    KINDS = ("ip_blocklist", "ip_allowlist")

    def __init__(self, profile: Profile) -> None:
        from .datapath import Allowlist, Blocklist, DatapathError

        self.block: tuple[list[Any], set[int]] | None = None
        self.allow: tuple[list[Any], str, list[Any]] | None = None
        for kind in self.KINDS:
            params = profile.detectors.get(kind)
            if params is None:
                continue
            try:  # the same parsing (and refusals) as the live censor's nftables sets
                if kind == "ip_blocklist":
                    bl = Blocklist.from_params(params)
                    self.block = (_networks(bl), set(bl.ports))
                else:
                    al = Allowlist.from_params(params)
                    self.allow = (_networks(al.listed), al.match, _networks(al.domestic))
            except DatapathError as exc:
                raise ValueError(f"detectors.{kind}: {exc} (give addresses with --set to "
                                 "judge a capture)") from None

    def drops(self, client: str, server: str, port: int) -> str | None:
        if self.block is None and self.allow is None:
            return None
        addr = ipaddress.ip_address(server)
        if self.block is not None:
            nets, ports = self.block
            if any(addr in n for n in nets) and (not ports or port in ports):
                return "ip_blocklist"
        if self.allow is not None:
            listed, match, domestic = self.allow
            if match == "source":
                src = ipaddress.ip_address(client)
                if not any(src in n for n in listed) and not any(addr in n for n in domestic):
                    return "ip_allowlist"
            elif not any(addr in n for n in listed):
                return "ip_allowlist"
        return None


def _networks(bl: Any) -> list[Any]:
    return [ipaddress.ip_network(a) for a in bl.v4 + bl.v6]


# How often (packets) replay hands out the flows that have gone idle.
_FLUSH_EVERY = 1024


def replay(profile: Profile, path: Path, clients: Iterable[str] = (),
           seed: int = 0) -> Iterator[FlowVerdict]:
    """Every flow of the capture with the censor's verdict, in order of first packet.

    Verdicts stream: a flow is handed out once it has been idle for the engine's
    ``flow_idle_s`` on the capture's clock (a later packet on its 4-tuple would be
    a new flow to the engine too) and every flow before it is out, and the rest
    at the end. Memory follows the flows live at once, not the capture's length.
    """
    if (why := unsupported(profile)) is not None:
        raise ValueError(f"profile {profile.name}: {why}")
    now = [0.0]
    effects = OfflineEffects()
    engine = Engine(profile, clock=lambda: now[0], rng=random.Random(seed), effects=effects)
    pc = engine.packet_censor
    if pc is not None and (why := getattr(pc, "no_offline", None)):
        raise ValueError(f"profile {profile.name}: {why}; it has no offline mode")
    kernel_lists = _KernelLists(profile)
    sides = _Sides(clients)
    flows: dict[FlowKey, FlowVerdict] = {}  # each 4-tuple's current connection
    out: deque[FlowVerdict] = deque()  # connections not yet handed out, by first packet
    counts = engine.stats
    idle_s = engine.flows.idle_s
    events, would = effects.events, effects.would
    for n, (ts, raw, _) in enumerate(read_packets(Path(path))):
        if n % _FLUSH_EVERY == 0 and out and ts - out[0].last > idle_s:
            while out and ts - out[0].last > idle_s:
                done = out.popleft()
                f = done.flow
                key = (f["client"], f["server"], f["proto"], f["client_port"],
                       f["server_port"])
                if flows.get(key) is done:
                    del flows[key]
                    sides.forget(key)
                yield done
        pkt = packet.parse(raw)
        if pkt is None or pkt.fragment or pkt.proto not in (packet.TCP, packet.UDP):
            continue
        c2s = sides.from_client(pkt)
        key = ((pkt.src, pkt.dst, pkt.proto, pkt.sport, pkt.dport) if c2s
               else (pkt.dst, pkt.src, pkt.proto, pkt.dport, pkt.sport))
        fv = flows.get(key)
        if fv is None:
            fv = _new_verdict(flows, out, key, pkt, c2s, ts, engine.midstream)
            if (which := kernel_lists.drops(key[0], key[1], key[4])) is not None:
                # Dropped by the kernel before any queue: the engine never sees it.
                fv.verdict, fv.detector, fv.packet, fv.after_s = "drop", which, 1, 0.0
                fv.would.append(f"drop in the kernel ({which})")
        if fv.detector in _KernelLists.KINDS and fv.verdict == "drop":
            fv.packets += 1
            fv.last = ts
            continue
        now[0] = ts
        flows_before = counts["flows"]
        verdict = engine.handle(pkt, c2s)
        if counts["flows"] != flows_before and fv.packets:
            # The engine began a new flow on a 4-tuple it had seen: a new connection
            # (a client reusing its port after the last one ended, or traffic after
            # the idle timeout), judged afresh, so reported on its own line.
            fv = _new_verdict(flows, out, key, pkt, c2s, ts, engine.midstream)
        fv.packets += 1
        fv.last = ts
        # Everything the engine reports for a packet is about that packet's flow.
        detection: dict[str, Any] | None = None
        for ev in events:
            if ev["event"] == "detection":
                fv.detections += 1
                detection = ev
            elif ev["event"] == "action" and fv.verdict == "pass":
                fv.verdict = "+".join(ev.get("actions") or ["?"])
                fv.detector = ev.get("detector")
                fv.packet, fv.after_s = fv.packets, round(ts - fv.start, 6)
                if detection is not None:
                    fv.data_packet = detection.get("data_packet")
                    fv.evidence = detection.get("evidence", {})
                fv.would += [_would_inject(i) for i in ev.get("injected", [])]
        events.clear()
        if pc is not None and (verdict.drop or verdict.inject):
            # A packet censor decides alone: no policy, so no "action" event.
            if fv.verdict == "pass":
                fv.verdict, fv.detector = ("drop" if verdict.drop else "rst"), pc.name
                fv.packet, fv.after_s = fv.packets, round(ts - fv.start, 6)
                fv.evidence = detection.get("evidence", {}) if detection else {}
            fv.would += [_would_inject(i.to_json()) for i in verdict.inject]
        elif verdict.drop and fv.verdict == "pass":
            # No detection of its own: an earlier block (a residual on its 3-tuple).
            fv.verdict, fv.packet = "dropped-by-residual", fv.packets
            fv.after_s = round(ts - fv.start, 6)
        if would:
            fv.would += would
            would.clear()
    yield from out


def _would_inject(spec: dict[str, Any]) -> str:
    """One injection as a replay reports it, from its JSON (an action event's, or a
    packet censor's :class:`~censor_sim.actions.InjectTcp` or ``InjectUdp``): a
    datagram has no TCP flags, so it says ``UDP`` in their place."""
    return f"inject {spec.get('flags', 'UDP')} x{spec.get('count', 1)}"


def _new_verdict(flows: dict[FlowKey, FlowVerdict], out: deque[FlowVerdict], key: FlowKey,
                 pkt: packet.Packet, c2s: bool, ts: float, midstream_ok: bool) -> FlowVerdict:
    fv = flows[key] = FlowVerdict({"client": key[0], "server": key[1], "proto": key[2],
                                   "client_port": key[3], "server_port": key[4]},
                                  start=ts, last=ts)
    fv.midstream = pkt.proto == packet.TCP and not midstream_ok and not (c2s and pkt.pure_syn)
    out.append(fv)
    return fv
