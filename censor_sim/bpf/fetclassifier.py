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
import struct
from dataclasses import dataclass
from typing import Any

from . import libbpf
from .build import compiled

PROGRAM = "fet_classify"
TC_ACT_OK = 0
"""The program's verdict on every packet: pass. Blocking is the policy's, in user space."""
MAX_PAYLOAD = 1460
"""fet.bpf.c's FET_MAX_PAYLOAD: a longer (GSO) payload is judged on this many bytes."""

COUNTERS = ("packets", "flows", "judged", "ex1", "ex2", "ex3", "ex4", "ex5", "not_exempt",
            "lost", "truncated")
"""fet.bpf.c's counter slots, in order."""

_FLOW = struct.Struct("=16s16sHHB3x")  # struct flow_key; ports in network order
_EVENT = struct.Struct(f"={_FLOW.size}s8IB3x")  # struct fet_event, up to its payload
_U32 = struct.Struct("=I")


@dataclass(frozen=True, slots=True)
class FetReport:
    """A flow whose first payload no rule exempted, as the kernel measured it."""

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
        (flow, length, wire, bits, leading, printable, longest, seq, ack,
         flags) = _EVENT.unpack_from(raw)
        client, server, cport, sport, family = _FLOW.unpack(flow)
        if family == 4:
            c, s = str(ipaddress.IPv4Address(client[:4])), str(ipaddress.IPv4Address(server[:4]))
        else:
            c, s = str(ipaddress.IPv6Address(client)), str(ipaddress.IPv6Address(server))
        return cls(c, int.from_bytes(cport.to_bytes(2, "little"), "big"), s,
                   int.from_bytes(sport.to_bytes(2, "little"), "big"), length, wire, bits,
                   leading, printable, longest, seq, ack, flags,
                   raw[_EVENT.size:_EVENT.size + length])

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
    means every server) and ``ports`` (none means every port).

    Needs CAP_BPF and CAP_NET_ADMIN (root in the lab). Close it, or use it as a
    context manager: the program, its maps and any tc attachment go with it."""

    def __init__(self, servers: list[str] | tuple[str, ...] = (),
                 ports: list[int] | tuple[int, ...] = ()) -> None:
        self._obj = libbpf.BpfObject(compiled("fet"))
        self._attachments: list[libbpf.TcAttachment] = []
        self._events: libbpf.RingBuffer | None = None
        try:
            self.prog_fd = self._obj.program_fd(PROGRAM)
            self._configure(list(servers), list(ports))
            self._events = libbpf.RingBuffer(self._obj.map_fd("fet_events"))
        except BaseException:
            self.close()
            raise

    def _configure(self, servers: list[str], ports: list[int]) -> None:
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
        libbpf.map_update(self._obj.map_fd("fet_config"), _U32.pack(0),
                          _U32.pack(0 if ports else 1))

    def attach(self, ifname: str) -> None:
        """Run on every packet arriving at ``ifname`` (this namespace's), from now on."""
        self._attachments.append(libbpf.TcAttachment(ifname, self.prog_fd))

    def run_frame(self, frame: bytes) -> int:
        """Run the program once on an Ethernet frame, in the kernel, maps and all:
        its tc verdict (always :data:`TC_ACT_OK`)."""
        return libbpf.test_run(self.prog_fd, frame)[0]

    def time_frame(self, frame: bytes, repeat: int) -> float:
        """Mean nanoseconds per run over ``repeat`` runs on the same frame (the
        kernel's own timer, no system call inside)."""
        return float(libbpf.test_run(self.prog_fd, frame, repeat)[1])

    def reports(self) -> list[FetReport]:
        """Every flow reported since the last call, oldest first."""
        if self._events is None:
            return []
        return [FetReport.decode(raw) for raw in self._events.drain()]

    def events_fileno(self) -> int:
        """Readable when reports wait (an epoll descriptor)."""
        if self._events is None:
            raise ValueError("the classifier is closed")
        return self._events.fileno()

    def counters(self) -> dict[str, int]:
        """The program's counters, summed over CPUs."""
        fd = self._obj.map_fd("fet_counts")
        cpus = libbpf.possible_cpus()
        out = {}
        for slot, name in enumerate(COUNTERS):
            raw = libbpf.map_lookup(fd, _U32.pack(slot), 8 * cpus) or b""
            out[name] = sum(struct.unpack(f"={len(raw) // 8}Q", raw))
        return out

    def close(self) -> None:
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
