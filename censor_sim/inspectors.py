"""Flow-level inspectors: the bridge from pure detectors to the engine.

A detector module (``censor_sim.detectors.*``) answers questions about bytes.
An inspector decides *when* to ask: which packets of which flows, how many
segments to reassemble, and when to give up. Each returns, per packet:

* ``None`` – undecided, show me more packets of this flow;
* ``DONE`` – this flow does not match and never will;
* a :class:`Match` – it matched, with the evidence for the event log.

Every inspector takes ``servers`` (CIDRs the censor targets; empty = all),
``ports`` (server ports; empty = all) and ``protocols``, because real
censors scope their rules: the GFW's FET blocking hit only some data
centres, Iran's filter only ports 53/80/443.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from datetime import date
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal

from .addrset import AddressSet
from .detectors import NeedMore, fet, http, iran, tls, wireguard
from .flows import Flow
from .packet import TCP, UDP, Packet


class _OnFirstUse:
    """A detector module imported when an inspector first reads it: most profiles use
    one or two of them, and importing them all is a tenth of pcap mode's start-up
    (docs/lab/censor.md §5.1)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


if TYPE_CHECKING:
    from .detectors import dns, dnstunnel, dtls, openvpn, tlsintls
else:
    dns = _OnFirstUse("censor_sim.detectors.dns")
    dnstunnel = _OnFirstUse("censor_sim.detectors.dnstunnel")
    dtls = _OnFirstUse("censor_sim.detectors.dtls")
    openvpn = _OnFirstUse("censor_sim.detectors.openvpn")
    tlsintls = _OnFirstUse("censor_sim.detectors.tlsintls")

# What an inspector answers when it will never match the flow: the only string it
# answers, so a type checker can tell it from a Match by comparing with DONE.
Done = Literal["done"]
DONE: Final[Done] = "done"


@dataclass
class Match:
    detector: str
    evidence: dict[str, Any] = field(default_factory=dict)
    # Extra data an action needs (e.g. the DNS query to answer).
    data: Any = None
    # The packet that matched came from the server side: a residual block is on
    # its sender's triple (server, client, client port), not the client's.
    reverse: bool = False


class Inspector:
    """Base: scoping by server range, port and transport protocol."""

    kind = ""
    protocols: tuple[int, ...] = (TCP,)
    # Whether it reads flow.stats (every packet's size, direction and time): the
    # flow table records them only when some inspector does.
    uses_flow_stats = False
    # Whether packets without payload (TCP handshakes and acknowledgements) are shown
    # to inspect(). Most inspectors judge payloads only; for them the engine answers
    # an empty packet itself ("not yet", or "done" past max_packets), which is what
    # their inspect() would return, without the call.
    sees_empty = False
    # Whether inspect() reads packets the server side sent. When no inspector
    # does, the datapath shows the censor the client side's packets only.
    reads_server = True
    # Whether inspect() answers every packet but a client payload by the flow's
    # packet count alone ("not yet" under max_packets, "done" at it), as the
    # engine answers an empty packet: the engine then counts such packets
    # without asking (Engine.skim), which is most of a capture's packets.
    client_payload_only = False

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        self.name = name
        self.params = params
        servers = params.get("servers", [])
        # "role:NAME" entries are resolved to lab addresses by the runner; one
        # still here means nobody did, and the censor process refuses to run.
        self.unresolved = [s for s in servers if isinstance(s, str) and s.startswith("role:")]
        try:
            self.servers = AddressSet(s for s in servers if s not in self.unresolved)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"detectors.{name}.servers: {exc}") from None
        self.ports = set(params.get("ports", []))
        self.max_packets = int(params.get("max_packets", 8))

    def in_scope(self, flow: Flow) -> bool:
        if flow.proto not in self.protocols:
            return False
        if self.ports and flow.server_port not in self.ports:
            return False
        if self.servers:
            # Answered once per server address: parsing one costs more than the
            # rest of a packet's inspection (benchmarks/censor.py).
            return flow.server in self.servers
        return True

    def inspect(self, flow: Flow, pkt: Packet, c2s: bool) -> Match | Done | None:
        raise NotImplementedError


class FirstPayloadInspector(Inspector):
    """Judges a flow by its first client→server payload alone (no reassembly)."""

    reads_server = False
    client_payload_only = True

    def judge(self, first: bytes) -> Match | Done:
        raise NotImplementedError

    def inspect(self, flow, pkt, c2s):
        if not c2s or not pkt.payload:
            return None if flow.packets < self.max_packets else DONE
        return self.judge(flow.c2s_payloads[0])


class FetInspector(FirstPayloadInspector):
    """GFW fully-encrypted-traffic rules (Wu et al. 2023) on the first c→s payload only."""

    kind = "fet"

    def judge(self, first):
        evidence = fet.not_exempt_evidence(first)
        if evidence is None:  # a rule exempts it
            return DONE
        return Match(self.name, evidence)


class StreamInspector(Inspector):
    """Parses the client→server stream (reassembled across the first segments).

    ``tcp_reassembly = false`` models a censor that reads each segment on its
    own (the Henan firewall: Wu et al., IEEE S&P 2025, §4.3 and Table III);
    ``optionless_only`` one that reads only segments whose TCP header is the
    bare 20 bytes (Henan again, §4.3 "TCP header length has to be 20 bytes");
    segments with options pass unread. ``optionless_only`` alone implies the
    first, as it always has.
    """

    reads_server = False
    client_payload_only = True

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, params)
        self.optionless_only = bool(params.get("optionless_only", False))
        self.tcp_reassembly = bool(params.get("tcp_reassembly", not self.optionless_only))

    def parse(self, data: bytes, flow: Flow, complete: bool) -> Match | Done | None:
        """Judge ``data``: the client's stream so far (``complete`` False: raise
        NeedMore to wait for more), or one segment read alone (``complete``)."""
        raise NotImplementedError

    def inspect(self, flow, pkt, c2s):
        if not c2s or not pkt.payload:
            return None if flow.packets < self.max_packets else DONE
        if not self.tcp_reassembly:
            if self.optionless_only and pkt.dataofs != 5:
                return None if flow.packets < self.max_packets else DONE
            try:
                hit = self.parse(bytes(pkt.payload), flow, True)
            except NeedMore:
                hit = None
            if isinstance(hit, Match):
                return hit
            # No reassembly: a segment that does not match is forgotten, and the
            # next one is read on its own.
            return None if flow.packets < self.max_packets else DONE
        try:
            return self.parse(bytes(flow.c2s), flow, False) or DONE
        except NeedMore:
            return None if len(flow.c2s_payloads) < self.max_packets else DONE


class HttpKeywordInspector(StreamInspector):
    """Keywords in the HTTP request path or Host header (GFW; Rambert et al. 2021).

    ``where`` names the places searched (path, host); ``host_match`` set to an
    SNI match mode (``suffix``) matches the Host against the names as a domain
    blocklist does, rather than as substrings (the Henan firewall's Host rule
    uses its SNI blocklist: Wu et al., IEEE S&P 2025, §5.1, Table IX).
    ``act_at = "host-line"`` decides once the Host header's line has ended,
    without waiting for the blank line that ends the head (the paper's trigger
    request, §4.1, ``GET / HTTP/1.1\\r\\nHost: example.com\\r\\n``);
    ``host_line_end`` is what ends that line: ``crlf``, or ``cr-or-lf``.
    """

    kind = "http_keyword"

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, params)
        self.where = tuple(params.get("where", http.WHERE))
        for place in self.where:
            if place not in http.WHERE:
                raise ValueError(f"detectors.{name}.where: {place!r} is not one of "
                                 f"{', '.join(http.WHERE)}")
        self.host_match = params.get("host_match")
        self.act_at = params.get("act_at", "head")
        if self.act_at not in ("head", "host-line"):
            raise ValueError(f"detectors.{name}.act_at: {self.act_at!r} is not one of "
                             "head, host-line")
        self.host_line_end = params.get("host_line_end", "crlf")
        if self.host_line_end not in http.HOST_LINE_ENDS:
            raise ValueError(f"detectors.{name}.host_line_end: {self.host_line_end!r} is not "
                             f"one of {', '.join(http.HOST_LINE_ENDS)}")

    def parse(self, data, flow, complete):
        if self.act_at == "host-line":
            req = http.parse_through_host(data, self.host_line_end)
        else:
            req = http.parse_request(data)
        if req is None:
            return DONE
        keywords = self.params.get("keywords", [])
        if self.host_match:
            others = [w for w in self.where if w != "host"]
            hit = http.keyword_match(req, keywords, others) if others else None
            if hit is None:
                name = tls.sni_matches(req.host, keywords, self.host_match)
                hit = (name, "host") if name is not None and "host" in self.where else None
        else:
            hit = http.keyword_match(req, keywords, self.where)
        if hit is None:
            return DONE
        keyword, place = hit
        return Match(self.name, {"keyword": keyword, "where": place, "host": req.host})


class TlsInspector(StreamInspector):
    """TLS ClientHello: SNI patterns and/or JA3/JA4 fingerprint blocklists.

    ``tls_records`` says how a hello that spans TLS records is read
    (:data:`censor_sim.detectors.tls.TLS_RECORDS`); every reading but
    ``reassemble`` is a censor without TLS reassembly.
    """

    kind = "tls"

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, params)
        self.tls_records = params.get("tls_records", "reassemble")
        if self.tls_records not in tls.TLS_RECORDS:
            raise ValueError(f"detectors.{name}.tls_records: {self.tls_records!r} is not one "
                             f"of {', '.join(tls.TLS_RECORDS)}")
        self.sticky_share = float(params.get("sticky_share", 1.0))
        self.pair_share = float(params.get("pair_share", 1.0))
        self.sticky_seed = int(params.get("sticky_seed", 0))
        self.sticky_unit = params.get("sticky_unit", "pair")
        if self.sticky_unit not in ("pair", "source"):
            raise ValueError(f"detectors.{name}.sticky_unit: {self.sticky_unit!r} is not one "
                             "of pair, source")

    def parse(self, data, flow, complete):
        from ptcommon import tlshello

        if self.tls_records != "reassemble":
            hello = tls.first_record_hello(data, complete, self.tls_records == "first-prefix")
        elif complete:  # one segment: its records joined, a cut-off hello read as far as it goes
            try:
                hello = tlshello.parse_client_hello(data)
            except NeedMore:
                hello = tls.first_record_hello(data, True, True)
        else:
            hello = tlshello.parse_client_hello(data)
        if hello is None:
            return DONE
        if self.params.get("offers_tls13") and 0x0304 not in hello.supported_versions:
            return DONE  # a rule on TLS 1.3 connections only (the TSPU's 16 KB freeze)
        ev: dict[str, Any] = {"sni": hello.sni, "alpn": hello.alpn}
        patterns = self.params.get("sni", [])
        if patterns:
            hit = tls.sni_matches(hello.sni, patterns, self.params.get("sni_mode", "suffix"))
            required = self.params.get("require_extensions", [])
            if (hit is not None and tls.has_extensions(hello, required)
                    and self._filtered(flow.client, hello.sni or "")):
                return Match(self.name, {**ev, "matched": hit, "by": "sni"})
        ja3s, ja4s = self.params.get("ja3", []), self.params.get("ja4", [])
        if ja3s or ja4s:
            j3, j4 = tlshello.ja3(hello), tlshello.ja4(hello, "t")
            if j3 in ja3s or j4 in ja4s:
                return Match(self.name, {**ev, "ja3": j3, "ja4": j4, "by": "fingerprint"})
        if self.params.get("any_tls", False):
            return Match(self.name, {**ev, "by": "any_tls"})
        return DONE

    def _filtered(self, client: str, sni: str) -> bool:
        """Whether the SNI filter applies to this client and name: to all, unless
        ``sticky_share`` makes it apply to a fixed share of ``sticky_unit``s.

        ``sticky_unit = "source"``: a share of client addresses is filtered, the
        rest never is, and on a filtered address ``pair_share`` of its (address,
        name) pairs are (Iran 2026: net4people/bbs#630, Observation 7, "approximately
        half experienced no SNI filtering at all"). ``"pair"``: each (address, name)
        pair is drawn on its own. Every draw is a keyed hash, so the same clients
        and names get the same answer every time (Observation 5's consistency).
        """
        share = self.sticky_share
        if share >= 1 and self.pair_share >= 1:
            return True
        seed = self.sticky_seed
        if self.sticky_unit == "pair":
            return tls.sticky_draw(client, sni, seed) < share
        if share < 1 and tls.sticky_draw(client, "", seed) >= share:
            return False  # a source the filter never applies to
        return self.pair_share >= 1 or tls.sticky_draw(client, sni, seed + 1) < self.pair_share


class QuicSniInspector(Inspector):
    """The GFW's QUIC-SNI blocker (Zohaib et al., USENIX Security 2025; docs/censors/quic.md).

    It judges a UDP flow's first datagram only, when its source port is above
    its destination port. ``as_of`` dates the model: nothing before blocking
    began (2024-04-07); datagrams from outside the censored network trigger it
    too until 2025-03-13, after which only outbound traffic does. The 60 s
    "seen before" window is the flow table's (``datapath.flow_idle_s``).
    """

    kind = "quic_sni"
    sees_empty = True
    protocols = (UDP,)
    BEGAN = date(2024, 4, 7)
    OUTBOUND_ONLY_FROM = date(2025, 3, 13)

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, params)
        self.as_of = _as_of(name, params, "2025-06-01")
        self.active = self.as_of >= self.BEGAN
        self.inbound = self.as_of < self.OUTBOUND_ONLY_FROM

    def inspect(self, flow, pkt, c2s):
        from .detectors import quic

        if flow.packets > 1 or not self.active or not (c2s or self.inbound):
            return DONE  # only a flow's first datagram, and only in the directions it watched
        hit = quic.gfw2024_should_block(pkt.payload, pkt.sport, pkt.dport,
                                        self.params.get("sni", []),
                                        self.params.get("sni_mode", "suffix"))
        if hit is None:
            return DONE
        # From outside, the blocked triple is the outside sender's (reverse).
        return Match(self.name, {"matched": hit, "sport": pkt.sport, "dport": pkt.dport,
                                 "direction": "outbound" if c2s else "inbound"},
                     reverse=not c2s)


class QuicInitialInspector(Inspector):
    """A QUIC Initial as Russia's TSPU judges one (docs/censors/russia.md §3, §5.3).

    The first client datagram of a UDP flow, read RFC-faithfully. With no
    ``sni`` list it matches on shape alone, as the 2022 rule did: a long
    header with version 1 in a datagram of at least ``min_payload`` bytes,
    from a source port not in ``exclude_sports``. With ``sni`` it decrypts the
    Initial and matches its ClientHello's SNI, and, with ``require_extensions``,
    only a hello carrying every one of those extension types (the 2024 ECH
    rule: ``cloudflare-ech.com`` together with encrypted_client_hello).
    """

    kind = "quic_initial"
    sees_empty = True
    protocols = (UDP,)

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, params)
        self.min_payload = int(params.get("min_payload", 0))
        self.exclude_sports = set(params.get("exclude_sports", []))
        # Whether the first byte must have the long-header bit; ValdikSS's 2022 rule
        # reads the version bytes only ("int32be(1) == 0x00000001").
        self.long_header = bool(params.get("require_long_header", True))
        self.required = [int(e) for e in params.get("require_extensions", [])]
        # A packet filter (the 2022 rule) judges every client datagram, not the first.
        self.every_datagram = bool(params.get("every_datagram", False))

    def inspect(self, flow, pkt, c2s):
        from .detectors import quic

        more: Done | None = DONE
        if self.every_datagram:
            more = None if flow.packets < self.max_packets else DONE
        elif flow.packets > 1:
            return DONE
        if not c2s:
            return more
        d = pkt.payload
        if (len(d) < self.min_payload or pkt.sport in self.exclude_sports or len(d) < 5
                or (self.long_header and not d[0] & 0x80)
                or int.from_bytes(d[1:5], "big") != quic.V1):
            return more
        ev: dict[str, Any] = {"size": len(d), "sport": pkt.sport, "dport": pkt.dport}
        patterns = self.params.get("sni", [])
        if not patterns:
            return Match(self.name, {**ev, "by": "shape"})
        ini = quic.parse_initial(d)
        hello = ini.client_hello if ini else None
        if hello is None:
            return more
        hit = tls.sni_matches(hello.sni, patterns, self.params.get("sni_mode", "suffix"))
        if hit is None or not tls.has_extensions(hello, self.required):
            return more
        return Match(self.name, {**ev, "by": "sni", "sni": hello.sni, "matched": hit,
                                 "extensions": [f"{e:#06x}" for e in self.required]})


class DtlsInspector(Inspector):
    """Russia's rules against Snowflake's pion DTLS hellos (both directions).

    ``rules`` names byte rules of ``detectors.dtls`` and/or ``"ja4"``, which
    matches a ClientHello whose JA4 is in ``ja4``. With ``stall_after_handshake``
    a hit is held back until ``app_records`` application-data records have
    reached the client, so the handshake completes and a little data arrives
    before the action (the TSPU's stalls of 2024 and 2026: docs/censors/russia.md §5.5).
    """

    kind = "dtls"
    sees_empty = True
    protocols = (UDP,)

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, params)
        self.rules = params.get("rules", ["ru_2021_serverhello", "ru_2022_clienthello"])
        for rule in self.rules:
            if rule != "ja4" and not callable(getattr(dtls, rule, None)):
                raise ValueError(f"detectors.{name}.rules: unknown rule {rule!r}")
        self.ja4s = set(params.get("ja4", []))
        self.stall = bool(params.get("stall_after_handshake", False))
        self.app_records = int(params.get("app_records", 1))
        # Packets a held hit may wait for its data (handshake flights, retransmissions).
        self.watch_packets = int(params.get("watch_packets", 40))

    def _hit(self, payload: bytes) -> dict[str, Any] | None:
        for rule in self.rules:
            if rule == "ja4":
                j = dtls.ja4(payload) if self.ja4s else None
                if j is not None and j in self.ja4s:
                    return {"rule": "ja4", "ja4": j}
            elif getattr(dtls, rule)(payload):
                return {"rule": rule}
        return None

    def inspect(self, flow, pkt, c2s):
        if not pkt.payload or _is_stun(pkt.payload):
            # WebRTC runs ICE checks (STUN) on the same 5-tuple before DTLS:
            # they neither match nor use up the inspection budget.
            return None
        held = flow.state.get("dtls_hit")
        if held is not None:
            if not c2s:  # data that reached the client: "a few bytes arrive, then nothing"
                if held["app_records"] >= self.app_records:
                    return Match(self.name, held)  # this packet is the first one held back
                held["app_records"] += dtls.application_records(pkt.payload)
            held["waited"] += 1
            return None if held["waited"] < self.watch_packets else DONE
        hit = self._hit(pkt.payload)
        if hit is not None:
            ev = {**hit, "direction": "c2s" if c2s else "s2c",
                  "first_bytes": pkt.payload[:16].hex()}
            if not self.stall:
                return Match(self.name, ev)
            flow.state["dtls_hit"] = {**ev, "app_records": 0, "waited": 0}
            return None
        seen = flow.state["dtls_packets"] = flow.state.get("dtls_packets", 0) + 1
        return None if seen < self.max_packets else DONE


class OpenVpnInspector(Inspector):
    """Xue et al. 2022's Filter: the opcode or the ACK fingerprint (docs/censors/vpn.md §2).

    Each OpenVPN packet (a UDP datagram; a framed record over TCP) in either
    direction adds its opcode byte and size; the flow is judged at ``n`` packets
    (100 in the paper's deployment), or earlier when the opcode fingerprint can no
    longer hold and the ACK fingerprint is off or can no longer hold either
    (``openvpn.ack_fingerprint_failed``). ``ack = false`` turns the ACK
    fingerprint off; ``literal = true`` reads Algorithm 1 as printed.
    """

    kind = "openvpn"
    protocols = (UDP, TCP)

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, {"max_packets": 4 * int(params.get("n", openvpn.WINDOW)),
                                **params})
        self.n = int(params.get("n", openvpn.WINDOW))
        self.literal = bool(params.get("literal", False))
        self.ack = bool(params.get("ack", True))
        self.ack_index = int(params.get("ack_index", openvpn.ACK_INDEX))
        self.max_len = int(params.get("max_len", openvpn.MAX_LEN))
        if self.n < 3:
            raise ValueError(f"detectors.{name}.n: the window must be at least 3 packets")
        # The engine refuses a datapath budget that could never show it n packets.
        self.packets_needed = self.n

    def inspect(self, flow, pkt, c2s):
        data = pkt.payload
        if not data:
            return None if flow.packets < self.max_packets else DONE
        st = flow.state.get("openvpn")
        if st is None:
            if flow.proto == TCP and (len(data) < 2 or not
                                      1 <= ((data[0] << 8) | data[1]) <= self.max_len):
                return DONE  # TLS, HTTP, SSH...: no OpenVPN framing (docs/censors/vpn.md §2.3)
            st = flow.state["openvpn"] = _OpenVpnFlow(
                openvpn.OpcodeFilter(self.n, self.literal),
                (openvpn.TcpFramer(self.max_len), openvpn.TcpFramer(self.max_len))
                if flow.proto == TCP else None)
        if st.framers is None:  # a UDP datagram is one packet: no list to build
            res = self._add(st, data[0], len(data))
            if res is not None:
                return res
        else:
            framer = st.framers[0 if c2s else 1]
            records = framer.feed(pkt.seq, data)
            if framer.broken:
                return DONE
            for byte, size in records:
                res = self._add(st, byte, size)
                if res is not None:
                    return res
        return None if flow.packets < self.max_packets else DONE

    def _add(self, st: _OpenVpnFlow, byte: int, size: int) -> Match | Done | None:
        """One OpenVPN packet's opcode byte and size: a match, DONE, or None (go on)."""
        op = st.filter.add(byte)
        sizes = st.sizes
        if len(sizes) < self.n:
            sizes.append(size)
        if op:
            return self._match(st, "opcode")
        if len(sizes) >= self.n:
            if self.ack and openvpn.ack_fingerprint(sizes, self.n, self.ack_index):
                return self._match(st, "ack")
            return DONE
        # The opcode fingerprint has failed: go on only while the ACK one can hold.
        # It is tested as each 10-packet bin fills (a bin over its bound then is
        # caught a few packets late, never missed).
        if op is False and (not self.ack or (
                len(sizes) % openvpn.BIN == 0
                and openvpn.ack_fingerprint_failed(sizes, self.n, self.ack_index))):
            return DONE
        return None

    def _match(self, st: _OpenVpnFlow, by: str) -> Match:
        f = st.filter
        return Match(self.name, {
            "by": by, "packets": len(f.seen),
            "opcode_bytes": sorted(f"{b:02x}" for b in f.distinct),
            "first_opcodes": [openvpn.opcode(b) for b in f.seen[:2]],
            "ack_bins": openvpn.ack_bins(st.sizes, self.n, self.ack_index)[:6]})


class _OpenVpnFlow:
    """One flow's OpenVPN state: a class with slots, not a dict, because the inspector
    makes one for every UDP flow it sees, which every UDP packet's cost then carries
    (benchmarks/censor.py measures the VPN detectors' cost per packet)."""

    __slots__ = ("filter", "sizes", "framers")

    def __init__(self, filter_: openvpn.OpcodeFilter,
                 framers: tuple[openvpn.TcpFramer, openvpn.TcpFramer] | None) -> None:
        self.filter = filter_
        self.sizes: list[int] = []
        self.framers = framers


class WireGuardInspector(Inspector):
    """WireGuard's handshake by its fixed headers and sizes (docs/censors/vpn.md §3).

    ``confirm = "response"`` (the default) matches when the server answers the
    client's handshake initiation with the response that echoes its sender index;
    ``confirm = "none"`` matches on the initiation alone, as a one-packet rule would.
    Anything else as the client's first payload ends the inspection at once, so
    other UDP flows cost one comparison.
    """

    kind = "wireguard"
    sees_empty = True
    protocols = (UDP,)

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, params)
        self.confirm = params.get("confirm", "response")
        if self.confirm not in ("response", "none"):
            raise ValueError(f"detectors.{name}.confirm: {self.confirm!r} is not one of "
                             "response, none")

    def inspect(self, flow, pkt, c2s):
        if not pkt.payload:
            return None
        first = flow.c2s_payloads[0] if flow.c2s_payloads else None
        if first is None or not wireguard.is_initiation(first):
            return DONE
        if self.confirm == "none":
            return Match(self.name, {"message": "initiation", "length": len(first)})
        if not c2s and wireguard.response_answers(first, pkt.payload):
            return Match(self.name, {"message": "response", "length": len(pkt.payload),
                                     "sender": first[4:8].hex()})
        return None if flow.packets < self.max_packets else DONE


class DnsInspector(Inspector):
    """DNS query names against a blocklist; the action injects a forged answer."""

    kind = "dns"
    protocols = (UDP, TCP)
    client_payload_only = True

    def inspect(self, flow, pkt, c2s):
        if not c2s or not pkt.payload:
            return None if flow.packets < self.max_packets else DONE
        try:
            q = (dns.parse_query(pkt.payload) if flow.proto == UDP
                 else dns.parse_tcp_query(bytes(flow.c2s)))
        except NeedMore:
            return None
        if q is None:
            return DONE
        hit = dns.qname_matches(q.qname, self.params.get("names", []),
                                self.params.get("mode", "suffix"))
        if hit is None:
            return DONE if flow.proto == TCP else None
        data = pkt.payload if flow.proto == UDP else None
        return Match(self.name, {"qname": q.qname, "matched": hit}, data=data)


class DnsTunnelInspector(Inspector):
    """A model DNS-tunnel detector (docs/censors/dnstunnel.md §2): suspicious queries
    (long names, or encoded labels) counted per client and domain over ``window_s``;
    the ``min_queries``-th within the window matches."""

    kind = "dns_tunnel"
    protocols = (UDP,)
    client_payload_only = True

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, {"ports": [53], **params})
        self.window_s = float(params.get("window_s", 10.0))
        self.min_queries = int(params.get("min_queries", 5))
        self.zone_labels = int(params.get("zone_labels", dnstunnel.ZONE_LABELS))
        self.suspicious = partial(
            dnstunnel.suspicious,
            max_name=int(params.get("max_name", dnstunnel.MAX_NAME)),
            min_payload=int(params.get("min_payload", dnstunnel.MIN_PAYLOAD)),
            min_entropy=float(params.get("min_entropy", dnstunnel.MIN_ENTROPY)))
        self.max_keys = int(params.get("max_keys", 4096))
        # (client, domain) -> times of its suspicious queries; bounded, oldest evicted.
        self.recent: dict[tuple[str, str], list[float]] = {}

    def inspect(self, flow, pkt, c2s):
        if not c2s or not pkt.payload:
            return None if flow.packets < self.max_packets else DONE
        q = dns.parse_query(pkt.payload)
        if q is None:
            return DONE
        f = dnstunnel.features(q.labels, q.qtype, self.zone_labels)
        why = self.suspicious(f)
        if why is not None:
            now = flow.last_seen
            key = (flow.client, f.domain)
            times = [t for t in self.recent.pop(key, []) if now - t <= self.window_s]
            times.append(now)
            self.recent[key] = times  # re-inserted: the most recent key is last
            if len(self.recent) > self.max_keys:
                del self.recent[next(iter(self.recent))]
            if len(times) >= self.min_queries:
                return Match(self.name, {"rule": why, "queries": len(times),
                                         "window_s": self.window_s, **f.to_json()})
        return None if flow.packets < self.max_packets else DONE


class IranProtocolInspector(Inspector):
    """Iran's 2020 protocol filter: the first two c→s data packets must be DNS, HTTP or TLS."""

    kind = "iran_protocol"
    client_payload_only = True

    def inspect(self, flow, pkt, c2s):
        if not c2s or not pkt.payload:
            return None if flow.packets < self.max_packets else DONE
        chunks = flow.c2s_payloads[:2]
        proto = iran.classify(b"".join(chunks))
        if proto is not None:
            return DONE
        if len(chunks) < 2 and self.params.get("wait_second_packet", False):
            return None
        return Match(self.name, {"first_bytes": chunks[0][:16].hex(), "packets": len(chunks)})


class IranUdpInspector(Inspector):
    """Iran's UDP filtering since 2022, by ISP (docs/censors/iran.md §3.2).

    ``isp`` picks the row of :data:`censor_sim.detectors.iran.UDP_BY_ISP`: what
    that ISP did to UDP that is not DNS (port 53 is exempt). ``as_of`` on or after
    2025-06-25 adds what every ISP did from the June 2025 shutdown on: QUIC off.
    The match names the actions itself (the policy's ``action = "detector"``).
    """

    kind = "iran_udp"
    sees_empty = True
    protocols = (UDP,)

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, params)
        self.isp = str(params.get("isp", "irancell")).lower()
        if self.isp not in iran.UDP_BY_ISP:
            raise ValueError(f"detectors.{name}.isp: one of {', '.join(iran.UDP_BY_ISP)}, "
                             f"not {self.isp!r}")
        self.as_of = _as_of(name, params, "2026-01-01")

    def inspect(self, flow, pkt, c2s):
        if flow.packets > 1 or not c2s or flow.server_port == 53:
            return DONE
        quic = len(pkt.payload) >= 5 and pkt.payload[0] & 0x80 and \
            pkt.payload[1:5] == b"\x00\x00\x00\x01"
        acts = iran.UDP_BY_ISP[self.isp]
        why = f"udp-{self.isp}"
        if quic and self.as_of >= iran.QUIC_OFF_FROM:
            acts, why = ["drop"], "quic-off-2025"
        if not acts:
            return DONE
        return Match(self.name, {"rule": why, "isp": self.isp, "port": flow.server_port},
                     data={"actions": acts})


class UnclassifiedInspector(FirstPayloadInspector):
    """Range blocking: anything to the range that no protocol classifier recognises."""

    kind = "unclassified"

    def judge(self, first):
        if iran.classify(first) or _ssh_banner(first):
            return DONE
        return Match(self.name, {"first_bytes": first[:16].hex()})


class MlInspector(Inspector):
    """A learning censor's model over a flow's first packets (Wang et al. 2015).

    Each packet of the flow goes into a :class:`FlowLog`, the structure the
    training datasets are built with from pcaps, and the model decides when
    it has what it needs: the entropy test at the first client payload, a
    tree at its window of packets. Until then it abstains (``None``), so a
    flow that ends sooner, or outlives the censor's inspection budget, is
    never judged. ``threshold`` below 0 keeps the model's own.
    """

    kind = "ml"
    sees_empty = True

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, params)
        from .detectors.ml.model import ModelError, load

        try:
            self.model = load(str(params.get("model", "")))
        except ModelError as exc:
            raise ValueError(f"detectors.{name}.model: {exc}") from None
        threshold = params.get("threshold")
        if isinstance(threshold, int | float) and threshold >= 0:
            self.model.threshold = float(threshold)

    def inspect(self, flow, pkt, c2s):
        from .detectors.ml.flowlog import DOWN, UP, FlowLog

        # One log per flow, shared by every ml detector: the first to see a packet
        # records it, so the packet path copies each payload once.
        log: FlowLog | None = flow.state.get("ml.log")
        if log is None:
            log = flow.state["ml.log"] = FlowLog(self.model.window)
            flow.state["ml.seen"] = 0
        log.limit = max(log.limit, self.model.window)
        if flow.state["ml.seen"] < flow.packets:
            flow.state["ml.seen"] = flow.packets
            log.add(UP if c2s else DOWN, flow.last_seen - flow.first_seen, len(pkt.payload),
                    pkt.payload)
        decision = self.model.decide(log)
        if decision is None:
            return None
        if not decision.flagged:
            return DONE
        return Match(self.name, {"model": self.model.name, "positive": self.model.positive,
                                 "score": round(decision.score, 6),
                                 "packets": decision.packets,
                                 "comparisons": decision.comparisons, **decision.evidence})


# Data packets whose bytes the TLS-in-TLS inspector keeps: a cover TLS handshake is
# over within its first few packets each way (ClientHello; the server's flight; the
# client's CCS and Finished), even split across segments.
COVER_PACKETS = 10


class TlsInTlsInspector(Inspector):
    """Xue et al. 2024's encapsulated-handshake tests over a TCP flow's first 25 data
    packets (docs/censors/tlsintls.md §2). Flows that end sooner are never judged, as
    in the paper; ``strip_cover = false`` skips the cover-handshake cut."""

    kind = "tls_in_tls"
    uses_flow_stats = True

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        super().__init__(name, {"max_packets": 120, **params})
        try:
            self.model = tlsintls.load_model(str(params.get("model", "")))
        except ValueError as exc:
            raise ValueError(f"detectors.{name}.model: {exc}") from None
        for key in ("delta", "gamma"):
            if isinstance(params.get(key), int | float):
                setattr(self.model, key, float(params[key]))
        self.strip_cover = bool(params.get("strip_cover", True))
        # The engine refuses a datapath budget too small to show it a whole window.
        self.packets_needed = self.model.window

    def inspect(self, flow, pkt, c2s):
        # Per data packet only what the tests need: its size, time and first bytes. The
        # RTT comes from the flow's own record of its first packets (flow.stats).
        data = flow.state.get("tlsintls")
        if data is None:
            data = flow.state["tlsintls"] = []
        t = flow.last_seen - flow.first_seen
        # Only the first packets can hold the cover handshake's records: later ones
        # keep no bytes.
        head = pkt.payload[: tlsintls.HEAD_BYTES] if len(data) < COVER_PACKETS else b""
        data.append((1 if c2s else -1, len(pkt.payload), t, head))
        if len(data) < self.model.window:
            return None if flow.packets < self.max_packets else DONE
        # The flow's record of its first packets holds its SYN and handshake ACK.
        st = flow.stats
        rtt = tlsintls.handshake_rtt(zip(st.directions, st.lengths, st.times, strict=True))
        d = tlsintls.decide(self.model, [tlsintls.Pkt(*x) for x in data], rtt,
                            self.strip_cover)
        if not d.flagged:
            return DONE
        return Match(self.name, {"model": self.model.name, **d.to_json(),
                                 "rtt_ms": None if rtt is None else round(rtt * 1e3, 3)})


def _as_of(name: str, params: dict[str, Any], default: str) -> date:
    """A dated model's ``as_of`` parameter (the day whose rules it applies)."""
    try:
        return date.fromisoformat(str(params.get("as_of", default)))
    except ValueError:
        raise ValueError(f"detectors.{name}.as_of: a date as YYYY-MM-DD, "
                         f"not {params.get('as_of')!r}") from None


def _is_stun(data: bytes) -> bool:
    """A STUN message (RFC 8489): top two bits 0 and the magic cookie at offset 4."""
    return len(data) >= 20 and data[0] < 0x40 and data[4:8] == b"\x21\x12\xa4\x42"


def _ssh_banner(data: bytes) -> str | None:
    return "ssh" if data.startswith(b"SSH-2.0-") else None


INSPECTORS: dict[str, type[Inspector]] = {
    cls.kind: cls for cls in (FetInspector, HttpKeywordInspector, TlsInspector,
                              QuicSniInspector, QuicInitialInspector, DtlsInspector,
                              DnsInspector, OpenVpnInspector, WireGuardInspector,
                              DnsTunnelInspector, TlsInTlsInspector, IranProtocolInspector,
                              IranUdpInspector, UnclassifiedInspector, MlInspector)
}
