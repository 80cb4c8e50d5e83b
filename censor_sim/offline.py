"""The censor over a capture: the live engine and detectors, with no network and no root.

Why this exists: researchers want to ask "what would this censor have done to my
traffic?" of a pcap they already have, as CensorLab's and OpenGFW's pcap modes let
them (docs/censors/blocking.md §3.2, §3.3; docs/lab/censor.md §4). :func:`replay`
feeds every packet of a capture to the same :class:`~censor_sim.engine.Engine` the
live censor runs, on the capture's own clock, and reports per flow what the censor
decided and would have done. Actions that need a live network (injecting packets,
probing a server, blocking it) are reported as ``would`` entries, each with the
direction of the packets it concerns, never carried out. What the live kernel
enforces (the address lists, residual blocks, the TSPU's freeze past a byte count)
is emulated, so a verdict says what the flow met, not only what was decided.

Which side is the censored user's: the hosts in ``clients`` (CIDRs), or, when none
are given, whoever opened the flow (the sender of a TCP SYN, or of a UDP flow's
first packet). A capture taken on the censor's client-side interface, as the lab's
are, holds every client-to-server packet the live censor saw, so a lab cell's pcap
replayed gives the verdict the live censor gave.

Speed: the capture is read a batch at a time with its headers parsed by numpy
(:mod:`censor_sim.pcapbatch`), and packets the engine would only count are counted
without a Packet (:meth:`Engine.skim`); ``skim=False`` hands every packet to
:meth:`Engine.handle`, which tests use to show the verdicts are the same.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import offlineplan, pcapbatch
from .addrset import AddressSet
from .engine import Effects, Engine, ResidualKey, unsupported
from .inspectors import Match
from .packet import ACK, FIN, RST, SYN, TCP, UDP
from .profile import Profile

FlowKey = tuple[str, str, int, int, int]

# Actions whose effect waits on a threshold the kernel counts: a flow they were
# decided for is not acted on until it gets there (the TSPU's freeze, past
# actions.freeze.bytes from the server).
THRESHOLD_ACTIONS = ("freeze",)


class OfflineEffects(Effects):
    """Records what a live censor would do; does none of it.

    Keeps only what :func:`replay` has yet to read (it empties ``events``,
    ``would`` and ``residual_set`` after each packet), so a capture of any size
    costs no memory here.
    """

    def __init__(self) -> None:
        super().__init__()
        self.would: list[dict[str, Any]] = []
        self.residual_set: list[tuple[ResidualKey, float]] = []

    def residual(self, key: ResidualKey, seconds: float) -> None:
        # The engine keeps its own residual table; the replay notes who set it.
        self.residual_set.append((key, seconds))

    def probe(self, flow: dict[str, Any], first_payload: bytes, match: Match) -> None:
        self.would.append({"action": "probe", "direction": "to-server",
                           "target": f"{flow['server']}:{flow['server_port']}"})

    def block_server(self, server: str, port: int) -> None:
        self.would.append({"action": "block", "direction": "both",
                           "target": f"{server}:{port}"})


@dataclass
class FlowVerdict:
    """What the censor decided about one flow of the capture (docs/lab/censor.md §4.1
    is the schema of its JSON line)."""

    flow: dict[str, Any]
    id: int = 0  # its place in the capture, by first packet (1-based): its line's
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
    would: list[dict[str, Any]] = field(default_factory=list)
    # For dropped-by-residual: the block that caught it (its triple, the flow that
    # set it, when, and until when).
    cause: dict[str, Any] | None = None
    # A rule fired whose action waits on a threshold (the freeze's byte count) that
    # the flow never reached: not a detection, and the flow passed.
    armed: dict[str, Any] | None = None
    start: float = field(default=0.0, repr=False)  # capture time of its first packet
    last: float = field(default=0.0, repr=False)  # and of its latest
    # A TCP flow whose client SYN the capture does not hold (it began before the
    # capture, or the capture lost packets). A censor that needs the handshake takes
    # such a flow as established and does not judge it, so its "pass" says nothing
    # about the traffic; reported apart so a reader can tell the two "pass"es apart.
    midstream: bool = False
    server_bytes: int = field(default=0, repr=False)  # IP bytes from the server
    kernel_drop: bool = field(default=False, repr=False)
    # The batch plan (and its slot) whose skipped packets are yet to be counted in.
    plan: Any = field(default=None, repr=False)
    slot: int = field(default=-1, repr=False)
    eflow: Any = field(default=None, repr=False)  # the engine's flow, after its last packet seen

    def holds_no_float(self) -> bool:
        """Whether :meth:`to_json`'s record holds no float at any depth: true of a flow
        with nothing timed and nothing to report (its other fields are str, int, bool
        and None), so an encoder need not look."""
        return (self.after_s is None and not self.evidence and not self.would
                and self.cause is None and self.armed is None)

    def to_json(self) -> dict[str, Any]:
        armed = self.armed
        if armed is not None:
            armed = {**armed, "server_bytes": self.server_bytes}
            del armed["held"]
        return {"id": self.id, "flow": self.flow, "packets": self.packets,
                "verdict": self.verdict, "detector": self.detector, "packet": self.packet,
                "data_packet": self.data_packet, "after_s": self.after_s,
                "detections": self.detections, "evidence": self.evidence,
                "would": self.would, "cause": self.cause, "armed": armed,
                "midstream": self.midstream}


class _Sides:
    """Which end of each packet is the censored user."""

    def __init__(self, clients: Iterable[str]) -> None:
        self.nets = AddressSet(clients)
        self.opened: dict[tuple[str, int, str, int, int], bool] = {}

    def from_client(self, src: str, sport: int, dst: str, dport: int, proto: int,
                    flags: int) -> bool:
        if self.nets:
            return src in self.nets
        opened = self.opened
        if (src, sport, dst, dport, proto) in opened:
            return True
        if (dst, dport, src, sport, proto) in opened:
            return False
        # A new flow: its opener is the client (for TCP, the SYN's sender; a flow seen
        # mid-way is put to its first sender, and the engine lets such flows pass).
        if proto == TCP and flags & (SYN | ACK) == SYN | ACK:
            opened[(dst, dport, src, sport, proto)] = True
            return False
        opened[(src, sport, dst, dport, proto)] = True
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

        self.block: tuple[AddressSet, set[int]] | None = None
        self.allow: tuple[AddressSet, str, AddressSet] | None = None
        for kind in self.KINDS:
            params = profile.detectors.get(kind)
            if params is None:
                continue
            for part in ("addresses", "domestic"):
                for entry in params.get(part, []):
                    if isinstance(entry, str) and entry.startswith("role:"):
                        raise ValueError(_needs_addresses(profile.name, kind, part, entry))
            try:  # the same parsing (and refusals) as the live censor's nftables sets
                if kind == "ip_blocklist":
                    bl = Blocklist.from_params(params)
                    self.block = (AddressSet(bl.v4 + bl.v6), set(bl.ports))
                else:
                    al = Allowlist.from_params(params)
                    self.allow = (AddressSet(al.listed.v4 + al.listed.v6), al.match,
                                  AddressSet(al.domestic.v4 + al.domestic.v6))
            except DatapathError as exc:
                raise ValueError(f"profile {profile.name}: detectors.{kind}: {exc}") from None

    def drops(self, client: str, server: str, port: int) -> dict[str, Any] | None:
        """The kernel's drop of this flow, as a ``would`` entry, or None."""
        if self.block is not None:
            nets, ports = self.block
            if server in nets and (not ports or port in ports):
                # The blocklist's rules drop the address as sender and as receiver.
                return {"action": "drop", "direction": "both", "by": "ip_blocklist"}
        if self.allow is not None:
            listed, match, domestic = self.allow
            if match == "source":
                if client not in listed and server not in domestic:
                    return {"action": "drop", "direction": "to-server", "by": "ip_allowlist"}
            elif server not in listed:
                return {"action": "drop", "direction": "to-server", "by": "ip_allowlist"}
        return None


def _needs_addresses(profile: str, detector: str, part: str, entry: str) -> str:
    """The one-line refusal of a profile that names lab roles a capture has not."""
    return (f"profile {profile}: detectors.{detector}.{part} names {entry!r}, a lab role, "
            f"and a capture has no lab: give the addresses with --set "
            f"'{{\"detectors\": {{\"{detector}\": {{\"{part}\": [\"CIDR\", ...]}}}}}}'")


def _refuse_lab_roles(profile: Profile, engine: Engine) -> None:
    for insp in engine.inspectors:
        if insp.unresolved:
            raise ValueError(_needs_addresses(profile.name, insp.name, "servers",
                                              insp.unresolved[0]))


# How often (packets) replay hands out the flows that have gone idle.
_FLUSH_EVERY = 1024


class _Freeze:
    """The kernel's freeze emulated: a flow decided for "freeze" loses the server's
    packets once connection tracking has counted more than ``bytes`` of IP packets
    from the server (datapath.ruleset's ``ct reply bytes >`` rule)."""

    def __init__(self, profile: Profile) -> None:
        self.bytes = int(profile.actions.get("freeze", {}).get("bytes", 16384))

    def arm(self, fv: FlowVerdict, ev: dict[str, Any], detection: dict[str, Any] | None,
            ts: float) -> None:
        held = fv.detections  # this flow's detections, handed back when it crosses
        fv.detections = 0
        fv.armed = {"action": "freeze", "detector": ev.get("detector"), "packet": fv.packets,
                    "after_s": round(ts - fv.start, 6), "threshold_bytes": self.bytes,
                    "held": (held, detection)}

    def crossed(self, fv: FlowVerdict, ts: float) -> None:
        armed = fv.armed
        assert armed is not None
        held, detection = armed["held"]
        fv.armed = None
        fv.verdict, fv.detector = "freeze", armed["detector"]
        fv.packet, fv.after_s = fv.packets, round(ts - fv.start, 6)
        fv.detections += held
        if detection is not None:
            fv.data_packet = detection.get("data_packet")
            fv.evidence = detection.get("evidence", {})
        fv.would.append({"action": "drop", "direction": "to-client", "by": "freeze",
                         "after_bytes": self.bytes, "from_packet": fv.packets, "packets": 1})

    @staticmethod
    def dropped(fv: FlowVerdict) -> None:
        fv.would[-1]["packets"] += 1


def replay(profile: Profile, path: Path | str, clients: Iterable[str] = (),
           seed: int = 0, skim: bool = True) -> Iterator[FlowVerdict]:
    """Every flow of the capture with the censor's verdict, in order of first packet.

    Verdicts stream: a flow is handed out once it has been idle for the engine's
    ``flow_idle_s`` on the capture's clock (a later packet on its 4-tuple would be
    a new flow to the engine too) and every flow before it is out, and the rest
    at the end. Memory follows the flows live at once, not the capture's length.
    ``skim=False`` hands every packet to the engine (:meth:`Engine.handle`); the
    default counts those the engine would only count in bulk (docs/lab/censor.md
    §5.1), with the same verdicts.
    """
    run = _Replay(profile, clients, seed, skim)
    for batch in pcapbatch.batches(Path(path) if str(path) != "-" else "-"):
        yield from run.batch(batch)
    yield from run.out


class _Replay:
    """The state of one replay: the engine, the flows and their verdicts."""

    def __init__(self, profile: Profile, clients: Iterable[str], seed: int,
                 skim: bool) -> None:
        if (why := unsupported(profile)) is not None:
            raise ValueError(f"profile {profile.name}: {why}")
        self.now = [0.0]
        now = self.now
        self.effects = OfflineEffects()
        self.engine = engine = Engine(profile, clock=lambda: now[0],
                                      rng=random.Random(seed), effects=self.effects)
        pc = self.pc = engine.packet_censor
        if pc is not None and (why := getattr(pc, "no_offline", None)):
            raise ValueError(f"profile {profile.name}: {why}; it has no offline mode")
        _refuse_lab_roles(profile, engine)
        self.kernel_lists = _KernelLists(profile)
        uses = {a for r in engine.rules.values() for a in r.actions}
        self.freeze = _Freeze(profile) if "freeze" in uses else None
        self.sides = _Sides(clients)
        self.flows: dict[FlowKey, FlowVerdict] = {}  # each 4-tuple's current connection
        self.out: deque[FlowVerdict] = deque()  # not yet handed out, by first packet
        self.causes: dict[ResidualKey, dict[str, Any]] = {}  # each residual's setter
        self.idle_s = engine.flows.idle_s
        self.next_id = 1
        self.count = 0  # records read, as the flush check counts them
        self.skim = skim
        self.plan_on = skim
        self.plan: offlineplan.Plan | None = None
        # Protocols some inspector reads every packet of, not only client payloads.
        self.every_packet = {proto for insp in engine.inspectors
                             if not insp.client_payload_only or insp.sees_empty
                             for proto in insp.protocols}
        self.may_act = None
        if pc is not None:
            ignores = getattr(pc, "ignores", None)
            self.may_act = (_may_act(ignores) if ignores is not None
                            else lambda proto, flags: np.ones(len(proto), bool))

    # -- a batch --------------------------------------------------------------------

    def batch(self, batch: pcapbatch.Batch) -> Iterator[FlowVerdict]:
        engine = self.engine
        if self.plan_on and len(engine.flows) > engine.flows.max_flows // 2:
            self.plan_on = False  # near the cap the table's order matters: walk it all
        if self.plan_on:
            plan = offlineplan.Plan(
                batch, start_count=self.count, flush_every=_FLUSH_EVERY,
                idle_s=self.idle_s, every_packet_protos=self.every_packet,
                censor_may_act=self.may_act, residual_keys=list(engine.residual),
                client_side=self._client_side() if self.sides.nets else None,
                freeze=self.freeze is not None)
            yield from self._walk(batch, plan)
            self.count = plan.count_after
        else:
            yield from self._walk_all(batch)

    def _walk_all(self, batch: pcapbatch.Batch) -> Iterator[FlowVerdict]:
        kinds = batch.kind
        for i in range(batch.n):
            if kinds[i] == pcapbatch.NOT_IP:
                continue
            if self.count % _FLUSH_EVERY == 0:
                yield from self._flush(batch.ts[i], None, i)
            self.count += 1
            self._packet(batch, i, None)

    def _walk(self, batch: pcapbatch.Batch, plan: offlineplan.Plan) -> Iterator[FlowVerdict]:
        self.plan = plan
        flush = plan.flush_points
        fi, nf = 0, len(flush)
        for i in plan.walk():
            while fi < nf and flush[fi] <= i:
                yield from self._flush(batch.ts[flush[fi]], plan, flush[fi])
                fi += 1
            self._packet(batch, i, plan)
        while fi < nf:
            yield from self._flush(batch.ts[flush[fi]], plan, flush[fi])
            fi += 1
        if not plan.walk_all:
            self._catch_up_all(plan)
        self.plan = None

    def _flush(self, ts: float, plan: offlineplan.Plan | None,
               row: int) -> Iterator[FlowVerdict]:
        """Hand out the flows idle past flow_idle_s at ``ts``, oldest first."""
        out, flows = self.out, self.flows
        while out:
            first = out[0]
            if plan is not None and first.plan is plan:
                self._catch_up(first, plan, plan.upto_before(first.slot, row))
            if ts - first.last <= self.idle_s:
                return
            done = out.popleft()
            f = done.flow
            key = (f["client"], f["server"], f["proto"], f["client_port"], f["server_port"])
            if flows.get(key) is done:
                del flows[key]
                self.sides.forget(key)
            yield done

    # -- a packet -------------------------------------------------------------------

    def _packet(self, batch: pcapbatch.Batch, i: int, plan: offlineplan.Plan | None) -> None:
        """One packet the loop must look at (every one, without a plan)."""
        kind = batch.kind[i]
        if kind == pcapbatch.SKIP or kind == pcapbatch.NOT_IP:
            return
        ts = batch.ts[i]
        if kind in pcapbatch.PARSED:
            pkt = None
            addresses = batch.addresses
            src, dst = addresses[batch.src_id[i]], addresses[batch.dst_id[i]]
            proto = batch.proto[i]
            sport, dport, flags, plen = (batch.sport[i], batch.dport[i], batch.flags[i],
                                         batch.plen[i])
        else:
            pkt = batch.packet(i)
            if pkt is None or pkt.fragment or pkt.proto not in (TCP, UDP):
                return
            src, dst, proto, sport, dport, flags = (pkt.src, pkt.dst, pkt.proto, pkt.sport,
                                                    pkt.dport, pkt.flags)
            plen = len(pkt.payload)
        c2s = self.sides.from_client(src, sport, dst, dport, proto, flags)
        key = (src, dst, proto, sport, dport) if c2s else (dst, src, proto, dport, sport)
        flows = self.flows
        fv = flows.get(key)
        planned = plan is not None and not plan.walk_all
        if planned:
            assert plan is not None
            s = plan.slot_of[i]
            client_a = plan.client_a[s]
            a_sent = plan.side_a[i] == c2s
            if client_a is None:
                plan.client_a[s] = a_sent
            elif a_sent != client_a:
                # The 4-tuple changed sides (forgotten, then opened from the other
                # end): walk the rest of it packet by packet.
                plan.rest_of_slot(i)
            p = plan.pos[i]
            if plan.applied[s] < p:
                if fv is not None and fv.plan is plan and fv.slot == s:
                    self._catch_up(fv, plan, p)
                plan.applied[s] = p + 1
            elif plan.applied[s] == p:
                plan.applied[s] = p + 1
        engine = self.engine
        freeze = self.freeze
        if fv is None:
            pure_syn = proto == TCP and flags & (SYN | ACK | RST | FIN) == SYN
            fv = self._new_verdict(key, proto, c2s, pure_syn, ts)
            if (drop := self.kernel_lists.drops(key[0], key[1], key[4])) is not None:
                # Dropped by the kernel before any queue: the engine never sees it.
                fv.verdict, fv.detector, fv.packet, fv.after_s = "drop", drop["by"], 1, 0.0
                fv.would.append(drop)
                fv.kernel_drop = True
        if planned:
            assert plan is not None
            if fv.plan is not plan:
                fv.plan = plan
                plan.touched.append(fv)
            fv.slot = s
            plan.owner[s] = fv
        if fv.kernel_drop:
            fv.packets += 1
            fv.last = ts
            return
        # A flow new to this replay has no engine flow yet that skim could count into.
        if (self.skim and fv.packets
                and engine.skim(key, ts, c2s, proto, flags, plen) is not None):
            # Counted by the engine, as handle() would have, and nothing else.
            fv.packets += 1
            fv.last = ts
            if freeze is not None and not c2s:
                fv.server_bytes += batch.wire_length(i, pkt) if pkt else batch.wire(i)
                _watch_freeze(freeze, fv, ts)
            if planned:
                assert plan is not None
                self._plan_next(plan, i, key, fv)
            return
        if pkt is None:
            pkt = batch.packet(i)
            assert pkt is not None
        self.now[0] = ts
        counts = engine.stats
        flows_before = counts["flows"]
        verdict = engine.handle(pkt, c2s)
        if counts["flows"] != flows_before and fv.packets:
            # The engine began a new flow on a 4-tuple it had seen: a new connection
            # (a client reusing its port after the last one ended, or traffic after
            # the idle timeout), judged afresh, so reported on its own line.
            fv = self._new_verdict(key, proto, c2s, pkt.pure_syn, ts)
            if planned:
                assert plan is not None
                self._mark(fv, plan, i)
        fv.packets += 1
        fv.last = ts
        if freeze is not None and not c2s:
            fv.server_bytes += batch.wire_length(i, pkt)
        effects = self.effects
        if (effects.events or effects.residual_set or effects.would or verdict.drop
                or verdict.inject):
            self._record(fv, key, c2s, proto, ts, verdict, i, plan if planned else None)
        if freeze is not None and not c2s and (fv.armed is not None or fv.verdict == "freeze"):
            _watch_freeze(freeze, fv, ts)
        if planned:
            assert plan is not None
            self._plan_next(plan, i, key, fv)

    def _record(self, fv: FlowVerdict, key: FlowKey, c2s: bool, proto: int, ts: float,
                verdict: Any, i: int, plan: offlineplan.Plan | None) -> None:
        """What the engine said about a packet it handled, into its flow's verdict."""
        effects, pc, freeze = self.effects, self.pc, self.freeze
        events, would, residual_set = effects.events, effects.would, effects.residual_set
        # Everything the engine reports for a packet is about that packet's flow.
        detection: dict[str, Any] | None = None
        refreshed = False
        for ev in events:
            name = ev["event"]
            if name == "detection":
                fv.detections += 1
                detection = ev
            elif name == "residual_refresh":
                refreshed = True
            elif name == "action" and fv.verdict == "pass" and fv.armed is None:
                acts = ev.get("actions") or ["?"]
                if freeze is not None and all(a in THRESHOLD_ACTIONS for a in acts):
                    freeze.arm(fv, ev, detection, ts)
                    continue
                fv.verdict = "+".join(acts)
                fv.detector = ev.get("detector")
                fv.packet, fv.after_s = fv.packets, round(ts - fv.start, 6)
                if detection is not None:
                    fv.data_packet = detection.get("data_packet")
                    fv.evidence = detection.get("evidence", {})
                fv.would += [_would_inject(spec, key) for spec in ev.get("injected", [])]
        events.clear()
        if residual_set:
            for rkey, seconds in residual_set:
                new = _note_residual(self.causes, rkey, seconds, fv, ts, refreshed)
                if new and plan is not None:
                    plan.rows_on_triple(i, rkey)
            residual_set.clear()
        if pc is not None and (verdict.drop or verdict.inject):
            # A packet censor decides alone: no policy, so no "action" event.
            if fv.verdict == "pass":
                fv.verdict, fv.detector = ("drop" if verdict.drop else "rst"), pc.name
                fv.packet, fv.after_s = fv.packets, round(ts - fv.start, 6)
                fv.evidence = detection.get("evidence", {}) if detection else {}
            fv.would += [_would_inject(inj.to_json(), key) for inj in verdict.inject]
        elif verdict.drop and fv.verdict == "pass":
            # No detection of its own: an earlier block (a residual on its triple).
            fv.verdict, fv.packet = "dropped-by-residual", fv.packets
            fv.after_s = round(ts - fv.start, 6)
            rkey = ((key[0], key[1], proto, key[4]) if c2s
                    else (key[1], key[0], proto, key[3]))
            cause = self.causes.get(rkey)
            fv.cause = dict(cause) if cause is not None else None
        if would:
            fv.would += would
            would.clear()

    def _plan_next(self, plan: offlineplan.Plan, i: int, key: FlowKey,
                   fv: FlowVerdict) -> None:
        """After a packet the loop looked at: which later packet of its 4-tuple the
        loop must look at next, while its flow is undecided or waits on a threshold."""
        if fv.armed is not None:
            nxt = plan.next_in_slot(i)
            if nxt is not None:
                plan.add(nxt)
            return
        flow = fv.eflow = self.engine.flow_of(key)
        if flow is None or flow.decided is not None:
            return
        limit = self.engine.counts_until(flow)
        if limit is None:
            nxt = plan.next_in_slot(i)
        else:
            nxt = plan.next_in_slot(i, max(1, limit - flow.packets))
            pay = plan.next_client_payload(i)
            if pay is not None and (nxt is None or pay < nxt):
                nxt = pay
        if nxt is not None:
            plan.add(nxt)

    # -- counting in bulk -----------------------------------------------------------

    def _catch_up(self, fv: FlowVerdict, plan: offlineplan.Plan, upto: int) -> None:
        """Count into ``fv`` (and its engine flow) its packets the loop skipped
        before position ``upto`` of its slot, as the engine would have counted them."""
        if plan.owner[fv.slot] is not fv:
            return  # a later connection on its 4-tuple owns the skipped packets
        got = plan.pending(fv.slot, upto)
        if got is None:
            return
        packets, client_payloads, server_packets, server_bytes, last = got
        fv.packets += packets
        fv.last = last
        if self.freeze is not None:
            fv.server_bytes += server_bytes
            if fv.verdict == "freeze":
                fv.would[-1]["packets"] += server_packets
        if fv.kernel_drop:
            return
        self.engine.count_skimmed(fv.eflow, packets, client_payloads, last)

    def _catch_up_all(self, plan: offlineplan.Plan) -> None:
        for fv in plan.touched:
            if fv.plan is plan:
                self._catch_up(fv, plan, plan.ends[fv.slot])
                fv.plan = None

    @staticmethod
    def _mark(fv: FlowVerdict, plan: offlineplan.Plan, i: int) -> None:
        """``fv`` is the flow of row ``i``'s slot in this batch: its skipped packets
        are counted into it (and its engine flow, ``eflow``) by that slot."""
        if fv.plan is not plan:
            fv.plan = plan
            plan.touched.append(fv)
        fv.slot = plan.slot_of[i]
        plan.owner[fv.slot] = fv

    # -- helpers --------------------------------------------------------------------

    def _client_side(self) -> Any:
        """For named clients: whether each row's source is one of them, in numpy."""
        sides = self.sides

        def side(batch: pcapbatch.Batch, rows: np.ndarray) -> np.ndarray:
            local = batch.arrays["src_id"][rows]
            uniq, first = np.unique(local, return_index=True)
            table = np.zeros(int(uniq.max(initial=-1)) + 1, bool)
            for lid, at in zip(uniq.tolist(), rows[first].tolist(), strict=True):
                name = batch.addresses[batch.src_id[at]]
                table[lid] = sides.from_client(name, 0, "", 0, 0, 0)
            return table[local]

        return side

    def _new_verdict(self, key: FlowKey, proto: int, c2s: bool, pure_syn: bool,
                     ts: float) -> FlowVerdict:
        fv = self.flows[key] = FlowVerdict(
            {"client": key[0], "server": key[1], "proto": key[2], "client_port": key[3],
             "server_port": key[4]}, id=self.next_id, start=ts, last=ts)
        self.next_id += 1
        fv.midstream = proto == TCP and not self.engine.midstream and not (c2s and pure_syn)
        self.out.append(fv)
        return fv


def _may_act(ignores: Any) -> Any:
    """A packet censor's ``ignores(proto, flags, from_client)`` over numpy arrays."""
    memo: dict[tuple[int, int], bool] = {}

    def may_act(proto: np.ndarray, flags: np.ndarray) -> np.ndarray:
        pairs = np.stack([proto, flags], axis=1)
        uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
        out = []
        for p, f in uniq.tolist():
            hit = memo.get((p, f))
            if hit is None:
                hit = memo[(p, f)] = not (ignores(p, f, True) and ignores(p, f, False))
            out.append(hit)
        return np.asarray(out, bool)[inverse.ravel()]

    return may_act


def _watch_freeze(freeze: _Freeze, fv: FlowVerdict, ts: float) -> None:
    """A server packet of a flow under the freeze rule: the one that carries the
    count past the threshold is the first dropped, and so is every later one."""
    if fv.armed is not None:
        if fv.server_bytes > freeze.bytes:
            freeze.crossed(fv, ts)
    elif fv.verdict == "freeze":
        freeze.dropped(fv)


def _note_residual(causes: dict[ResidualKey, dict[str, Any]], rkey: ResidualKey,
                   seconds: float, fv: FlowVerdict, ts: float, refreshed: bool) -> bool:
    """Who set a residual block (or restarted it, Iran's 2020 filter), for the
    flows it catches; and the block in the setter's ``would``. True for a new one."""
    if refreshed and rkey in causes:
        cause = causes[rkey]
        cause["expires"] = round(ts + seconds, 6)
        cause["refreshed_by"] = fv.id
        return False
    # The entry's first address sends the packets it drops: the client, or for a
    # block drawn by a packet from outside (Match.reverse), the server side.
    direction = "to-server" if rkey[0] == fv.flow["client"] else "to-client"
    triple = {"from": rkey[0], "to": rkey[1], "proto": rkey[2], "port": rkey[3]}
    causes[rkey] = {"flow": fv.id, "client_port": fv.flow["client_port"],
                    "detector": fv.detector, "triple": triple, "set_at": round(ts, 6),
                    "expires": round(ts + seconds, 6)}
    fv.would.append({"action": "residual", "direction": direction, "triple": triple,
                     "seconds": seconds})
    return True


def _would_inject(spec: dict[str, Any], key: FlowKey) -> dict[str, Any]:
    """One injection as a replay reports it, from its JSON (an action event's, or a
    packet censor's :class:`~censor_sim.actions.InjectTcp` or ``InjectUdp``): which
    end it goes to, and, for TCP, its flags (a datagram has none)."""
    direction = "to-client" if spec.get("dst") == key[0] else "to-server"
    entry: dict[str, Any] = {"action": "inject", "direction": direction,
                             "proto": "tcp" if "flags" in spec else "udp",
                             "count": spec.get("count", 1)}
    if "flags" in spec:
        entry["flags"] = spec["flags"]
    return entry
