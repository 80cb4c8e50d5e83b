"""The censor's policy engine: packets in, verdicts and side effects out.

It runs the profile's inspectors over each queued packet, applies the policy
(which detection triggers which actions, with what probability per
connection), and keeps the residual state. It has no I/O: time comes from an
injectable clock, chance from a seeded RNG, and every side effect (kernel
residual entries, probes, events) goes to an :class:`Effects` sink. Unit tests
drive it with a fake clock; the censor process drives it from NFQUEUE.

The kernel enforces what the engine decides for the rest of a flow (see
``datapath``); the engine enforces the same state for packets it still sees,
so both agree on what is blocked and for how long.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import registry, rstprints
from .actions import InjectTcp, InjectUdp, Verdict
from .bpf import KERNEL_DETECTORS
from .flows import Flow, FlowKey, FlowTable, key_json
from .inspectors import DONE, Inspector, Match
from .packet import ACK, TCP, UDP, Packet

ResidualKey = tuple[str, str, int, int]  # client, server, proto, server port

# Servers (address, port, protocol) whose inspectors' scope is remembered: a busy
# uplink reaches thousands; each entry is a few hundred bytes.
SCOPE_CACHE = 1 << 16

# Verdicts handle() gives for most packets, made once: callers read them, never change
# them (a verdict that carries an action is made afresh).
_GO_ON = Verdict()
_ACCEPTED = Verdict(flow="accept")


class Effects:
    """Where the engine's side effects go. This default records them (tests)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.residuals: list[tuple[ResidualKey, float]] = []
        self.probes: list[tuple[dict[str, Any], bytes]] = []
        self.blocked_servers: list[tuple[str, int]] = []

    def event(self, name: str, **fields: Any) -> None:
        self.events.append({"event": name, **fields})

    def residual(self, key: ResidualKey, seconds: float) -> None:
        self.residuals.append((key, seconds))

    def probe(self, flow: dict[str, Any], first_payload: bytes, match: Match) -> None:
        self.probes.append((flow, first_payload))

    def block_server(self, server: str, port: int) -> None:
        self.blocked_servers.append((server, port))


@dataclass
class Rule:
    detector: str
    actions: list[str]
    probability: float = 1.0


@dataclass
class Residual:
    expires: float
    refreshes: int = 0


@dataclass
class Engine:
    """One profile's policy over a stream of packets."""

    profile: Any
    clock: Callable[[], float]
    rng: random.Random
    effects: Effects = field(default_factory=Effects)
    in_path: bool = True

    def __post_init__(self) -> None:
        p = self.profile
        self.inspectors: list[Inspector] = []
        # A detector that sees every packet and decides itself (Geneva's censors,
        # or a plugin's): see censor_sim.registry.
        self.packet_censor: Any = None
        for name, params in p.detectors.items():
            if params.get("kind", name) in registry.KERNEL_ONLY:
                continue
            det = registry.make(name, params)
            if getattr(det, "whole_packets", False):
                if self.packet_censor is not None:
                    raise ValueError(f"detectors.{name}: a profile has at most one detector "
                                     f"that sees every packet ({self.packet_censor.name} "
                                     "is one)")
                self.packet_censor = det
            else:
                self.inspectors.append(det)
        if self.packet_censor is not None and self.inspectors:
            raise ValueError(f"detectors.{self.packet_censor.name}: it decides every packet "
                             "itself, so it cannot share a profile with flow inspectors")
        budget = p.datapath.get("inspect_packets", 12)
        for insp in self.inspectors:
            needed = getattr(insp, "packets_needed", 0) or getattr(
                getattr(insp, "model", None), "packets_needed", 0)
            if budget is not None and needed > int(budget):
                raise ValueError(f"detectors.{insp.name}: it needs {needed} packets, "
                                 f"more than the censor's budget "
                                 f"(datapath.inspect_packets = {budget})")
        self.rules: dict[str, Rule] = {}
        for r in p.policy.get("rules", []):
            acts = r["action"] if isinstance(r["action"], list) else [r["action"]]
            self.rules[r["detector"]] = Rule(r["detector"], acts, float(r.get("probability", 1)))
        self.actions: dict[str, dict[str, Any]] = p.actions
        # The RST shapes, resolved (and a bad fingerprint name refused) when the
        # profile loads, not at the first forgery.
        self.rst_shapes = rstprints.presets(self.actions.get("rst", {}))
        dp = p.datapath
        self.flows = FlowTable(self.clock, idle_s=float(dp.get("flow_idle_s", 120)),
                               max_flows=int(dp.get("max_flows", 65536)),
                               record_stats=False)
        # Per-packet sizes and times cost every packet they are kept for, and only
        # some inspectors read them: a flow gets them (on its first packet) only if
        # an inspector scoped to it does (tls_in_tls reads TCP, so UDP flows never do).
        self._reads_stats = any(getattr(i, "uses_flow_stats", False)
                                for i in self.inspectors)
        self.residual: dict[ResidualKey, Residual] = {}
        self.max_residuals = int(dp.get("max_residuals", 65536))
        self.midstream = bool(dp.get("midstream", False))
        # The datapath copies only TCP connections whose SYN its ruleset saw, and
        # leaves the SYN itself in the kernel (datapath.QueueConfig.watch_births):
        # a flow's first TCP packet here is then its first payload, not mid-stream.
        self.births_watched = False
        # A residual block that a new connection attempt restarts needs the attempt's
        # SYN, so the datapath must hand SYNs over (censor_sim.queueplan).
        self.needs_syns = bool(self.actions.get("residual", {}).get("refresh_on_new_flow"))
        self.stats = {"packets": 0, "flows": 0, "detections": 0, "actions": 0}
        self._scope_cache: dict[tuple[str, int, int], tuple[Inspector, ...]] = {}
        self._repeats: dict[str, Verdict] = {}
        self._scope_by_server = all(type(i).in_scope is Inspector.in_scope
                                    for i in self.inspectors)

    # -- per packet -------------------------------------------------------------------

    def watch_births(self) -> None:
        """The datapath sees TCP SYNs for the censor (datapath.QueueConfig.watch_births):
        take a connection's first copy as its start, and tell a reused 4-tuple's new
        connection by its sequence numbers."""
        self.births_watched = True
        self.flows.reuse_by_seq = True

    def handle(self, pkt: Packet, from_client: bool) -> Verdict:
        """Decide one packet that came in on the client side (`from_client`) or not."""
        self.stats["packets"] += 1
        if self.packet_censor is not None:
            return self._whole_packet(pkt, from_client)
        if pkt.fragment or pkt.proto not in (6, 17):
            return _ACCEPTED
        flows = self.flows
        flow, c2s = flows.lookup(pkt, from_client)
        if flow.packets == 0:
            self.stats["flows"] += 1
            if (pkt.proto == TCP and not (c2s and pkt.pure_syn) and not self.midstream
                    and not self.births_watched):
                # Seen mid-stream (it began before the censor did, or its state
                # expired): nothing trustworthy to judge its first payload by.
                # A censor that needs no handshake (Henan's) sets datapath.midstream.
                flow.decided = "accept"
            if self._reads_stats and any(i.uses_flow_stats for i in self._scoped(flow)):
                flow.stats = flows.new_stats()
        # A new flow's time is the clock lookup() read; record() reads it for the rest.
        flows.record(flow, pkt, c2s, flow.first_seen if flow.packets == 0 else None)
        if self.residual and (v := self._residual_check(flow, pkt, c2s)) is not None:
            return v
        if flow.decided is not None:
            return self._repeat(flow.decided)
        # The inspectors still asking about this flow: scoped once, on its first
        # packet (ranges and ports do not change), then thinned as each finishes.
        active = flow.active
        if active is None:
            active = flow.active = self._scoped(flow)
        pending = False
        finished: list[Inspector] = []
        payload = pkt.payload
        for insp in active:
            if not payload and not insp.sees_empty:
                # What its inspect() would answer, without the call.
                if flow.packets < insp.max_packets:
                    pending = True
                else:
                    finished.append(insp)
                continue
            res = insp.inspect(flow, pkt, c2s)
            if res is None:
                pending = True
                continue
            finished.append(insp)
            if res != DONE:
                v = self._matched(flow, pkt, c2s, res)
                if v is not None:
                    return v
        if pending:
            if finished:
                flow.active = [i for i in active if i not in finished]
            return _GO_ON
        flow.active = ()  # every inspector is finished with it
        flow.decided = "accept"
        flows.release(flow)
        return _ACCEPTED

    def _repeat(self, decided: str) -> Verdict:
        """The verdict for a packet of a flow decided earlier (made once per decision)."""
        v = self._repeats.get(decided)
        if v is None:
            v = self._repeats[decided] = Verdict(drop=decided == "drop" and self.in_path,
                                                 flow=decided, repeat=True)
        return v

    def skim(self, key: FlowKey, now: float, c2s: bool, proto: int, flags: int,
             payload_len: int) -> str | None:
        """Count a packet that :meth:`handle` would only count, without a Packet.

        ``key`` is the packet's oriented 5-tuple (as :meth:`FlowTable.lookup`
        makes it), ``now`` its time, ``flags`` its TCP flags and ``payload_len``
        its payload's length. When handle() would do nothing with the packet but
        count it into its flow (a flow already decided, with no residual entry on
        its triple; or an undecided one whose inspectors answer this packet by
        the count alone: an empty packet, or one from the server, below every
        inspector's max_packets), this counts it exactly so and returns the
        flow's decision ("" while undecided). Otherwise it changes nothing and
        returns None, and the packet is for handle(). Pcap mode skims most of a
        capture's packets this way (docs/lab/censor.md §5.1). What it leaves out
        is what nothing reads: a decided flow's per-packet sizes, and the server's
        payloads buffered for inspectors that do not read them.
        """
        pc = self.packet_censor
        if pc is not None:
            quiet = getattr(pc, "ignores", None)
            if quiet is None or not quiet(proto, flags, c2s):
                return None
            self.stats["packets"] += 1
            return ""
        if self.births_watched:
            return None
        flows = self.flows
        table = flows._flows
        flow = table.get(key)
        if flow is None or now - flow.last_seen > flows.idle_s:
            return None
        decided = flow.decided
        if c2s and proto == TCP and flags & 0x17 == 0x02 and (
                decided is not None or flow.first_data is not None):
            return None  # a new connection on the 4-tuple
        if self.residual and ((key[0], key[1], proto, key[4]) if c2s
                              else (key[1], key[0], proto, key[3])) in self.residual:
            return None
        if decided is None:
            active = flow.active
            if active is None or flow.stats is not None or (c2s and payload_len):
                return None
            n = flow.packets + 1
            for insp in active:
                if n >= insp.max_packets or (
                        insp.sees_empty if not payload_len else not insp.client_payload_only):
                    return None
        self.stats["packets"] += 1
        table.move_to_end(key)
        flow.last_seen = now
        flow.packets += 1
        if payload_len and c2s:
            flow.c2s_data_packets += 1
            if flow.first_data is None:
                flow.first_data = now
        return decided or ""

    def flow_of(self, key: FlowKey) -> Flow | None:
        """The flow table's current flow on ``key`` (an oriented 5-tuple), if any."""
        return self.flows.get(key)

    def count_skimmed(self, flow: Flow | None, packets: int, client_payloads: int,
                      last: float) -> None:
        """Count at once ``packets`` that :meth:`skim` would have taken one by one
        (``client_payloads`` of them client payloads, the last at ``last``), into
        ``flow`` (None for a packet censor, which keeps no flows). A flow that the
        table let go as idle meanwhile, its clock not yet moved on, goes back in."""
        self.stats["packets"] += packets
        if flow is None:
            return
        self.flows.keep(flow)
        flow.packets += packets
        flow.last_seen = last
        if client_payloads:
            flow.c2s_data_packets += client_payloads
            if flow.first_data is None:
                flow.first_data = last

    def counts_until(self, flow: Flow) -> int | None:
        """For an undecided flow whose every inspector still asking answers all but
        the client's payloads by the flow's packet count: the count at which the
        first of them gives up (until then :meth:`skim` takes everything but a
        client payload, a new SYN or a residual hit). None otherwise."""
        active = flow.active
        if flow.decided is not None or active is None or flow.stats is not None:
            return None
        limit = None
        for insp in active:
            if not insp.client_payload_only or insp.sees_empty:
                return None
            if limit is None or insp.max_packets < limit:
                limit = insp.max_packets
        return limit

    def judged_in_kernel(self, key: FlowKey, detector: str, evidence: dict[str, Any],
                         packet: Callable[[], Packet]) -> Verdict | None:
        """A flow's first client payload, which a kernel program (censor_sim.bpf)
        has judged for ``detector`` and found no rule exempts; ``key`` is its
        5-tuple, and ``packet`` makes the packet as the kernel reported it.

        What :meth:`handle` would do from the inspector's match on: the same
        residual check, draw, events and actions. The kernel reports a flow once
        (a later connection on its 4-tuple is a new flow, opened by its own SYN)
        and shows nothing more of it, so the flow never enters the flow table.
        None means there is nothing to do: no rule fired, the commonest answer,
        which costs no Flow and no Packet (with the flow's record and the
        verdict, a fifth of this call's time, offline; docs/lab/censor.md §5).
        Only an action, or a residual entry on the flow's triple, makes them.
        """
        self.stats["packets"] += 1
        self.stats["flows"] += 1
        if self.residual and (key[0], key[1], key[2], key[4]) in self.residual:
            flow, pkt = self._reported_flow(key, packet)
            if (v := self._residual_check(flow, pkt, True)) is not None:
                return v
        m = Match(detector, evidence)
        drawn = self._draw(m)
        if not drawn[2] or drawn[1] == ["none"]:
            # The first client payload: the flow's first data packet, 0 s after itself.
            self._detection_event(m, key_json(key), drawn, 1, 0.0)
            return None
        flow, pkt = self._reported_flow(key, packet)
        return self._matched(flow, pkt, True, m, drawn)

    def _reported_flow(self, key: FlowKey, packet: Callable[[], Packet]) -> tuple[Flow, Packet]:
        """A reported flow as the flow table would hold it after its first payload."""
        now = self.clock()
        flow, pkt = Flow(key, now, now, None), packet()
        self.flows.record(flow, pkt, True, now)
        return flow, pkt

    def _scoped(self, flow: Flow) -> Sequence[Inspector]:
        """The inspectors whose scope holds ``flow``: answered once per server
        address, port and protocol (the scope is nothing else), so a new flow to a
        server seen before costs a dict lookup, not a scope test per inspector."""
        if not self._scope_by_server:  # a plugin's inspector scopes by more
            return tuple(i for i in self.inspectors if i.in_scope(flow))
        key = (flow.server, flow.server_port, flow.proto)
        hit = self._scope_cache.get(key)
        if hit is None:
            if len(self._scope_cache) >= SCOPE_CACHE:
                self._scope_cache.clear()
            hit = self._scope_cache[key] = tuple(i for i in self.inspectors if i.in_scope(flow))
        return hit  # shared: a flow's list is thinned into a new one, never edited

    def _residual_check(self, flow: Flow, pkt: Packet, c2s: bool) -> Verdict | None:
        # A block is on its sender's triple: the client's, or (for a block drawn
        # by a packet from outside, Match.reverse) the server side's.
        key = ((flow.client, flow.server, flow.proto, flow.server_port) if c2s
               else (flow.server, flow.client, flow.proto, flow.client_port))
        entry = self.residual.get(key)
        if entry is None:
            return None
        now = self.clock()
        if now >= entry.expires:
            del self.residual[key]
            return None
        cfg = self.actions.get("residual", {})
        if cfg.get("refresh_on_new_flow") and pkt.pure_syn and flow.packets == 1:
            seconds = self._residual_seconds()
            entry.expires = now + seconds
            entry.refreshes += 1
            self.effects.residual(key, seconds)
            self.effects.event("residual_refresh", flow=flow.to_json(), seconds=seconds)
        return Verdict(drop=self.in_path)

    def _remember_residual(self, key: ResidualKey, expires: float) -> None:
        """A block on ``key`` until ``expires``, in a table of at most max_residuals.

        Entries are otherwise dropped only when their 3-tuple is seen again after
        they expire; a flood of blocked triples that never return (a hostile client
        spraying ports) would grow it without end. At the cap, the expired go
        first, then the oldest (insertion order is expiry order for one duration).
        """
        table = self.residual
        table.pop(key, None)  # re-inserted at the end: the newest
        if len(table) >= self.max_residuals:
            now = self.clock()
            for k in [k for k, e in table.items() if e.expires <= now]:
                del table[k]
            while len(table) >= self.max_residuals:
                del table[next(iter(table))]
        table[key] = Residual(expires)

    # -- policy -----------------------------------------------------------------------

    def _draw(self, m: Match) -> tuple[Rule | None, list[str], bool]:
        """The rule for ``m``'s detector, the actions it names, and whether it fires
        (its probability drawn from the engine's rng)."""
        rule = self.rules.get(m.detector)
        acts = rule.actions if rule else ["none"]
        if acts == ["detector"]:  # a device model with its own action table (Iran's ISPs)
            acts = list((m.data or {}).get("actions", ["none"]))
        fire = rule is not None and (rule.probability >= 1 or self.rng.random() < rule.probability)
        return rule, acts, fire

    def _detection_event(self, m: Match, flow: dict[str, Any],
                         drawn: tuple[Rule | None, list[str], bool], data_packet: int,
                         since_data: float | None) -> None:
        rule, acts, fire = drawn
        self.stats["detections"] += 1
        self.effects.event("detection", detector=m.detector, flow=flow,
                           evidence=m.evidence, actions=acts if fire else [],
                           probability=rule.probability if rule else None,
                           data_packet=data_packet, since_first_data_s=since_data)

    def _matched(self, flow: Flow, pkt: Packet, c2s: bool, m: Match,
                 drawn: tuple[Rule | None, list[str], bool] | None = None) -> Verdict | None:
        """The policy's answer to ``m`` on ``flow`` (``drawn``: the draw, if made)."""
        if drawn is None:
            drawn = self._draw(m)
        _, acts, fire = drawn
        # flow.last_seen: this packet's time, as the flow table recorded it.
        since_data = (None if flow.first_data is None
                      else round(flow.last_seen - flow.first_data, 6))
        self._detection_event(m, flow.to_json(), drawn, flow.c2s_data_packets, since_data)
        if not fire or acts == ["none"]:
            return None  # a miss: other inspectors may still match
        self.stats["actions"] += 1
        verdict = Verdict()
        for act in acts:
            self._apply(act, flow, pkt, c2s, m, verdict)
        if verdict.flow is None:
            verdict.flow = "accept"
        flow.decided = verdict.flow
        if verdict.flow == "accept":
            self.flows.release(flow)
        self.effects.event("action", detector=m.detector, flow=flow.to_json(), actions=acts,
                           drop=verdict.drop, flow_verdict=verdict.flow,
                           injected=[i.to_json() for i in verdict.inject])
        return verdict

    def _apply(self, act: str, flow: Flow, pkt: Packet, c2s: bool, m: Match,
               v: Verdict) -> None:
        cfg = self.actions.get(act, {})
        if act == "drop":
            v.drop = self.in_path
            v.flow = "drop"
        elif act == "residual":
            key = ((flow.server, flow.client, flow.proto, flow.client_port) if m.reverse
                   else (flow.client, flow.server, flow.proto, flow.server_port))
            seconds = self._residual_seconds()
            self._remember_residual(key, self.clock() + seconds)
            self.effects.residual(key, seconds)
            # Iran's filter lets the deciding packet through and drops what follows.
            v.drop = self.in_path and c2s and bool(cfg.get("drop_trigger", True))
            v.passthrough = not v.drop
            v.flow = v.flow or "accept"
        elif act == "rst":
            v.inject += rst_for(pkt, c2s, flow, self.rst_shapes, dropped=v.drop, rng=self.rng)
            if cfg.get("drop_trigger", False):
                v.drop = self.in_path
        elif act == "throttle":
            v.flow = "throttle"
        elif act in ("freeze", "loss"):
            v.flow = act  # enforced by the kernel on the flow's mark (datapath.ruleset)
        elif act == "inject_dns":
            from .detectors import dns

            # Forged answers race the real one over UDP; a DNS-over-TCP match
            # gets the other actions of its rule (a RST, say) instead.
            answer = (dns.forge_response(m.data, cfg.get("addresses", ["198.18.255.1"]),
                                         int(cfg.get("ttl", 60)))
                      if flow.proto == UDP and m.data else None)
            if answer is not None:
                v.inject.append(InjectUdp(flow.server, flow.client, flow.server_port,
                                          flow.client_port, answer,
                                          count=int(cfg.get("count", 1))))
            if cfg.get("drop_query", False):
                v.drop = self.in_path
        elif act == "probe":
            self.effects.probe(flow.to_json(), bytes(flow.c2s_payloads[0])
                               if flow.c2s_payloads else b"", m)
        elif act == "block_server":
            self.effects.block_server(flow.server, flow.server_port)
            v.drop = self.in_path
            v.flow = "drop"
        elif act != "none":
            raise ValueError(f"unknown action {act!r}")

    def _residual_seconds(self) -> float:
        choices = self.actions.get("residual", {}).get("seconds", [180])
        if isinstance(choices, int | float):
            return float(choices)
        return float(self.rng.choice(list(choices)))

    # -- detectors that see every packet (Geneva's censors) ---------------------------

    def _whole_packet(self, pkt: Packet, from_client: bool) -> Verdict:
        censor = self.packet_censor
        before = len(censor.detections)
        v = censor.process(pkt, from_client)
        for d in censor.detections[before:]:
            self.stats["detections"] += 1
            self.effects.event("detection", detector=censor.name, evidence=d)
        if v.drop and not self.in_path:
            v.drop = False
        return v


def rst_for(pkt: Packet, c2s: bool, flow: Flow, shapes: list[dict[str, Any]],
            dropped: bool, rng: random.Random | None = None) -> list[InjectTcp]:
    """Forged RSTs for the flow of `pkt`, landing in each receiver's window, in each
    of `shapes` (``rstprints.presets``: a measured injector's fingerprint)."""
    if pkt.proto != TCP or not pkt.flags & ACK:
        return []
    end = pkt.seq + (0 if dropped else len(pkt.payload))
    # The sender of pkt expects pkt.ack next from its peer; the peer expects `end`.
    # Addresses and numbers only: flags, window, TTL and the rest are the shape's.
    if c2s:
        to_client = InjectTcp(flow.server, flow.client, flow.server_port, flow.client_port,
                              seq=pkt.ack, ack=end)
        to_server = InjectTcp(flow.client, flow.server, flow.client_port, flow.server_port,
                              seq=end, ack=pkt.ack)
    else:
        to_client = InjectTcp(flow.server, flow.client, flow.server_port, flow.client_port,
                              seq=end, ack=pkt.ack)
        to_server = InjectTcp(flow.client, flow.server, flow.client_port, flow.server_port,
                              seq=pkt.ack, ack=end)
    rng = rng or random.Random(0)
    out: list[InjectTcp] = []
    for shape in shapes:
        to = shape.get("to", "both")
        if to in ("client", "both"):
            out += rstprints.forge(shape, to_client, rng)
        if to in ("server", "both"):
            out += rstprints.forge(shape, to_server, rng)
    return out


def _fast_path_unsupported(profile: Any) -> str | None:
    """Why ``datapath.fast_path`` cannot run this profile, or None (also when unset)."""
    fast = profile.datapath.get("fast_path")
    if fast is None:
        return None
    if fast != "ebpf":
        return "datapath.fast_path: must be 'ebpf', or left out"
    if profile.datapath.get("mode", "in-path") != "on-path":
        return ("datapath.fast_path: the kernel program never holds a packet for the policy, "
                "so the profile needs datapath.mode = 'on-path'")
    kinds = {name: params.get("kind", name) for name, params in profile.detectors.items()
             if params.get("kind", name) not in registry.KERNEL_ONLY}
    if not kinds:
        return "datapath.fast_path: the profile has no detector to run in the kernel"
    for name, kind in kinds.items():
        if kind not in KERNEL_DETECTORS:
            return (f"datapath.fast_path: detectors.{name} ({kind}) has no kernel program "
                    f"(these do: {', '.join(sorted(KERNEL_DETECTORS))})")
    if len(kinds) > 1:
        return "datapath.fast_path: one kernel detector per profile"
    return None


def unsupported(profile: Any) -> str | None:
    """Why `profile` cannot run as written (checked when a spec loads), or None."""
    for i, rule in enumerate(profile.policy.get("rules", [])):
        kind = profile.detectors.get(rule.get("detector"), {}).get("kind", rule.get("detector"))
        if kind == "ip_blocklist":
            # Static address blocking is the kernel's alone: no per-flow chance.
            if rule.get("action") != "drop":
                return (f"policy.rules[{i}]: ip_blocklist -> {rule.get('action')} is not "
                        f"implemented (the kernel blocklist only drops)")
            if rule.get("probability", 1.0) != 1.0:
                return f"policy.rules[{i}].probability: only 1.0 is implemented for ip_blocklist"
    if profile.datapath.get("mode", "in-path") not in ("in-path", "on-path"):
        return "datapath.mode: must be 'in-path' or 'on-path'"
    if (why := _fast_path_unsupported(profile)) is not None:
        return why
    for key, low, high in (("tap_batch", 1, 1024), ("tap_wait_ms", 0, 1000),
                           ("max_flows", 1, 1 << 24), ("max_residuals", 1, 1 << 24)):
        value = profile.datapath.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not low <= value <= high):
            return f"datapath.{key}: must be a whole number from {low} to {high}"
    idle = profile.datapath.get("flow_idle_s")
    if idle is not None and (isinstance(idle, bool) or not isinstance(idle, int | float)
                             or not 0 < idle <= 86400):
        return "datapath.flow_idle_s: must be a number of seconds above 0, at most 86400"
    try:
        Engine(profile, clock=lambda: 0.0, rng=random.Random(0))
    except (ValueError, KeyError, TypeError) as exc:
        return str(exc)
    return None
