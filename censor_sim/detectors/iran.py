"""Iran's 2020 protocol filter ("whitelister"): the DNS/HTTP/TLS fingerprints it allows.

Source: Bock, Fax, Reese, Singh, Levin, "Detecting and Evading Censorship-in-Depth: A
Case Study of Iran's Protocol Whitelister", FOCI 2020, §4.3 (docs/censors/iran.md §1), and the
same authors' write-up, "Iran: A New Model for Censorship" (Geneva blog, 2020-02-26,
geneva.cs.umd.edu/posts/iran-whitelister), which lists the fingerprints point by point.
Summarised by Fifield on ntc.party ("Paper summary: ... Iran's Protocol Filter"), which
points to §4.3 for the fingerprints and notes that "the DNS protocol fingerprint has a
bug". The paper's own §4.3 text was not available to us; the criteria quoted below are
the authors' blog post, where that bug is spelled out (see :func:`is_dns`).

What the filter does (modelled by the censor engine, not here): on TCP ports
:data:`PORTS` only, it looks at the first two data-carrying client packets, with no
TCP reassembly and no checksum check, and if they match none of the fingerprints it
drops every later client packet of the flow for :data:`FILTER_S` seconds, the timer
reset by each further packet. This module is the fingerprint test: :func:`classify`.

The fingerprint is **not tied to the port**: DNS, HTTP and TLS are each accepted on
any of 53, 80 and 443 (ntc.party summary: "The protocol fingerprint is not paired with a
specific port"; the blog says the same). So :func:`classify` takes no port; the engine
only checks ``port in PORTS``.

Input: the payloads of the first two client data packets, concatenated, as
docs/censors/iran.md §1.2 and the ntc.party summary put it ("the two packets together").
The blog phrases it as "if either of those two packets matches"; for a fingerprint
anchored at the start of the payload the two readings differ only when the first packet
is too short to match on its own. Callers wanting the per-packet reading can call
:func:`classify` on each packet.
"""

from __future__ import annotations

from datetime import date

PORTS = (53, 80, 443)
FILTER_S = 60

HTTP_METHODS = (b"GET ", b"POST ", b"HEAD ", b"CONNECT ", b"OPTIONS ", b"DELETE ", b"PUT ")
HTTP_MIN_LEN = 8
TLS_MIN_LEN = 41
TLS_VERSIONS = (b"\x03\x01", b"\x03\x02", b"\x03\x03")
DNS_MIN_LEN = 12
DNS_MAX_QDCOUNT = 15  # QDCOUNT must be *less than* this


def is_http(data: bytes) -> bool:
    """HTTP fingerprint: at least 8 bytes, starting with one of seven methods and a space.

    Blog: "The TCP payload must be ≥ 8 bytes; the payload must start with a specific
    HTTP verb followed by one space ... GET, POST, HEAD, CONNECT, OPTIONS, DELETE, and
    PUT. TRACE and PATCH do not work." Case-sensitive, as on the wire.
    """
    return len(data) >= HTTP_MIN_LEN and data.startswith(HTTP_METHODS)


def is_tls(data: bytes) -> bool:
    """TLS fingerprint: a TLS record header whose length covers exactly the rest.

    Blog: "The TCP payload must be ≥ 41 bytes: 5 bytes for the TLS header, 36 for the
    TLS Client Hello; the length field of the TLS Header equals the length of the Client
    Hello; the TLS version header (bytes 2 and 3 of the TCP payload) is TLS 1.0, 1.1,
    or 1.2 ... After the first 5 bytes of the packet ... the whitelister does not look
    at any contents of the Client Hello." So garbage after a plausible header passes.

    Assumption: the content type byte must be 0x16 (handshake). Every example the
    authors give starts with it, but they do not state whether the filter checks it.
    """
    return (len(data) >= TLS_MIN_LEN
            and data[0] == 0x16
            and data[1:3] in TLS_VERSIONS
            and int.from_bytes(data[3:5], "big") == len(data) - 5)


def is_dns(data: bytes) -> bool:
    """DNS fingerprint — with the filter's bug: it expects DNS-over-*UDP* framing on TCP.

    Blog: "TCP payload must be ≥ 12 bytes. Structure of the TCP payload must be a valid
    DNS-over-UDP header, not a DNS-over-TCP header. Recall that the whitelister is only
    active over TCP - this means their whitelister will never match a legitimate
    DNS-over-TCP packet." Field limits: "QR must be 0, QDcount must be less than 15,
    and ANcount must be 0." Example that passes: ``00 00 01 00 00 01 00 00 00 00 00 00``.

    Modelled faithfully: the 12-byte header is read at offset 0, ignoring the two-byte
    length that RFC 7766 §8 puts first on TCP. For a real DNS-over-TCP query the
    fields are then read two bytes late — QR becomes the top bit of the real ID,
    QDCOUNT the real flags (0x0100 with RD set: ≥ 15) and ANCOUNT the real QDCOUNT (1)
    — so it never matches. The authors note why this hurt little: the filter drops
    only packets *after* the first, and a DNS-over-TCP client sends its whole query in
    the first packet. Conversely, any 12+ bytes shaped like a UDP query header, the
    paper's example above, passes on any of the three ports.
    """
    if len(data) < DNS_MIN_LEN:
        return False
    qr = data[2] & 0x80
    qdcount = (data[4] << 8) | data[5]
    ancount = (data[6] << 8) | data[7]
    return not qr and qdcount < DNS_MAX_QDCOUNT and ancount == 0


def classify(first_two_payloads: bytes) -> str | None:
    """``"http"``, ``"tls"``, ``"dns"``, or None if the filter would not allow the flow.

    ``first_two_payloads`` is the concatenation of the first two client data packets'
    payloads; nothing beyond them is reassembled (the filter does no TCP reassembly,
    so a request split into tiny segments fails: the authors' own test sends ``G``,
    ``ET`` and ``/`` separately). Fingerprints are tried HTTP, TLS, DNS; the order only
    matters for labelling, since a flow is allowed if any matches. Not port-specific:
    see the module docstring.
    """
    if is_http(first_two_payloads):
        return "http"
    if is_tls(first_two_payloads):
        return "tls"
    if is_dns(first_two_payloads):
        return "dns"
    return None


# -- UDP since 2022, by ISP (community reports: docs/censors/iran.md §3.2) -------------------

# What each ISP did to UDP that is not DNS, as the reports give it. "loss" is random
# loss of the flow's packets (actions.loss.percent; 50 % in net4people/bbs#182).
UDP_BY_ISP: dict[str, list[str]] = {
    "irancell": ["drop"],  # bbs#166, 2023-01-16: "blocked UDP completely"
    "ztel": ["drop"],      # ibid.
    "lossy": ["loss"],     # bbs#182, 2022-12-23: "UDP is mostly blocked", ~50 % loss (iperf3)
    "mci": [],             # bbs#166: MCI worked (its later upload throttling, bbs#253, had no rate)
    "none": [],
}
# From the June 2025 shutdown (2025-06-17/18 to 06-25), QUIC was off on all ISPs (bbs#489).
QUIC_OFF_FROM = date(2025, 6, 25)
