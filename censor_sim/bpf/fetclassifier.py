"""The FET classifier in the kernel (fet.bpf.c), driven from Python.

Loads the program, fills its targets (server prefixes and ports, as the "fet"
detector's ``servers`` and ``ports`` parameters), and reads back what it found:
one :class:`FetReport` per flow no exemption rule covered, with the features the
Python detector logs (censor_sim/detectors/fet.py, ``not_exempt_evidence``), and
its counters. The same object serves a live censor (:meth:`attach` to the
router's client-side interface) and tests and benchmarks (:meth:`run_frame`,
BPF_PROG_TEST_RUN: the kernel runs the program on a frame we built).
"""

from __future__ import annotations

import ipaddress
import os
import struct
from socket import AF_INET, AF_INET6, inet_ntop, ntohs
from typing import Any, NamedTuple

from ..packet import TCP, Packet
from . import libbpf
from .build import compiled
from .ringbuf import RingReader

PROGRAM = "fet_classify"
TC_ACT_OK = 0
"""The program's verdict on every packet: pass. Blocking is the policy's, in user space."""
MAX_PAYLOAD = 1460
"""fet.bpf.c's FET_MAX_PAYLOAD: a longer (GSO) payload is judged on this many bytes."""

EVENTS_BYTES = 1 << 22
"""fet.bpf.c's fet_events ring buffer, in bytes."""

COUNTERS = ("packets", "flows", "judged", "ex1", "ex2", "ex3", "ex4", "ex5", "not_exempt",
            "lost", "truncated")
"""fet.bpf.c's counter slots, in order."""

# struct fet_event up to its payload: struct flow_key (ports in network order),
# then the measurements and the TCP numbers.
_EVENT = struct.Struct("=16s16sHHB3x8IB3x")
_U32 = struct.Struct("=I")
_CONFIG = struct.Struct("=IIQ")  # struct fet_config


# Addresses as text, by their 16 bytes and family: a lab's flows come from few
# clients to few servers, and a dict hit is a third of inet_ntop's cost.
_ADDRESSES: dict[tuple[bytes, int], str] = {}
_ADDRESSES_MAX = 4096


def _address(raw: bytes, family: int) -> str:
    text = _ADDRESSES.get((raw, family))
    if text is None:
        text = inet_ntop(AF_INET, raw[:4]) if family == 4 else inet_ntop(AF_INET6, raw)
        if len(_ADDRESSES) >= _ADDRESSES_MAX:
            _ADDRESSES.clear()
        _ADDRESSES[(raw, family)] = text
    return text


class FetReport(NamedTuple):
    """A flow whose first payload no rule exempted, as the kernel measured it.

    A named tuple and ``inet_ntop``: the censor decodes one per flow it acts on,
    and with a frozen dataclass and ``ipaddress`` that took 8.8 µs, not 1.5."""

    client: str
    client_port: int
    server: str
    server_port: int
    length: int
    wire_length: int
    bits: int
    leading_printable: int
    printable: int
    longest_run: int
    seq: int
    ack: int
    tcp_flags: int
    payload: bytes

    @classmethod
    def decode(cls, raw: bytes) -> FetReport:
        return cls.decode_from(raw, 0, len(raw))

    @classmethod
    def decode_from(cls, buf: Any, offset: int, size: int) -> FetReport:
        """The report at ``offset`` of ``buf`` (the ring buffer's memory, read in
        place: RingReader.drain_with); ``size`` is the record's length."""
        (client, server, cport, sport, family, length, wire, bits, leading, printable,
         longest, seq, ack, flags) = _EVENT.unpack_from(buf, offset)
        c, s = _address(client, family), _address(server, family)
        at = offset + _EVENT.size
        return cls(c, ntohs(cport), s, ntohs(sport), length, wire, bits, leading, printable,
                   longest, seq, ack, flags, buf[at:at + min(length, size - _EVENT.size)])

    def packet(self) -> Packet:
        """The reported packet, as far as the policy reads one: addresses, ports,
        TCP numbers (a forged RST's window) and the judged bytes."""
        return Packet(raw=b"", version=6 if ":" in self.client else 4, src=self.client,
                      dst=self.server, proto=TCP, ttl=0, ip_id=0, l4_offset=0,
                      sport=self.client_port, dport=self.server_port, seq=self.seq,
                      ack=self.ack, flags=self.tcp_flags, dataofs=5, payload=self.payload)

    def evidence(self) -> dict[str, Any]:
        """What the censor logs of the flow, field for field as
        ``detectors.fet.not_exempt_evidence`` gives it for the same bytes."""
        n = self.length
        return {"rule": "not-exempt", "length": n, "popcount_per_byte": self.bits / n,
                "leading_printable": self.leading_printable,
                "printable_fraction": self.printable / n,
                "longest_printable_run": self.longest_run, "protocol": None}


class FetClassifier:
    """fet.bpf.c loaded into the kernel, targeting ``servers`` (CIDR prefixes; none
    means every server) and ``ports`` (none means every port). With ``batch`` above
    1, :meth:`events_fileno` turns readable only once that many reports wait, and
    the caller drains the rest on a timer of its own (as an NFLOG batch).

    Needs CAP_BPF and CAP_NET_ADMIN (root in the lab). Close it, or use it as a
    context manager: the program, its maps and any tc attachment go with it."""

    def __init__(self, servers: list[str] | tuple[str, ...] = (),
                 ports: list[int] | tuple[int, ...] = (), batch: int = 1) -> None:
        self._obj = libbpf.BpfObject(compiled("fet"))
        self._attachments: list[libbpf.TcAttachment] = []
        self._events: RingReader | None = None
        self._stats_fd: int | None = None
        try:
            self.prog_fd = self._obj.program_fd(PROGRAM)
            self._configure(list(servers), list(ports), batch)
            self._events = RingReader(self._obj.map_fd("fet_events"), EVENTS_BYTES)
        except BaseException:
            self.close()
            raise

    def _configure(self, servers: list[str], ports: list[int], batch: int) -> None:
        nets = [ipaddress.ip_network(s, strict=False) for s in servers] or [
            ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")]
        for net in nets:
            table = "fet_servers4" if net.version == 4 else "fet_servers6"
            key = _U32.pack(net.prefixlen) + net.network_address.packed
            libbpf.map_update(self._obj.map_fd(table), key, b"\x01")
        for port in ports:
            if not 0 < int(port) < 65536:
                raise ValueError(f"not a TCP port: {port!r}")
            libbpf.map_update(self._obj.map_fd("fet_ports"), struct.pack("=H", int(port)),
                              b"\x01")
        if not 1 <= batch <= 1024:
            raise ValueError(f"batch: from 1 to 1024 reports, not {batch!r}")
        # A ring buffer record is the event behind an 8-byte header, 8-aligned.
        record = -(-(_EVENT.size + MAX_PAYLOAD + 8) // 8) * 8
        libbpf.map_update(self._obj.map_fd("fet_config"), _U32.pack(0),
                          _CONFIG.pack(0 if ports else 1, 0, 0 if batch == 1 else batch * record))

    def attach(self, ifname: str) -> None:
        """Run on every packet arriving at ``ifname`` (this namespace's), from now on."""
        self._attachments.append(libbpf.TcAttachment(ifname, self.prog_fd))

    def run_frame(self, frame: bytes) -> int:
        """Run the program once on an Ethernet frame, in the kernel, maps and all:
        its tc verdict (always :data:`TC_ACT_OK`)."""
        return libbpf.test_run(self.prog_fd, frame)[0]

    def reports(self) -> list[FetReport]:
        """Every flow reported since the last call, oldest first."""
        if self._events is None:
            return []
        return self._events.drain_with(FetReport.decode_from)

    def events_fileno(self) -> int:
        """Readable when the program has woken the reader (the ring buffer map)."""
        if self._events is None:
            raise ValueError("the classifier is closed")
        return self._events.fd

    def counters(self) -> dict[str, int]:
        """The program's counters, summed over CPUs."""
        fd = self._obj.map_fd("fet_counts")
        cpus = libbpf.possible_cpus()
        out = {}
        for slot, name in enumerate(COUNTERS):
            raw = libbpf.map_lookup(fd, _U32.pack(slot), 8 * cpus) or b""
            out[name] = sum(struct.unpack(f"={len(raw) // 8}Q", raw))
        return out

    def measure_run_time(self) -> None:
        """From now on, have the kernel time the program (:meth:`run_time`)."""
        if self._stats_fd is None:
            self._stats_fd = libbpf.enable_run_time_stats()

    def run_time(self) -> tuple[int, int]:
        """(nanoseconds, runs) of the program since :meth:`measure_run_time`."""
        return libbpf.program_run_stats(self.prog_fd)

    def close(self) -> None:
        if self._stats_fd is not None:
            os.close(self._stats_fd)
            self._stats_fd = None
        for a in self._attachments:
            a.detach()
        self._attachments.clear()
        if self._events is not None:
            self._events.close()
            self._events = None
        self._obj.close()

    def __enter__(self) -> FetClassifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
