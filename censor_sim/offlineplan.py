"""Which packets of a batch pcap mode's loop must look at, and the counts of the rest.

Why this exists: most packets of a capture change nothing but their flow's
counters: the engine has decided the flow, or its inspectors wait for a client
payload and answer everything else by the count (:meth:`Engine.skim`). Walking
each of them in Python was most of pcap mode's time (docs/lab/censor.md §5.1).
A :class:`Plan` finds, for one batch and with numpy, the packets the loop must
see (*candidates*); the loop adds more as it learns (the next packets of a flow
still undecided, the later packets on a triple a residual block now covers),
and counts the others into their flows in bulk (:meth:`Plan.pending`).

A packet is a candidate when it may be anything but counted:

* the first packet of its 4-tuple in the batch, which decides the flow's side
  and, if new, creates it;
* one after more than ``flow_idle_s`` of silence on its 4-tuple (a new flow);
* a TCP SYN without ACK, RST or FIN (a new connection on the 4-tuple);
* one on a (sender, receiver, protocol, port) triple a residual block holds;
* one of a protocol some inspector reads every packet of (not only client
  payloads), or one a packet censor may act on;
* every packet of a batch that holds one :mod:`censor_sim.pcapbatch` could not
  parse with numpy.

The flows' packets skipped are counted as the engine counts them, so the
verdicts are those of the per-packet loop (``replay(..., skim=False)``); the
tests compare the two (tests/censor_sim/test_offlineplan.py). What differs is
what nothing reads: the flow table's least-recently-used order, which evicts
flows only past ``datapath.max_flows``, and a decided flow's time of first
payload. Near that cap the loop stops planning and walks every packet.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

import numpy as np

from . import pcapbatch
from .packet import TCP

# A key that sorts after every position: "no such packet".
_NONE = 1 << 62


def _member(values: np.ndarray, keys: list[int]) -> np.ndarray:
    """Which ``values`` are among ``keys`` (np.isin's answer, without the import of
    numpy.ma it brings, which costs a pcap-mode run 50 ms)."""
    table = np.unique(np.asarray(keys, np.int64))
    at = np.minimum(np.searchsorted(table, values), len(table) - 1)
    return table[at] == values


class Plan:
    """One batch's candidates and, per 4-tuple, its packets in order and their sums.

    Slots are the batch's 4-tuples (with clients named, its client-oriented
    flows). Positions are places in the packets sorted by slot, then by time.
    """

    def __init__(self, batch: pcapbatch.Batch, *, start_count: int, flush_every: int,
                 idle_s: float, every_packet_protos: set[int], censor_may_act: Any,
                 residual_keys: Iterable[tuple[str, str, int, int]],
                 client_side: Any, freeze: bool) -> None:
        arr = batch.arrays
        kind = arr["kind"]
        n = batch.n
        self.batch = batch
        counted = kind != pcapbatch.NOT_IP
        seen = np.cumsum(counted) - 1 + start_count
        self.flush_points = np.flatnonzero(counted & (seen % flush_every == 0)).tolist()
        self.count_after = start_count + int(counted.sum())
        valid = (kind == pcapbatch.V4) | (kind == pcapbatch.V6)
        rows = np.flatnonzero(valid)
        self.rows = rows
        self.heap: list[int] = []
        self.touched: list[Any] = []  # the flows whose packets here are yet to be counted
        self._names: dict[str, int] | None = None
        n_addr = len(arr["addresses"])
        self.walk_all = (bool((kind == pcapbatch.SLOW).any()) or not len(rows)
                         or n_addr >= 1 << 15)
        # Sums over positions, per end of a slot (A, B), and each end's next payload.
        self.cum_payload: tuple[list[int], list[int]] | None = None
        self.cum_count: tuple[list[int], list[int]] | None = None
        self.cum_bytes: tuple[list[int], list[int]] | None = None
        self.next_payload: tuple[list[int], list[int]] | None = None
        if self.walk_all:
            # Packets only the per-packet parser reads, or too many addresses for the
            # keys below: the loop looks at every packet of this batch.
            self.static = np.flatnonzero(counted).tolist()
            self.cand = bytearray(counted.astype(np.uint8).tobytes())
            self.n_slots = 0
            return
        src, dst = arr["src_id"][rows], arr["dst_id"][rows]
        sport, dport = arr["sport"][rows], arr["dport"][rows]
        proto, flags = arr["proto"][rows], arr["flags"][rows]
        udp = (proto == 17).astype(np.int64)
        if client_side is not None:
            # The client is whoever the named networks hold: a flow per orientation,
            # its A end the client.
            a_is_src = client_side(batch, rows)
        else:
            a_is_src = (src < dst) | ((src == dst) & (sport <= dport))
        a_id, b_id = np.where(a_is_src, src, dst), np.where(a_is_src, dst, src)
        a_port, b_port = np.where(a_is_src, sport, dport), np.where(a_is_src, dport, sport)
        key = (a_id << 48) | (b_id << 33) | (a_port << 17) | (b_port << 1) | udp
        uniq, slot = np.unique(key, return_inverse=True)
        slot = slot.ravel().astype(np.int64)
        self.n_slots = len(uniq)
        order = np.argsort(slot, kind="stable")
        pos = np.empty(len(rows), np.int64)
        pos[order] = np.arange(len(rows))
        sorted_slot = slot[order]
        slots = np.arange(self.n_slots)
        starts = np.searchsorted(sorted_slot, slots)
        ends = np.searchsorted(sorted_slot, slots, side="right")
        first_of_slot = pos == starts[slot]
        ts = arr["ts"][rows]
        prev = rows[order[np.maximum(pos - 1, 0)]]
        gap = ~first_of_slot & (ts - arr["ts"][prev] > idle_s)
        syn = (proto == TCP) & ((flags & 0x17) == 0x02)
        cand = first_of_slot | gap | syn
        for every in every_packet_protos:
            cand |= proto == every
        if censor_may_act is not None:
            cand |= censor_may_act(proto, flags)
        # Triples: a residual block holds (sender, receiver, protocol, receiver's port).
        self.triple = (src << 32) | (dst << 17) | (dport << 1) | udp
        held = [k for k in (self._triple_key(*rk) for rk in residual_keys) if k is not None]
        if held:
            cand |= _member(self.triple, held)
        full = np.zeros(n, np.uint8)
        full[rows[cand]] = 1
        self.cand = bytearray(full.tobytes())
        self.static = rows[cand].tolist()

        def spread(values: np.ndarray, fill: int) -> list[Any]:
            out = np.full(n, fill, np.int64)
            out[rows] = values
            return out.tolist()

        self.slot_of = spread(slot, -1)
        self.pos = spread(pos, 0)
        self.side_a = spread(a_is_src, 0)
        self.order = rows[order].tolist()  # rows in slot order
        self.ends = ends.tolist()
        self.applied = starts.tolist()  # each slot's first position not yet counted
        # Each slot's current flow (pcap mode's verdict): the one its skipped packets
        # are counted into.
        self.owner: list[Any] = [None] * self.n_slots
        self.ts = batch.ts
        # Which end of each slot is the client: known now when clients are named,
        # else once the loop has oriented the slot's first packet.
        self.client_a: list[bool | None] = ([True] * self.n_slots if client_side is not None
                                            else [None] * self.n_slots)
        side_a = a_is_src[order]  # in slot order: sent from the slot's A end
        payload = arr["plen"][rows][order] > 0
        self._finish_arrays((side_a, payload, arr["wire"][rows][order] if freeze else None,
                             len(rows)))

    def _triple_key(self, sender: str, receiver: str, proto: int, port: int) -> int | None:
        """A residual key as this batch numbers it (None: an address not in it)."""
        if self._names is None:
            self._names = {name: i for i, name in enumerate(self.batch.arrays["addresses"])}
        a, b = self._names.get(sender), self._names.get(receiver)
        if a is None or b is None:
            return None
        return (a << 32) | (b << 17) | (port << 1) | int(proto == 17)

    def _finish_arrays(self, parts: tuple[Any, ...]) -> None:
        side_a, payload, wire, m = parts

        def cumulative(x: np.ndarray) -> list[int]:
            return np.concatenate([[0], np.cumsum(x)]).tolist()

        # Per end (A, B): payload packets, bytes and packets sent, summed over positions.
        self.cum_payload = (cumulative(payload & side_a), cumulative(payload & ~side_a))
        self.cum_count = (cumulative(side_a), cumulative(~side_a))
        self.cum_bytes = ((cumulative(np.where(side_a, wire, 0)),
                           cumulative(np.where(~side_a, wire, 0))) if wire is not None else None)
        # Per end: the next position (after each) of a payload packet sent by that end.
        idx = np.arange(m, dtype=np.int64)
        nxt = []
        for mine in (payload & side_a, payload & ~side_a):
            marks = np.where(mine, idx, _NONE)
            after = np.concatenate([marks[1:], [_NONE]])
            nxt.append(np.minimum.accumulate(after[::-1])[::-1].tolist())
        self.next_payload = (nxt[0], nxt[1])

    # -- the walk ---------------------------------------------------------------------

    def walk(self) -> Iterable[int]:
        """Candidate rows in order, including those added (:meth:`add`) while walking."""
        static = self.static
        heap: list[int] = []
        self.heap = heap
        si, ns = 0, len(static)
        while True:
            if heap and (si >= ns or heap[0] < static[si]):
                yield heapq.heappop(heap)
            elif si < ns:
                si += 1
                yield static[si - 1]
            else:
                return

    def add(self, i: int) -> None:
        """Make row ``i`` (later than the row being walked) a candidate."""
        if not self.cand[i]:
            self.cand[i] = 1
            heapq.heappush(self.heap, i)

    def side_a_of(self, i: int) -> bool:
        """Whether row ``i`` was sent from its slot's A end."""
        return bool(self.side_a[i])

    def next_in_slot(self, i: int, k: int = 1) -> int | None:
        p = self.pos[i] + k
        return self.order[p] if p < self.ends[self.slot_of[i]] else None

    def next_client_payload(self, i: int) -> int | None:
        s = self.slot_of[i]
        client_a = self.client_a[s]
        assert self.next_payload is not None and client_a is not None
        p = self.next_payload[0 if client_a else 1][self.pos[i]]
        return self.order[p] if p < self.ends[s] else None

    def rest_of_slot(self, i: int) -> None:
        """Every later row of ``i``'s 4-tuple becomes a candidate."""
        for p in range(self.pos[i] + 1, self.ends[self.slot_of[i]]):
            self.add(self.order[p])

    def rows_on_triple(self, i: int, rkey: tuple[str, str, int, int]) -> None:
        """Every later row on a residual block's triple ``rkey`` (sender, receiver,
        protocol, receiver's port) becomes a candidate."""
        k = self._triple_key(*rkey)
        if k is None:
            return
        for j in np.flatnonzero(self.triple == k).tolist():
            row = int(self.rows[j])
            if row > i:
                self.add(row)

    def pending(self, s: int, upto: int) -> tuple[int, int, int, int, float] | None:
        """The packets of slot ``s`` before position ``upto`` not yet counted, and
        marks them counted: (packets, the client's payload packets, the server's
        packets, the server's IP bytes, the time of the last). None if none."""
        p0 = self.applied[s]
        if upto <= p0:
            return None
        self.applied[s] = upto
        client_a = self.client_a[s]
        c, v = (0, 1) if client_a else (1, 0)
        cp, cc = self.cum_payload, self.cum_count
        assert cp is not None and cc is not None
        server_bytes = 0
        if self.cum_bytes is not None:
            server_bytes = self.cum_bytes[v][upto] - self.cum_bytes[v][p0]
        return (upto - p0, cp[c][upto] - cp[c][p0], cc[v][upto] - cc[v][p0], server_bytes,
                self.ts[self.order[upto - 1]])

    def upto_before(self, s: int, row: int) -> int:
        """The position in slot ``s`` of its first row at or after ``row``."""
        p, end = self.applied[s], self.ends[s]
        order = self.order
        while p < end and order[p] < row:
            p += 1
        return p
