"""The censor's flow table: per-connection state for the packets it inspects.

A flow is oriented: its *client* is the side inside the censored network
(the censor knows this from the interface a packet came in on), so detectors
can ask for "the first client→server payload" as the GFW's FET rules do.
State lives only while a flow is undecided or recently seen; it is dropped
after ``idle_s`` without packets (on the injectable clock) and the table is
capped, as a real middlebox's is.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from .detectors.stats import FlowStats
from .packet import Packet

FlowKey = tuple[str, str, int, int, int]  # client, server, proto, client port, server port


class KeyedFlow:
    """Names for the parts of an oriented flow key (client, server, proto, ports)."""

    __slots__ = ()  # so that Flow's slots are all it has

    key: FlowKey

    @property
    def client(self) -> str:
        return self.key[0]

    @property
    def server(self) -> str:
        return self.key[1]

    @property
    def proto(self) -> int:
        return self.key[2]

    @property
    def client_port(self) -> int:
        return self.key[3]

    @property
    def server_port(self) -> int:
        return self.key[4]


class Flow(KeyedFlow):
    """One oriented flow's state while the censor still has a use for it.

    A plain class with slots, its containers made when first needed: the tap
    makes one of these for every connection it sees, most are decided on their
    first payload, and each container allocated is work for the allocator and
    the garbage collector on the censor's hottest path (benchmarks/censor.py).
    """

    __slots__ = ("key", "first_seen", "last_seen", "stats", "c2s_payloads", "s2c_payloads",
                 "c2s_bytes", "s2c_bytes", "packets", "c2s_data_packets", "first_data",
                 "_state", "active", "decided", "c2s_seq_end")

    def __init__(self, key: FlowKey, first_seen: float, last_seen: float,
                 stats: FlowStats | None = None) -> None:
        self.key = key
        self.first_seen = first_seen
        self.last_seen = last_seen
        # Per-packet sizes, directions and times, when an inspector scoped to this
        # flow reads them (FlowTable.record_stats, new_stats); None otherwise.
        self.stats = stats
        # Client→server / server→client payloads in arrival order, kept while their
        # total is under the table's cap; parsers that need more than one segment
        # (a large ClientHello) read them, or their concatenation (c2s, s2c).
        self.c2s_payloads: list[bytes] = _NO_PAYLOADS
        self.s2c_payloads: list[bytes] = _NO_PAYLOADS
        self.c2s_bytes = 0
        self.s2c_bytes = 0
        self.packets = 0
        # Client→server packets with payload so far, and when the first arrived: a
        # detection says which data packet it fired on, and how long after the first.
        self.c2s_data_packets = 0
        self.first_data: float | None = None
        self._state: dict[str, Any] | None = None
        # The engine's inspectors still asking about this flow (None until its first
        # packet); one that is finished with it is no longer here.
        self.active: Sequence[Any] | None = None
        self.decided: str | None = None
        # Where the client's TCP byte stream had got to (sequence number after its
        # last payload seen), when the table tells connections apart by it; -1 before.
        self.c2s_seq_end = -1

    def __repr__(self) -> str:
        return f"Flow({self.key!r}, packets={self.packets}, decided={self.decided!r})"

    @property
    def state(self) -> dict[str, Any]:
        """Per-detector scratch state (made at the first detector's use)."""
        if self._state is None:
            self._state = {}
        return self._state

    @property
    def c2s(self) -> bytes:
        """The client's payload bytes so far, up to the table's cap."""
        return _joined(self.c2s_payloads, self.c2s_bytes)

    @property
    def s2c(self) -> bytes:
        """The server's payload bytes so far, up to the table's cap."""
        return _joined(self.s2c_payloads, self.s2c_bytes)

    def to_json(self) -> dict[str, Any]:
        return key_json(self.key)


def key_json(k: FlowKey) -> dict[str, Any]:
    """A flow's 5-tuple as the censor's event lines write it."""
    return {"client": k[0], "server": k[1], "proto": k[2], "client_port": k[3],
            "server_port": k[4]}


# Shared by every flow with no payload yet, or whose buffers are released: never
# appended to (the table gives a flow its own list at its first payload).
_NO_PAYLOADS: list[bytes] = []


def _joined(chunks: list[bytes], kept: int) -> bytes:
    data = b"".join(chunks)
    return data[:kept] if len(data) > kept else data


# How far (bytes) a client payload's sequence number may sit from where its flow's
# stream had got to and still belong to it: a TCP window and more, where two
# connections' random initial sequence numbers fall this close once in 2,000.
SEQ_WINDOW = 1 << 20


class FlowTable:
    """Oriented flows keyed by 5-tuple, with idle expiry and a size cap."""

    def __init__(self, clock: Callable[[], float], idle_s: float = 120.0,
                 max_flows: int = 65536, buffer_cap: int = 65536,
                 stats_packets: int = 30, record_stats: bool = True,
                 reuse_by_seq: bool = False) -> None:
        self.clock = clock
        # Without SYNs (an on-path tap that leaves them in the kernel), a reused
        # 4-tuple's new connection shows itself by a sequence number far from where
        # the old connection's client stream had got to.
        self.reuse_by_seq = reuse_by_seq
        # Per-packet sizes and times (flow.stats) on every new flow. The engine
        # turns this off and gives them (new_stats) only to the flows an inspector
        # that reads them is scoped to (Inspector.uses_flow_stats).
        self.record_stats = record_stats
        self.idle_s = idle_s
        self.max_flows = max_flows
        self.buffer_cap = buffer_cap
        self.stats_packets = stats_packets
        self._flows: OrderedDict[FlowKey, Flow] = OrderedDict()

    def __len__(self) -> int:
        return len(self._flows)

    def lookup(self, pkt: Packet, from_client: bool) -> tuple[Flow, bool]:
        """The flow of `pkt` (created if new) and whether the packet is client→server."""
        now = self.clock()
        if from_client:
            key = (pkt.src, pkt.dst, pkt.proto, pkt.sport, pkt.dport)
        else:
            key = (pkt.dst, pkt.src, pkt.proto, pkt.dport, pkt.sport)
        flow = self._flows.get(key)
        if flow is not None and (now - flow.last_seen > self.idle_s
                                 or (from_client and pkt.proto == 6 and pkt.pure_syn
                                     and (flow.decided is not None
                                          or flow.first_data is not None))):
            # Idle too long, or a new connection on the same 4-tuple: a client that
            # reuses its source port after a reset (Go's dialer does, often) opens
            # a connection the censor must judge afresh. A SYN retransmitted before
            # any data or decision stays in its flow.
            del self._flows[key]
            flow = None
        elif (flow is not None and self.reuse_by_seq and from_client and pkt.payload
              and flow.c2s_seq_end >= 0 and pkt.proto == 6
              and SEQ_WINDOW < (pkt.seq - flow.c2s_seq_end) % 0x100000000
              < 0x100000000 - SEQ_WINDOW):
            # A payload nowhere near the old stream: a new connection on this 4-tuple
            # whose SYN the censor did not see (copies that race a decision, and
            # retransmissions, fall inside the window).
            del self._flows[key]
            flow = None
        if flow is None:
            flow = Flow(key, now, now, self.new_stats() if self.record_stats else None)
            self._flows[key] = flow
            self._expire(now)
        else:
            self._flows.move_to_end(key)
        return flow, from_client

    def get(self, key: FlowKey) -> Flow | None:
        """The flow on ``key``, as the table holds it, with nothing counted."""
        return self._flows.get(key)

    def keep(self, flow: Flow) -> None:
        """Make ``flow`` the most recently used, putting it back if the table let it
        go (pcap mode counts a batch's skipped packets late: censor_sim.offlineplan)."""
        held = self._flows.get(flow.key)
        if held is flow:
            self._flows.move_to_end(flow.key)
        elif held is None:
            self._flows[flow.key] = flow
        else:
            raise RuntimeError(f"flow table: {flow.key!r} holds another flow")

    def new_stats(self) -> FlowStats:
        """An empty per-packet record, as long as this table keeps them."""
        return FlowStats(self.stats_packets)

    def record(self, flow: Flow, pkt: Packet, c2s: bool, now: float | None = None) -> None:
        """Count ``pkt`` into its flow and keep its payload while the flow is
        undecided; ``now`` is the clock as :meth:`lookup` read it, if the caller has it."""
        if now is None:
            now = self.clock()
        flow.last_seen = now
        flow.packets += 1
        payload = pkt.payload
        stats = flow.stats
        if stats is not None:
            stats.add(1 if c2s else -1, len(payload), now - flow.first_seen)
        if not payload:
            return
        if c2s:
            flow.c2s_data_packets += 1
            if flow.first_data is None:
                flow.first_data = now
            if self.reuse_by_seq and pkt.proto == 6:
                flow.c2s_seq_end = (pkt.seq + len(payload)) % 0x100000000
        if flow.decided is not None:
            return
        if c2s:
            kept, chunks = flow.c2s_bytes, flow.c2s_payloads
        else:
            kept, chunks = flow.s2c_bytes, flow.s2c_payloads
        if kept >= self.buffer_cap:
            return
        if not chunks:
            if stats is not None:
                stats.note_first_payload(1 if c2s else -1, payload)
            chunks = [payload]
            if c2s:
                flow.c2s_payloads = chunks
            else:
                flow.s2c_payloads = chunks
        else:
            chunks.append(payload)
        kept = min(kept + len(payload), self.buffer_cap)
        if c2s:
            flow.c2s_bytes = kept
        else:
            flow.s2c_bytes = kept

    def forget(self, flow: Flow) -> None:
        self._flows.pop(flow.key, None)

    def release(self, flow: Flow) -> None:
        """Keep a decided flow's verdict (packets already queued behind the deciding
        one still arrive) but free its buffers."""
        flow.c2s_payloads = flow.s2c_payloads = _NO_PAYLOADS
        flow.c2s_bytes = flow.s2c_bytes = 0
        flow._state = None

    def _expire(self, now: float) -> None:
        flows = self._flows
        while flows:
            key = next(iter(flows))
            if len(flows) > self.max_flows or now - flows[key].last_seen > self.idle_s:
                del flows[key]
            else:
                break
