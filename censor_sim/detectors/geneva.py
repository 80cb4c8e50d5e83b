"""Geneva's twelve lab censors as pure, packet-driven state machines.

Source: Bock, Hughey, Qiang, Levin, "Geneva: Evolving Censorship Evasion Strategies"
(ACM CCS 2019), lab censors ``censors/censor1.py`` … ``censor11.py`` and ``censor8b.py``
of github.com/Kkevsterrr/geneva at commit 28a3fa63 (docs/censors/geneva.md §2). This is our own
restatement of what those files do, packet by packet, so a strategy that beats (or
loses to) a Geneva censor in Geneva's harness does the same here. Where the catalogue of
docs/censors/geneva.md §2.2 and the code differ, the code wins; each such place is noted
where it matters.

How Geneva runs them (``censors/censor.py``, ``evaluator.py``; docs/censors/geneva.md §1), and
what that means here:

* The censor is **in-path**. ``iptables -A FORWARD -j NFQUEUE -p tcp --sport/--dport
  <port>`` queues every IPv4 TCP packet to or from one server port, and nothing else.
  :class:`GenevaCensor` takes ``port`` for that (``None``: every TCP port). Other
  packets, IPv6 (never reaches ``iptables``) and non-first fragments (no ports to
  match) are accepted untouched.
* Each queued packet is parsed by scapy (2.4.3, pinned in Geneva's
  ``requirements.txt``). The fields a censor reads are the ones :mod:`censor_sim.packet`
  already decodes, with two scapy-specific views computed here: the flag *string*
  (:func:`scapy_flags`: a censor's ``== "S"`` means exactly SYN, no ECE/CWR/NS) and,
  for censor10/11, scapy's checksum recomputation (:func:`scapy_checksum_ok`).
* The payload is scapy's: ``TCPOptionsField.getfield`` in scapy 2.4.3 clamps a data
  offset below 5 to 5 ("bad dataofs … Assuming dataofs=5"), so the payload of a
  dataofs-0 packet is everything after the fixed 20-byte header. ``Packet.payload``
  already is exactly that (and ``test_geneva`` checks it against scapy), so it is used
  as is. It is the *header* that is taken as 20 bytes, not the payload
  (docs/censors/geneva.md §2.3).
* ``check_censor()`` decides whether to fire; ``censor()`` then acts. Its return value
  is the NFQUEUE verdict: only ``"drop"`` drops; the RST censors return ``None`` or
  ``"accept"``, so the triggering packet is **forwarded** after the RSTs are sent.
* Forged RSTs are scapy defaults (window 8192, data offset 5, TTL 64, IP id 1), sent
  five times each, which is what ``[TCP:dataofs:5]-drop`` and
  ``[TCP:window:8192]-drop`` key on (``tests/test_censors.py::test_one_library``).
* Geneva's harness MASQUERADEs on the censor (``evaluator.py``), so the server sees
  the client's connection as coming from the censor's address; that is why censor3,
  censor5, censor8b, censor10 and censor11 send the server-side RST from their own
  ``eth0`` address. ``censor_ip`` is that address. Without NAT (our lab) the
  equivalent source is the client's own address, used when ``censor_ip`` is None.

Not modelled: the harness's readiness probe (sport 2222, seq 13337, dropped by
``Censor.callback``) and Geneva's exception paths (a censor3 without an ``eth0``
address, or a RST whose ``ack`` overflows 32 bits, raises inside ``censor()``: nothing
is sent and the packet never gets a verdict). Sequence arithmetic is Python's, as in
Geneva: TCB values are **not** reduced modulo 2**32, so a SYN with ISN 0xffffffff
leaves censor1–5 expecting 2**32, which no packet carries.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Any, ClassVar

from ..actions import InjectTcp, Verdict
from ..packet import Packet, internet_checksum

SCAPY_FLAG_LETTERS = "FSRPAUECN"  # scapy's TCP FlagsField, bit 0 first
RST_COPIES = 5  # every Geneva RST censor sends each RST in a range(0, 5) loop
SCAPY_WINDOW = 8192  # scapy's TCP() default window
SCAPY_TTL = 64  # scapy's IP() default TTL
SCAPY_IP_ID = 1  # scapy's IP() default id

KEYWORD = "keyword"  # detection reasons
FLAGGED = "flagged-ip"


# -- scapy's view of a packet ------------------------------------------------------------

def scapy_flags(flags: int) -> str:
    """The TCP flags as ``packet["TCP"].sprintf('%TCP.flags%')`` prints them.

    Every Geneva censor compares this string, not bits: ``== "S"`` is a SYN with no
    other flag at all (an ECN-setup SYN, "SEC", is not one), and the teardown lists
    ("R", "RA", "F", …) do not include, e.g., "FPA" or "RPA".
    """
    return "".join(c for i, c in enumerate(SCAPY_FLAG_LETTERS) if flags >> i & 1)


def scapy_str_len(payload: bytes) -> int:
    """``len(str(scapy_packet[TCP].payload))`` under scapy 2.4.3 on Python 3.

    censor2/3/8b/10/11 compute the client-side RST's ``ack`` as ``seq + len(str(payload))``.
    scapy 2.4.3's ``Packet.__str__`` on Python 3 is ``str(self.build())``, the *repr*
    of the bytes (``b'facebook'`` is 11 characters), and ``NoPayload.__str__`` is ``""``.
    So the ack is off by the repr's quoting and escapes; receivers ignore it (the RST
    carries no ACK flag), but it is part of the RST's fingerprint.
    """
    return len(str(payload)) if payload else 0


def _options_round_trip(area: bytes) -> bool:
    """Whether scapy 2.4.3 rebuilds these TCP option bytes unchanged.

    ``TCPOptionsField`` parses options into (name, value) pairs and ``raw()`` serialises
    them again; well-formed options come back byte for byte. They do not when an option
    is truncated or announces a length below 2 (the length is rewritten), after an EOL
    (the rest is discarded, then padded), and for two value formats that do not
    survive unpack/pack (a 4-byte SAck makes ``i2m`` raise; Mood's ``"!p"``). Those go
    to scapy itself (:func:`_scapy_checksum_slow`).
    """
    i = 0
    while i < len(area):
        kind = area[i]
        if kind == 1:  # NOP
            i += 1
            continue
        if kind == 0 or i + 1 >= len(area):
            return False
        length = area[i + 1]
        if length < 2 or i + length > len(area):
            return False
        if (kind, length) in ((5, 6), (25, 3)):
            return False
        i += length
    return True


def scapy_checksum_ok(pkt: Packet) -> bool | None:
    """censor10/11's checksum test: the reported TCP checksum equals scapy's recomputation.

    Geneva deletes ``chksum`` and rebuilds the packet (``raw()``), so the comparison is
    exact: a checksum of 0xffff where the sum gives 0x0000 (valid for the kernel) is
    "incorrect". scapy's pseudo-header length is the IP total length minus the IP
    header (``in4_chksum``). When the options rebuild byte for byte this is plain
    arithmetic; otherwise the installed scapy does the rebuild (≈0.3 ms a packet, only
    for malformed or EOL-padded options; the installed version may differ from 2.4.3 on
    such exotica). None means scapy raised, which Geneva's ``check_censor`` treats as
    "do not censor".
    """
    raw, off = pkt.raw, pkt.l4_offset
    seg = raw[off:]
    opt_end = pkt.dataofs * 4
    if pkt.dataofs > 5 and (opt_end > len(seg) or not _options_round_trip(seg[20:opt_end])):
        return _scapy_checksum_slow(pkt)
    ihl = (raw[0] & 0x0F) * 4
    length = max(struct.unpack_from("!H", raw, 2)[0] - ihl, 0)
    pseudo = (ipaddress.IPv4Address(pkt.src).packed + ipaddress.IPv4Address(pkt.dst).packed
              + struct.pack("!HH", 6, length))
    return internet_checksum(pseudo + seg[:16] + b"\0\0" + seg[18:]) == pkt.checksum


def _scapy_checksum_slow(pkt: Packet) -> bool | None:
    """Geneva's own procedure, run through scapy, for options scapy does not round-trip."""
    try:
        from scapy.layers.inet import IP, TCP

        p = IP(pkt.raw)
        if TCP not in p:
            return None
        reported = p[TCP].chksum
        del p[TCP].chksum
        return bool(IP(bytes(p))[TCP].chksum == reported)
    except Exception:  # noqa: BLE001 - Geneva's check_censor: any exception = no censor
        return None


def describe(pkt: Packet) -> dict[str, Any]:
    """A JSON-safe summary of the packet a detection fired on."""
    return {"src": pkt.src, "dst": pkt.dst, "sport": pkt.sport, "dport": pkt.dport,
            "seq": pkt.seq, "ack": pkt.ack, "flags": scapy_flags(pkt.flags),
            "dataofs": pkt.dataofs, "len": len(pkt.payload), "ttl": pkt.ttl}


# -- the base class -----------------------------------------------------------------------

class GenevaCensor:
    """One Geneva lab censor: ``process()`` gives the NFQUEUE verdict for each packet.

    ``keyword`` is the forbidden word (``censor_driver.py --forbidden``, default
    ``ultrasurf``; Geneva's tests use ``facebook``). Geneva passes a one-element list;
    one keyword is kept here. ``censor_ip`` is the censor's own address, the source of
    the server-side RSTs of censor3/5/8b/10/11 (None: the client's address, see the
    module docstring). ``port``: only TCP packets with this source or destination
    port are queued (None: all TCP).

    Every firing of ``censor()`` is appended to ``detections`` (JSON-safe dicts:
    censor, reason ``"keyword"`` or ``"flagged-ip"``, the packet, the action, the RST
    targets); the list only grows, so a caller can emit ``detections[before:]``.
    """

    name: ClassVar[str] = ""

    def __init__(self, keyword: bytes | str = b"ultrasurf", censor_ip: str | None = None,
                 port: int | None = None) -> None:
        self.keyword = keyword.encode() if isinstance(keyword, str) else bytes(keyword)
        self.censor_ip = censor_ip
        self.port = port or None
        self.detections: list[dict[str, Any]] = []

    # -- the NFQUEUE callback --------------------------------------------------------------

    def watches(self, pkt: Packet) -> bool:
        """Whether Geneva's iptables rules would queue this packet at all."""
        if pkt.version != 4 or not pkt.is_tcp or len(pkt.raw) < pkt.l4_offset + 20:
            return False
        return self.port is None or self.port in (pkt.sport, pkt.dport)

    def process(self, pkt: Packet) -> Verdict:
        """``Censor.callback``: check, and if that fires, censor; else accept."""
        if not self.watches(pkt):
            return Verdict()
        reason = self.check(pkt, scapy_flags(pkt.flags))
        if reason is None:
            return Verdict()
        verdict = self.censor(pkt)
        record: dict[str, Any] = {"censor": self.name, "reason": reason,
                                  "packet": describe(pkt),
                                  "action": "drop" if verdict.drop else "rst"}
        if reason == KEYWORD:
            record["keyword"] = self.keyword.decode("utf-8", "backslashreplace")
        if verdict.inject:
            record["rst_to"] = [i.dst for i in verdict.inject]
            record["rsts"] = sum(i.count for i in verdict.inject)
        flagged = getattr(self, "flagged_ips", None)
        if flagged is not None:
            record["flagged"] = list(flagged)
        self.detections.append(record)
        return verdict

    def check(self, pkt: Packet, flags: str) -> str | None:
        """``check_censor``: update state; the reason to censor this packet, or None."""
        raise NotImplementedError

    def censor(self, pkt: Packet) -> Verdict:
        """``censor``: act on a packet ``check`` fired on."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """The censor's state, JSON-safe, for tests and logs."""
        return {}

    def flagged(self, pkt: Packet) -> bool:
        """Whether the packet comes from an address an earlier firing marked."""
        return False

    def hit(self, payload: bytes) -> str | None:
        """The keyword test every censor applies: a plain substring match, one packet."""
        return KEYWORD if self.keyword in payload else None

    # -- shared actions ----------------------------------------------------------------

    def rst_to_sender(self, pkt: Packet) -> InjectTcp:
        """The "client" RST of censor2/3/8b/10/11: spoofed from the packet's receiver.

        seq = the packet's ack (the sender's next expected byte: in its window); ack =
        seq + ``len(str(payload))`` (:func:`scapy_str_len`).
        """
        return InjectTcp(src=pkt.dst, dst=pkt.src, sport=pkt.dport, dport=pkt.sport,
                         seq=pkt.ack, ack=(pkt.seq + scapy_str_len(pkt.payload)) % 2**32,
                         flags="R", window=SCAPY_WINDOW, ttl=SCAPY_TTL, ip_id=SCAPY_IP_ID,
                         count=RST_COPIES)

    def rst_to_receiver(self, pkt: Packet) -> InjectTcp:
        """The "server" RST of censor3/5/8b/10/11: the packet's own seq/ack, from censor_ip.

        It is sent before the triggering packet is accepted, so seq = the packet's seq is
        exactly the receiver's next expected byte.
        """
        return InjectTcp(src=self.censor_ip or pkt.src, dst=pkt.dst, sport=pkt.sport,
                         dport=pkt.dport, seq=pkt.seq, ack=pkt.ack, flags="R",
                         window=SCAPY_WINDOW, ttl=SCAPY_TTL, ip_id=SCAPY_IP_ID,
                         count=RST_COPIES)


class _DropsSourceIp(GenevaCensor):
    """censor1/4/6/7/8/9's action: remember the source IP and drop it, for good.

    ``drop_all_from`` is one address, not a set: a later firing on a packet from another
    address replaces it (and un-flags the first). The check runs before anything else
    in ``check_censor``, so a flagged sender's packets no longer update the TCB.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.drop_all_from: str | None = None

    def flagged(self, pkt: Packet) -> bool:
        return self.drop_all_from == pkt.src

    def censor(self, pkt: Packet) -> Verdict:
        self.drop_all_from = pkt.src
        return Verdict(drop=True)


class _FlagsBothIps(GenevaCensor):
    """censor8b/10/11's action: flag both IPs, 5 RSTs each way, accept the packet.

    They never drop. Every later packet from a flagged IP (either side) fires again:
    five more RSTs each way, built from that packet, and the packet is accepted
    (``censor()`` returns ``"accept"``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.flagged_ips: list[str] = []

    def flagged(self, pkt: Packet) -> bool:
        return pkt.src in self.flagged_ips

    def censor(self, pkt: Packet) -> Verdict:
        for ip in (pkt.src, pkt.dst):
            if ip not in self.flagged_ips:
                self.flagged_ips.append(ip)
        return Verdict(inject=[self.rst_to_sender(pkt), self.rst_to_receiver(pkt)])


# -- censor1 to censor5: one sequence number ------------------------------------------------

class _SeqTracker(GenevaCensor):
    """censor1–5: one TCB, a bare sequence number (initially 0), for everyone.

    Any packet whose flags are exactly "S", in either direction and of any connection,
    resets it to seq + 1 (censor4: a pure "A" also resets it, to seq). Any other packet
    whose seq equals it advances it by its payload length and is the only kind searched
    for the keyword. So a later SYN with a bogus seq desynchronises the censor, and
    packets it cannot match are simply accepted.
    """

    sync_on_ack: ClassVar[bool] = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tcb = 0

    def check(self, pkt: Packet, flags: str) -> str | None:
        if self.flagged(pkt):  # censor1/4 only: censor2/3/5 keep no flagged IP
            return FLAGGED
        if flags == "S":
            self.tcb = pkt.seq + 1
            return None
        if self.sync_on_ack and flags == "A":
            self.tcb = pkt.seq
            return None
        if pkt.seq != self.tcb:
            return None
        self.tcb += len(pkt.payload)
        return self.hit(pkt.payload)

    def state(self) -> dict[str, Any]:
        return {"tcb": self.tcb, "drop_all_from": getattr(self, "drop_all_from", None)}


class Censor1(_SeqTracker, _DropsSourceIp):
    """``censors/censor1.py``: sync on every pure SYN; on the keyword, drop the sender for good."""

    name = "censor1"


class Censor2(_SeqTracker):
    """``censors/censor2.py``: censor1's tracking; 5 RSTs to the client only, packet accepted.

    It keeps no flagged IP (``drop_all_from`` is set in ``__init__`` and never read), so
    a client that drops the RSTs (``[TCP:dataofs:5]-drop``) goes on unharmed: the
    echoed keyword comes from the server with the server's seq, which never matches.
    """

    name = "censor2"

    def censor(self, pkt: Packet) -> Verdict:
        return Verdict(inject=[self.rst_to_sender(pkt)])


class Censor3(_SeqTracker):
    """``censors/censor3.py``: as censor2, plus 5 RSTs to the server from the censor's address."""

    name = "censor3"

    def censor(self, pkt: Packet) -> Verdict:
        return Verdict(inject=[self.rst_to_sender(pkt), self.rst_to_receiver(pkt)])


class Censor4(_SeqTracker, _DropsSourceIp):
    """``censors/censor4.py``: censor1, but a pure ACK also resynchronises (tcb = seq).

    Not an ACK in the handshake only: *any* packet whose flags are exactly "A" (the
    client's ACK of echoed data included) resets the TCB to that packet's seq, whichever
    side sent it, so a server ACK makes the censor expect the server's seq.
    """

    name = "censor4"
    sync_on_ack = True


class Censor5(_SeqTracker):
    """``censors/censor5.py``: censor1's tracking; 5 RSTs to the server only (from censor_ip).

    Its docstring says "server AND client"; the code sends the server-side RST only.
    """

    name = "censor5"

    def censor(self, pkt: Packet) -> Verdict:
        return Verdict(inject=[self.rst_to_receiver(pkt)])


# -- censor6 to censor9: teardown and resynchronisation ------------------------------------

class Censor6(_DropsSourceIp):
    """``censors/censor6.py``: no sequence tracking; any R, RA or F tears the TCB down.

    The TCB is live from the start and checks every queued packet. A packet whose flags
    are exactly "R", "RA" or "F", from anyone, to anywhere, clears it, and nothing ever
    sets it again: the censor is blind for the rest of its life. "FA" (the FIN Linux
    sends) is not in the list.
    """

    name = "censor6"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.live = True

    def check(self, pkt: Packet, flags: str) -> str | None:
        if self.flagged(pkt):
            return FLAGGED
        if flags in ("R", "RA", "F"):
            self.live = False
            return None
        return self.hit(pkt.payload) if self.live else None

    def state(self) -> dict[str, Any]:
        return {"live": self.live, "drop_all_from": self.drop_all_from}


class Censor7(_DropsSourceIp):
    """``censors/censor7.py``: IPs and ports learned from the first packet; R/RA/F on them
    tear down.

    The first queued packet that is not R/RA/F fixes the TCB's two IPs and two ports.
    An R, RA or F tears it down (for good) only if its src and dst are both among the
    IPs and its ports both among the ports; an unmatched one is searched like any other
    packet. Until teardown, **every** packet is searched, whichever flow it belongs to:
    the learned tuple gates only the teardown.
    """

    name = "censor7"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ips: list[str] = []
        self.ports: list[int] = []
        self.torn_down = False

    def matches(self, pkt: Packet) -> bool:
        return bool(self.ips) and pkt.src in self.ips and pkt.dst in self.ips \
            and pkt.sport in self.ports and pkt.dport in self.ports

    def check(self, pkt: Packet, flags: str) -> str | None:
        if self.flagged(pkt):
            return FLAGGED
        if flags in ("R", "RA", "F"):
            if not self.torn_down and self.matches(pkt):
                self.torn_down = True
                return None
        elif not self.torn_down and not self.ips:
            self.ips, self.ports = [pkt.src, pkt.dst], [pkt.sport, pkt.dport]
        return None if self.torn_down else self.hit(pkt.payload)

    def state(self) -> dict[str, Any]:
        return {"ips": self.ips, "ports": self.ports, "torn_down": self.torn_down,
                "drop_all_from": self.drop_all_from}


class Censor8(_DropsSourceIp):
    """``censors/censor8.py``: like censor7, but learned from the first SYN, with its seq.

    The first packet whose flags are exactly "S" fixes IPs, ports and seq + 1; later
    SYNs are ordinary packets. Exactly "R" or "F" (not "RA", not "FA") tears down, for
    good, only if IPs, ports **and** seq match. Any packet whose seq equals the TCB's
    advances it by its payload length. The keyword is searched in **every** packet
    while the TCB is not torn down (even before the first SYN, and whatever its seq):
    the seq gates only the teardown.
    """

    name = "censor8"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ips: list[str] = []
        self.ports: list[int] = []
        self.seq: int | None = None
        self.torn_down = False

    def check(self, pkt: Packet, flags: str) -> str | None:
        if self.flagged(pkt):
            return FLAGGED
        if flags == "S" and not self.torn_down and not self.ips:
            self.ips, self.ports = [pkt.src, pkt.dst], [pkt.sport, pkt.dport]
            self.seq = pkt.seq + 1
            return None
        if flags in ("R", "F") and not self.torn_down and self.ips \
                and pkt.src in self.ips and pkt.dst in self.ips \
                and pkt.sport in self.ports and pkt.dport in self.ports and pkt.seq == self.seq:
            self.torn_down = True
            return None
        if self.torn_down:
            return None
        if self.seq is not None and pkt.seq == self.seq:
            self.seq += len(pkt.payload)
        return self.hit(pkt.payload)

    def state(self) -> dict[str, Any]:
        return {"ips": self.ips, "ports": self.ports, "seq": self.seq,
                "torn_down": self.torn_down, "drop_all_from": self.drop_all_from}


class Censor9(_DropsSourceIp):
    """``censors/censor9.py``: one TCB; a matching R or F puts it in resynchronisation.

    The TCB (src, dst, sport, dport, seq; directional) is set by the first "S" (seq + 1)
    and only ever again by the packet right after a resync: *whatever* that packet is,
    from either side, it becomes the TCB (seq + payload length, or + 1 for a SYN), and
    its payload is searched. Exactly "R" or "F" matching the TCB (tuple and seq) enters
    resync, and is itself searched. Only packets matching the TCB are searched and
    advance it. Before the first SYN an empty TCB "matches" everything, so every packet
    is searched. Linux closes with "FA", which does not resync, so a second connection
    is never tracked.
    """

    name = "censor9"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tcb: tuple[str, str, int, int] | None = None
        self.seq = 0
        self.resynchronize = False

    def matches(self, pkt: Packet) -> bool:
        return self.tcb is None or (
            (pkt.src, pkt.dst, pkt.sport, pkt.dport) == self.tcb and pkt.seq == self.seq)

    def check(self, pkt: Packet, flags: str) -> str | None:
        if self.flagged(pkt):
            return FLAGGED
        if self.resynchronize or (self.tcb is None and flags == "S"):
            self.tcb = (pkt.src, pkt.dst, pkt.sport, pkt.dport)
            self.seq = pkt.seq + (1 if flags == "S" else len(pkt.payload))
            self.resynchronize = False
            return self.hit(pkt.payload)
        if flags in ("R", "F") and self.matches(pkt):
            self.resynchronize = True
        if not self.matches(pkt):
            return None
        if self.tcb is not None:
            self.seq += len(pkt.payload)
        return self.hit(pkt.payload)

    def state(self) -> dict[str, Any]:
        return {"tcb": list(self.tcb) if self.tcb else None, "seq": self.seq,
                "resynchronize": self.resynchronize, "drop_all_from": self.drop_all_from}


# -- censor8b, censor10, censor11: many TCBs -----------------------------------------------

@dataclass(eq=False)
class Tcb:
    """One tracked direction of one connection (the SYN sender's): tuple and next seq."""

    src: str
    dst: str
    sport: int
    dport: int
    seq: int

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.src, self.dst, self.sport, self.dport)

    def to_json(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "sport": self.sport, "dport": self.dport,
                "seq": self.seq}


def _key(pkt: Packet) -> tuple[str, str, int, int]:
    return (pkt.src, pkt.dst, pkt.sport, pkt.dport)


class _TcbList(_FlagsBothIps):
    """A list of directional TCBs looked up as Geneva does: exact (tuple and seq), partial."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tcbs: list[Tcb] = []

    def exact(self, pkt: Packet) -> Tcb | None:
        """``get_matching_tcb``: same 4-tuple, same direction, seq equal to the TCB's."""
        key = _key(pkt)
        return next((t for t in self.tcbs if t.key == key and t.seq == pkt.seq), None)

    def partial(self, pkt: Packet) -> Tcb | None:
        """``get_partial_tcb``: same 4-tuple and direction, any seq."""
        key = _key(pkt)
        return next((t for t in self.tcbs if t.key == key), None)

    def state(self) -> dict[str, Any]:
        return {"tcbs": [t.to_json() for t in self.tcbs], "flagged_ips": self.flagged_ips}


class Censor8b(_TcbList):
    """``censors/censor8b.py``: a TCB per SYN; R/RA with the right seq removes it; no checksums.

    Order of checks: a flagged source fires; a data offset below 5 is ignored; then a
    pure "S" with no exact match synchronises (new TCB at seq + 1, or, if the 4-tuple
    is known, the *existing* TCB's seq + 1: so a retransmitted SYN moves the TCB one
    past the ISN + 1 the data will carry, and the TCB is appended to the list again);
    an exactly matching "R" or "RA" removes one list entry (no resync: that connection
    is then invisible); other exactly matching packets advance the TCB and are searched.
    Packets matching no TCB (the server's direction included) are accepted unread.
    Checksums are never checked, so a bad-checksum RST with the right seq, which the
    server discards, still removes the TCB.
    """

    name = "censor8b"

    def check(self, pkt: Packet, flags: str) -> str | None:
        if self.flagged(pkt):
            return FLAGGED
        if pkt.dataofs < 5:
            return None
        tcb = self.exact(pkt)
        if tcb is None and flags == "S":
            tcb = self.partial(pkt)
            if tcb is None:
                tcb = Tcb(pkt.src, pkt.dst, pkt.sport, pkt.dport, pkt.seq)
            tcb.seq += 1
            self.tcbs.append(tcb)  # a known TCB is appended again, as list.append does
            return None
        if tcb is not None and flags in ("R", "RA"):
            del self.tcbs[next(i for i, t in enumerate(self.tcbs) if t is tcb)]
            return None
        if tcb is None:
            return None
        tcb.seq += len(pkt.payload)
        return self.hit(pkt.payload)


class Censor10(_TcbList):
    """``censors/censor10.py``: a TCB per SYN, resync on matching R/F, checksums verified.

    A flagged source fires; then a packet whose TCP checksum differs from scapy's
    recomputation (:func:`scapy_checksum_ok`) is ignored, so bad-checksum insertion and
    teardown packets do nothing. A pure "S" with no exact match (re)synchronises that
    4-tuple's TCB at seq + 1. An exactly matching "R" or "F" sets the TCB's resync flag
    (and is itself searched). The resync takes effect only on the next packet that
    *exactly matches* (tuple and seq): that packet re-bases the TCB at seq + payload
    length **without being searched**. So a valid RST at the right seq (say, TTL-limited
    so the server never sees it) lets the next in-sequence segment through unread.
    Unlike censor8b it does not look at the data offset.
    """

    name = "censor10"
    sync_flags: ClassVar[tuple[str, ...]] = ("S",)
    resync_flags: ClassVar[tuple[str, ...]] = ("R", "F")
    min_dataofs: ClassVar[int] = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resynchronize: dict[tuple[str, str, int, int], bool] = {}

    def check(self, pkt: Packet, flags: str) -> str | None:
        if self.flagged(pkt):
            return FLAGGED
        if pkt.dataofs < self.min_dataofs:
            return None
        if not scapy_checksum_ok(pkt):
            return None
        tcb = self.exact(pkt)
        if (tcb is not None and self.resynchronize.get(tcb.key)) or (
                tcb is None and flags in self.sync_flags):
            # censor11 always takes get_partial_tcb() here; it returns the same TCB.
            tcb = tcb or self.partial(pkt) or Tcb(pkt.src, pkt.dst, pkt.sport, pkt.dport, 0)
            tcb.seq = pkt.seq + (1 if flags == "S" else len(pkt.payload))
            if tcb not in self.tcbs:  # Geneva appends duplicates; lookups are unchanged
                self.tcbs.append(tcb)
            self.resynchronize[tcb.key] = False
            return None
        if tcb is not None and flags in self.resync_flags:
            self.resynchronize[tcb.key] = True
        if tcb is None:
            return None
        tcb.seq += len(pkt.payload)
        return self.hit(pkt.payload)

    def state(self) -> dict[str, Any]:
        return {**super().state(),
                "resynchronize": [list(k) for k, v in self.resynchronize.items() if v]}


class Censor11(Censor10):
    """``censors/censor11.py``: censor10, plus sync on pure ACKs, resync on RA/FA, dataofs check.

    A pure "A" with no exact match (re)synchronises the 4-tuple's TCB at its seq, as a
    SYN does at seq + 1: an ACK with a wrong seq moves the TCB, and the next pure ACK
    with the right one moves it back. "R", "F", "RA" and "FA" all set the resync flag,
    so a normal FIN does too. A data offset below 5 is ignored (checked before the
    checksum).
    """

    name = "censor11"
    sync_flags = ("S", "A")
    resync_flags = ("R", "F", "RA", "FA")
    min_dataofs = 5


CENSORS: dict[str, type[GenevaCensor]] = {
    c.name: c for c in (Censor1, Censor2, Censor3, Censor4, Censor5, Censor6, Censor7,
                        Censor8, Censor8b, Censor9, Censor10, Censor11)
}


def make(name: str, **params: Any) -> GenevaCensor:
    """A fresh censor by Geneva's name ("censor1" … "censor11", "censor8b")."""
    try:
        cls = CENSORS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown Geneva censor {name!r}; one of {sorted(CENSORS)}") from None
    return cls(**params)
