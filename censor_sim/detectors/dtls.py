"""DTLS handshake parsing over one UDP payload, and Russia's byte rules against pion/dtls.

Why this exists: WebRTC transports (Snowflake) speak DTLS, and censors have blocked
them on a few bytes of the plaintext handshake. The rules below are modelled from the
public reports (``docs/censors/fingerprints.md`` §2); the parser lets tests and
the censor engine check where those bytes really sit, and gives JA3/JA4 code
(``ptcommon.tlshello``) the same attributes a TLS ClientHello has.

Wire formats: RFC 6347 §4.1 (DTLS 1.2 record: type, version, epoch, 48-bit sequence
number, length; 13 bytes) and §4.2.2 (handshake header: type, length, message_seq,
fragment_offset, fragment_length; 12 bytes), §4.2.1 (HelloVerifyRequest and the
ClientHello ``cookie``). DTLS 1.0 (RFC 4347) has the same layout. DTLS 1.3 (RFC 9147)
keeps that plaintext record for its ClientHello/ServerHello (``legacy_record_version``
``FE FD``, §4) and adds the "unified header" for encrypted records (§4, first byte
``001CSLEE``); those are skipped as opaque records so a DTLS 1.3 flight still parses.

Offsets: every offset stored on the objects here is absolute, counted from the first
byte of the UDP payload (the first DTLS record header), because that is how the
Russian rules are stated; see :func:`ru_2021_serverhello` for why "offset 0x5A of the
UDP packet" means the UDP payload and not the IP packet.

Fragmentation (RFC 6347 §4.2.3): a handshake message may be split over records and
datagrams. There is no reassembly here, on purpose: the DPI rules being modelled look
at single datagrams. An unfragmented message, or the *first* fragment
(``fragment_offset == 0``), is parsed; for a first fragment the fixed fields must fit
and the extensions that fit are kept, with ``truncated=True``. Later fragments are
returned as :class:`HandshakeMessage` but never parsed as hellos.

Malformed input never raises: the parse functions return ``None`` and the rules
return ``False``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RECORD_HEADER_LEN = 13
HANDSHAKE_HEADER_LEN = 12

# Record content types (RFC 6347 §4.1; 24-26 from RFC 6520, RFC 9146, RFC 9147).
CT_CHANGE_CIPHER_SPEC = 20
CT_ALERT = 21
CT_HANDSHAKE = 22
CT_APPLICATION_DATA = 23
CONTENT_TYPES = frozenset(range(20, 27))
CT_UNIFIED = 0  # our marker for an RFC 9147 unified-header (encrypted) record

DTLS_1_0 = 0xFEFF
DTLS_1_2 = 0xFEFD
RECORD_VERSIONS = frozenset({DTLS_1_0, DTLS_1_2})

HT_CLIENT_HELLO = 1
HT_SERVER_HELLO = 2
HT_HELLO_VERIFY_REQUEST = 3

EXT_SERVER_NAME = 0
EXT_SUPPORTED_GROUPS = 10
EXT_EC_POINT_FORMATS = 11
EXT_SIGNATURE_ALGORITHMS = 13
EXT_USE_SRTP = 14
EXT_ALPN = 16
EXT_EXTENDED_MASTER_SECRET = 23
EXT_SUPPORTED_VERSIONS = 43
EXT_RENEGOTIATION_INFO = 0xFF01

X25519 = 0x001D
SECP256R1 = 0x0017
SECP384R1 = 0x0018
# pion/dtls's default curve order (config.go ``defaultCurves``; before v2.2.0 hard-coded in
# flight1/flight3/flight4): X25519, P-256, P-384. On the wire: 00 1D 00 17 00 18.
PION_CURVES = (X25519, SECP256R1, SECP384R1)

DTLS_HANDSHAKE_MAGIC = b"\x16\xfe\xfd"  # handshake record, DTLS 1.2 record version


class _Short(Exception):  # noqa: N818 - internal control flow, never escapes
    pass


def _u8(b: bytes, i: int) -> int:
    if i + 1 > len(b):
        raise _Short
    return b[i]


def _u16(b: bytes, i: int) -> int:
    if i + 2 > len(b):
        raise _Short
    return (b[i] << 8) | b[i + 1]


def _u24(b: bytes, i: int) -> int:
    if i + 3 > len(b):
        raise _Short
    return (b[i] << 16) | (b[i + 1] << 8) | b[i + 2]


def _take(b: bytes, i: int, n: int) -> bytes:
    if i + n > len(b):
        raise _Short
    return b[i : i + n]


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class DtlsRecord:
    """One DTLS record of a datagram.

    ``offset`` is where its header starts in the UDP payload; ``fragment`` is the
    record body. RFC 9147 unified-header records have ``content_type == CT_UNIFIED``
    and ``version == 0`` (their real type is encrypted).
    """

    content_type: int
    version: int
    epoch: int
    sequence_number: int
    offset: int
    header_length: int
    fragment: bytes

    @property
    def body_offset(self) -> int:
        return self.offset + self.header_length

    @property
    def unified(self) -> bool:
        return self.content_type == CT_UNIFIED


def parse_records(payload: bytes) -> list[DtlsRecord] | None:
    """All records of one UDP payload, or None if any of it is not DTLS.

    RFC 6347 §4.1.1 lets one datagram carry several records (pion sends a whole
    flight, ServerHello..ServerHelloDone, in as few datagrams as fit), so the whole
    datagram must parse: trailing garbage makes it not-DTLS.
    """
    n = len(payload)
    if n == 0:
        return None
    out: list[DtlsRecord] = []
    pos = 0
    try:
        while pos < n:
            first = payload[pos]
            if first & 0xE0 == 0x20:
                # RFC 9147 §4 unified header: 0 0 1 C S L E E.
                has_cid, seq16, has_len = first & 0x10, first & 0x08, first & 0x04
                seq_len = 2 if seq16 else 1
                seq = _u16(payload, pos + 1) if seq16 else _u8(payload, pos + 1)
                if has_cid:
                    # The connection ID's length was negotiated, not sent: the rest of
                    # the datagram is this record, opaque.
                    out.append(DtlsRecord(CT_UNIFIED, 0, first & 3, seq, pos, 1,
                                          payload[pos + 1 :]))
                    break
                hdr = 1 + seq_len + (2 if has_len else 0)
                if has_len:
                    end = pos + hdr + _u16(payload, pos + 1 + seq_len)
                    if end > n:
                        return None
                else:
                    if pos + hdr > n:
                        return None
                    end = n
                out.append(DtlsRecord(CT_UNIFIED, 0, first & 3, seq, pos, hdr,
                                      payload[pos + hdr : end]))
                pos = end
                continue
            if pos + RECORD_HEADER_LEN > n:
                return None
            ctype = first
            version = _u16(payload, pos + 1)
            if ctype not in CONTENT_TYPES or version not in RECORD_VERSIONS:
                return None
            epoch = _u16(payload, pos + 3)
            seq = int.from_bytes(payload[pos + 5 : pos + 11], "big")
            length = _u16(payload, pos + 11)
            end = pos + RECORD_HEADER_LEN + length
            if end > n:
                return None
            out.append(DtlsRecord(ctype, version, epoch, seq, pos, RECORD_HEADER_LEN,
                                  payload[pos + RECORD_HEADER_LEN : end]))
            pos = end
    except _Short:
        return None
    return out


@dataclass(frozen=True)
class HandshakeMessage:
    """One handshake message (or fragment of one) from a plaintext handshake record.

    ``offset`` is the absolute offset of its 12-byte header in the UDP payload.
    """

    msg_type: int
    length: int
    message_seq: int
    fragment_offset: int
    fragment_length: int
    offset: int
    record_version: int
    fragment: bytes

    @property
    def body_offset(self) -> int:
        return self.offset + HANDSHAKE_HEADER_LEN

    @property
    def is_complete(self) -> bool:
        return self.fragment_offset == 0 and self.fragment_length == self.length

    @property
    def is_first_fragment(self) -> bool:
        return self.fragment_offset == 0


def parse_handshake_messages(payload: bytes) -> list[HandshakeMessage] | None:
    """Handshake messages in the datagram's epoch-0 handshake records, in wire order.

    A record may hold several handshake messages (RFC 6347 §4.2.3 allows packing);
    each must be well-formed, with its fragment inside the message. Handshake records
    of later epochs are encrypted (Finished) and skipped. None if the datagram is not
    DTLS or a handshake header is malformed.
    """
    records = parse_records(payload)
    if records is None:
        return None
    out: list[HandshakeMessage] = []
    try:
        for rec in records:
            if rec.content_type != CT_HANDSHAKE or rec.epoch != 0:
                continue
            frag, pos = rec.fragment, 0
            if not frag:
                return None
            while pos < len(frag):
                mtype = _u8(frag, pos)
                length = _u24(frag, pos + 1)
                mseq = _u16(frag, pos + 4)
                foff = _u24(frag, pos + 6)
                flen = _u24(frag, pos + 9)
                if foff + flen > length:
                    return None
                body = _take(frag, pos + HANDSHAKE_HEADER_LEN, flen)
                out.append(HandshakeMessage(mtype, length, mseq, foff, flen,
                                            rec.body_offset + pos, rec.version, body))
                pos += HANDSHAKE_HEADER_LEN + flen
    except _Short:
        return None
    return out


# --------------------------------------------------------------------------- hellos


class _Extensions:
    """Typed views of hello extensions, shared by ClientHello and ServerHello.

    Names and types follow the TLS ClientHello in ``ptcommon.tlshello`` so that
    ``ja3``/``ja4`` can be applied to a DTLS hello unchanged. A malformed extension
    body reads as absent (``None`` / empty list), never as an exception.
    """

    extensions: list[tuple[int, bytes]]
    extension_offsets: list[int]

    def extension(self, ext_type: int) -> bytes | None:
        """Body of the first extension of this type, or None."""
        for t, data in self.extensions:
            if t == ext_type:
                return data
        return None

    def extension_offset(self, ext_type: int) -> int | None:
        """Absolute offset (in the UDP payload) of the first such extension's type field."""
        for (t, _), off in zip(self.extensions, self.extension_offsets, strict=True):
            if t == ext_type:
                return off
        return None

    @property
    def supported_groups_offset(self) -> int | None:
        """Absolute offset of the first NamedGroup of supported_groups, or None.

        That is the extension's offset + 6 (type, length, list length): the byte where
        pion's ``00 1D`` sits, which is what the Russian rules compare.
        """
        off = self.extension_offset(EXT_SUPPORTED_GROUPS)
        data = self.extension(EXT_SUPPORTED_GROUPS)
        if off is None or data is None or len(data) < 2:
            return None
        return off + 6

    @property
    def supported_groups(self) -> list[int]:
        return _u16_list(self.extension(EXT_SUPPORTED_GROUPS), 2)

    @property
    def ec_point_formats(self) -> list[int]:
        data = self.extension(EXT_EC_POINT_FORMATS)
        if not data or data[0] != len(data) - 1:
            return []
        return list(data[1:])

    @property
    def signature_algorithms(self) -> list[int]:
        return _u16_list(self.extension(EXT_SIGNATURE_ALGORITHMS), 2)

    @property
    def supported_versions(self) -> list[int]:
        data = self.extension(EXT_SUPPORTED_VERSIONS)
        if data is None:
            return []
        if len(data) == 2:  # ServerHello form: one selected version (RFC 8446 §4.2.1)
            return [(data[0] << 8) | data[1]]
        return _u16_list(data, 1)

    @property
    def alpn(self) -> list[str]:
        data = self.extension(EXT_ALPN)
        if data is None or len(data) < 2 or ((data[0] << 8) | data[1]) != len(data) - 2:
            return []
        out, pos = [], 2
        while pos < len(data):
            n = data[pos]
            if n == 0 or pos + 1 + n > len(data):
                return []
            out.append(data[pos + 1 : pos + 1 + n].decode("latin-1"))
            pos += 1 + n
        return out

    @property
    def sni(self) -> str | None:
        """First host_name of server_name (RFC 6066 §3), or None.

        Decoded as ASCII with replacement: pion once put the peer's IP address here
        (pion/dtls#406), and the value matters to a censor whatever it contains.
        """
        data = self.extension(EXT_SERVER_NAME)
        if data is None or len(data) < 2 or ((data[0] << 8) | data[1]) != len(data) - 2:
            return None
        pos = 2
        while pos + 3 <= len(data):
            kind, n = data[pos], (data[pos + 1] << 8) | data[pos + 2]
            if pos + 3 + n > len(data):
                return None
            if kind == 0:
                return data[pos + 3 : pos + 3 + n].decode("ascii", "replace")
            pos += 3 + n
        return None


def _u16_list(data: bytes | None, prefix: int) -> list[int]:
    """A vector of uint16 with a ``prefix``-byte length; [] if absent or malformed."""
    if data is None or len(data) < prefix:
        return []
    n = int.from_bytes(data[:prefix], "big")
    if n != len(data) - prefix or n % 2:
        return []
    return [(data[i] << 8) | data[i + 1] for i in range(prefix, len(data), 2)]


def _parse_extensions(
    body: bytes, pos: int, base: int, complete: bool
) -> tuple[list[tuple[int, bytes]], list[int], bool] | None:
    """Extensions from ``body[pos:]``; ``base`` is body[0]'s offset in the UDP payload.

    For a complete message the block must fill the rest of the body exactly. For a
    first fragment, the extensions that fit are kept and the third value says the
    block was cut short.
    """
    exts: list[tuple[int, bytes]] = []
    offs: list[int] = []
    if pos == len(body):
        # No extensions block at all: legal for a complete hello (RFC 5246 §7.4.1.2);
        # for a fragment the block may simply be in a later fragment.
        return exts, offs, not complete
    if pos + 2 > len(body):
        return (None if complete else (exts, offs, True))
    total = (body[pos] << 8) | body[pos + 1]
    pos += 2
    end = pos + total
    if complete and end != len(body):
        return None
    truncated = end > len(body)
    end = min(end, len(body))
    while pos < end:
        if pos + 4 > end:
            if complete:
                return None
            return exts, offs, True
        etype = (body[pos] << 8) | body[pos + 1]
        elen = (body[pos + 2] << 8) | body[pos + 3]
        if pos + 4 + elen > end:
            if complete or not truncated:
                return None
            return exts, offs, True
        exts.append((etype, body[pos + 4 : pos + 4 + elen]))
        offs.append(base + pos)
        pos += 4 + elen
    return exts, offs, truncated


@dataclass(frozen=True)
class ClientHello(_Extensions):
    """A DTLS ClientHello (RFC 6347 §4.2.1: TLS 1.2's, plus ``cookie``).

    ``offset`` is the handshake header's absolute offset; ``extension_offsets[i]`` is
    the absolute offset of ``extensions[i]``'s type field. ``truncated`` marks a hello
    parsed from a first fragment whose extensions did not all fit.
    """

    legacy_version: int
    random: bytes
    session_id: bytes
    cookie: bytes
    ciphers: list[int]
    compression_methods: bytes
    extensions: list[tuple[int, bytes]]
    extension_offsets: list[int]
    offset: int
    message_seq: int
    record_version: int
    truncated: bool = False


@dataclass(frozen=True)
class ServerHello(_Extensions):
    """A DTLS ServerHello (RFC 5246 §7.4.1.3 layout; RFC 6347 changes nothing in it)."""

    legacy_version: int
    random: bytes
    session_id: bytes
    cipher: int
    compression_method: int
    extensions: list[tuple[int, bytes]]
    extension_offsets: list[int]
    offset: int
    message_seq: int
    record_version: int
    truncated: bool = False


@dataclass(frozen=True)
class HelloVerifyRequest:
    """RFC 6347 §4.2.1: the server's stateless cookie challenge."""

    server_version: int
    cookie: bytes
    offset: int
    message_seq: int
    record_version: int


def _parse_client_hello_msg(msg: HandshakeMessage) -> ClientHello | None:
    body, complete = msg.fragment, msg.is_complete
    base = msg.body_offset
    try:
        version = _u16(body, 0)
        random = _take(body, 2, 32)
        pos = 34
        sid_len = _u8(body, pos)
        if sid_len > 32:
            return None
        session_id = _take(body, pos + 1, sid_len)
        pos += 1 + sid_len
        cookie_len = _u8(body, pos)
        cookie = _take(body, pos + 1, cookie_len)
        pos += 1 + cookie_len
        cs_len = _u16(body, pos)
        if cs_len < 2 or cs_len % 2:
            return None
        cs = _take(body, pos + 2, cs_len)
        ciphers = [(cs[i] << 8) | cs[i + 1] for i in range(0, cs_len, 2)]
        pos += 2 + cs_len
        cm_len = _u8(body, pos)
        if cm_len < 1:
            return None
        compression = _take(body, pos + 1, cm_len)
        pos += 1 + cm_len
    except _Short:
        return None
    parsed = _parse_extensions(body, pos, base, complete)
    if parsed is None:
        return None
    exts, offs, truncated = parsed
    return ClientHello(version, random, session_id, cookie, ciphers, compression, exts, offs,
                       msg.offset, msg.message_seq, msg.record_version, truncated)


def _parse_server_hello_msg(msg: HandshakeMessage) -> ServerHello | None:
    body, complete = msg.fragment, msg.is_complete
    base = msg.body_offset
    try:
        version = _u16(body, 0)
        random = _take(body, 2, 32)
        sid_len = _u8(body, 34)
        if sid_len > 32:
            return None
        session_id = _take(body, 35, sid_len)
        pos = 35 + sid_len
        cipher = _u16(body, pos)
        compression = _u8(body, pos + 2)
        pos += 3
    except _Short:
        return None
    parsed = _parse_extensions(body, pos, base, complete)
    if parsed is None:
        return None
    exts, offs, truncated = parsed
    return ServerHello(version, random, session_id, cipher, compression, exts, offs,
                       msg.offset, msg.message_seq, msg.record_version, truncated)


def _first(payload: bytes, msg_type: int) -> HandshakeMessage | None:
    msgs = parse_handshake_messages(payload)
    if not msgs:
        return None
    for m in msgs:
        if m.msg_type == msg_type and m.is_first_fragment:
            return m
    return None


def parse_client_hello(payload: bytes) -> ClientHello | None:
    """The first ClientHello (whole, or first fragment) in a UDP payload, or None."""
    msg = _first(payload, HT_CLIENT_HELLO)
    return None if msg is None else _parse_client_hello_msg(msg)


def parse_server_hello(payload: bytes) -> ServerHello | None:
    """The first ServerHello (whole, or first fragment) in a UDP payload, or None."""
    msg = _first(payload, HT_SERVER_HELLO)
    return None if msg is None else _parse_server_hello_msg(msg)


def parse_hello_verify_request(payload: bytes) -> HelloVerifyRequest | None:
    """The first complete HelloVerifyRequest in a UDP payload, or None.

    Its body must be exactly ``server_version`` + ``opaque cookie<0..2^8-1>``.
    """
    msg = _first(payload, HT_HELLO_VERIFY_REQUEST)
    if msg is None or not msg.is_complete:
        return None
    body = msg.fragment
    if len(body) < 3 or 3 + body[2] != len(body):
        return None
    return HelloVerifyRequest((body[0] << 8) | body[1], body[3:], msg.offset,
                              msg.message_seq, msg.record_version)


# --------------------------------------------------------------------------- rules


def is_dtls_handshake(payload: bytes) -> bool:
    """True if the datagram is DTLS and starts with a well-formed plaintext handshake.

    The whole datagram must parse as DTLS records (:func:`parse_records`), and the
    first record must be an epoch-0 handshake record holding at least one well-formed
    handshake header. This is the "is this a DTLS handshake flow" gate a censor needs
    before any of the byte rules make sense.
    """
    msgs = parse_handshake_messages(payload)
    return bool(msgs and msgs[0].offset == RECORD_HEADER_LEN)


RU_2021_OFFSET = 0x5A
RU_2021_PATTERN = bytes.fromhex("1d00170018")


def ru_2021_serverhello(payload: bytes) -> bool:
    """Russia, from 2021-12-01: pion's supported_groups in the DTLS ServerHello.

    Source: pion/dtls#409 (2021-12-08), quoting Snowflake issue 40014: "Russian DPI
    check supported_groups extension in ServerHello payload (byte 0x5a in udp packet).
    It looks for DTLS packet header "magic" "16 FE FD" and then looks for "1D 00 17 00
    18" at 0x5a offset." Fixed by pion/dtls#410 (v2.0.12, 2021-12-10), which stopped
    sending supported_groups in the ServerHello; that fix unblocked Snowflake.

    Offset settled: 0x5A counts from the start of the UDP *payload*. pion (< 2.0.12,
    ``flight4Generate``; ``MessageServerHello.Marshal``) builds the ServerHello of a
    WebRTC connection as: record header (13) + handshake header (12) → body at 0x19;
    version 2 + random 32 → session_id length at 0x3B (always 0); cipher 0x3C;
    compression 0x3E; extensions length 0x3F; renegotiation_info at 0x41 (5 bytes);
    extended_master_secret at 0x46 (4); use_srtp at 0x4A (9: one profile + MKI byte,
    present because browsers offer SRTP); supported_groups at 0x53: type, length and
    list length, then the list at 0x59 = ``00 1D 00 17 00 18`` — so ``1D`` is at 0x5A.
    Counted from an IPv4 header the same bytes would be 28 further on, and 0x5A would
    fall on the ServerHello's compression method: nonsense. ValdikSS's later rule
    (pion/dtls#474) names 0x59 too, the same place, one byte earlier with the ``00``.

    Like the DPI, this compares bytes only: it does not check that the message is a
    ServerHello.
    """
    return (payload[:3] == DTLS_HANDSHAKE_MAGIC
            and payload[RU_2021_OFFSET : RU_2021_OFFSET + 5] == RU_2021_PATTERN)


RU_2022_OFFSETS = (0x6E, 0x59)
RU_2022_PATTERN = bytes.fromhex("001d00170018")


def ru_2022_clienthello(payload: bytes, offsets: Sequence[int] = RU_2022_OFFSETS) -> bool:
    """Russia, 2022-05: pion's curve list in the DTLS ClientHello, at fixed offsets.

    Source: pion/dtls#474 (ValdikSS, 2022-05-24): "The fingerprint is performed by
    comparing the ``00 1D 00 17 00 18`` bytes at 0x6e offset of the packet, as well as
    at 0x59 offset." The proposed fix shuffled the curves; pion instead made the curve
    list configurable (commit de299f5, 2022-05-24, released in v2.2.0).

    Offsets are in the UDP payload (see :func:`ru_2021_serverhello`). 0x6E is where
    pion (v2.1.x defaults) puts its curve list in a first ClientHello: body at 0x19;
    session_id length 0x3B (0); cookie length 0x3C (0); cipher_suites length 0x3D and
    six suites (12 bytes) to 0x4A; compression 0x4B-0x4C; extensions length 0x4D;
    signature_algorithms at 0x4F (20 bytes: seven schemes); renegotiation_info at 0x63
    (5); supported_groups at 0x68, its list at 0x6E. 0x59 is where the same six bytes
    sat in pion's old ServerHello, so "either offset" is modelled. The ``16 FE FD``
    record magic of the 2021 rule is assumed to gate this one too (the source does
    not say). A second ClientHello carrying pion's 20-byte cookie has its list at
    0x82 and does not match: the rule catches the first flight only.
    """
    if payload[:3] != DTLS_HANDSHAKE_MAGIC:
        return False
    return any(payload[o : o + 6] == RU_2022_PATTERN for o in offsets if o >= 0)


# Offsets of the supported_groups *extension* (its type field) in pion's ClientHello:
# 0x68 in the first ClientHello (empty cookie) and 0x7C = 0x68 + 20 in the second one,
# which echoes the 20-byte cookie pion's server sends (pion conn.go ``cookieLength``).
RU_2024_OFFSETS = (0x68, 0x7C)


def ru_2024_supported_groups_offset(
    payload: bytes,
    offsets: Iterable[int] | None = RU_2024_OFFSETS,
    groups: Sequence[int] | None = PION_CURVES,
) -> bool:
    """Russia, 2024-02: the position and content of supported_groups in a ClientHello.

    Source: ntc.party thread "A new Snowflake blocking rule: offset of supported_groups
    in DTLS Client Hello" (2024-02), via Glimesh/broadcast-box#82 (2024-02-21), whose
    fix was to swap the order of the curve IDs. The exact bytes of the rule are not
    public in what we could read, so it is modelled from those two facts:

    - "offset of supported_groups": the ClientHello is parsed, so only a real
      supported_groups extension counts (not any six bytes), and it must start at one
      of ``offsets`` (absolute, in the UDP payload; no record magic required). The
      defaults are pion's two layouts, with and without its 20-byte cookie; ``None``
      accepts any position.
    - reordering the curves evaded it: so the list must also equal ``groups`` (pion's
      default order by default); ``None`` makes the rule position-only.
    """
    hello = parse_client_hello(payload)
    if hello is None:
        return False
    off = hello.extension_offset(EXT_SUPPORTED_GROUPS)
    if off is None:
        return False
    if offsets is not None and off not in set(offsets):
        return False
    return groups is None or hello.supported_groups == list(groups)


def ja4(payload: bytes) -> str | None:
    """The JA4 of the DTLS ClientHello in `payload` (FoxIO JA4.md: "d" for DTLS, then
    d1/d2/d3 for DTLS 1.0/1.2/1.3), or None if there is none. The TSPU's rule of
    2026-03-30 matched pion's default hello by this (docs/censors/russia.md §5.5)."""
    from ptcommon import tlshello

    hello = parse_client_hello(payload)
    return None if hello is None else tlshello.ja4(hello, "d")


def application_records(payload: bytes) -> int:
    """How many application_data records (or encrypted DTLS 1.3 records) a datagram holds:
    data after the handshake."""
    recs = parse_records(payload)
    return 0 if recs is None else sum(
        1 for r in recs if r.content_type == CT_APPLICATION_DATA or r.unified)
