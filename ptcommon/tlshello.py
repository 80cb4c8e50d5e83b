"""TLS ClientHello parsing and its JA3/JA4 fingerprints: standard library only.

Both sides of the lab read ClientHellos: the censor (SNI blocking and fingerprint
blocklists, :mod:`censor_sim.detectors.tls`; the QUIC Initial's CRYPTO frames,
:mod:`censor_sim.detectors.quic`) and the transports that must look like a browser
(meek captures its own hellos' JA3/JA4, :mod:`transports.meek.fingerprint`). The parser lives
here so a transport never imports the censor.

Censors read the ClientHello in the clear: its server_name, and its shape –
cipher suites, extensions, groups – which JA3 (Salesforce, 2017) and JA4 (FoxIO,
2023) condense into a fingerprint (Iran's 2022 blocking of Go's crypto/tls hello;
docs/censors/fingerprints.md §1, §3).

A ClientHello can span several records and TCP segments (post-quantum key
shares push it past one MSS), so the stream parser raises :class:`NeedMore` on a
valid prefix. Anything else that is not a ClientHello gives None; malformed input
never raises.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any


class NeedMore(Exception):  # noqa: N818 - a signal, not an error
    """The bytes so far are a valid prefix of what the parser reads; feed more.

    A modern TLS ClientHello (with post-quantum key shares) spans two TCP
    segments, so a parser must be able to say "not yet" instead of "no".
    ``censor_sim.detectors.NeedMore`` is this class: every stream detector raises it.
    """


HANDSHAKE, CLIENT_HELLO = 0x16, 0x01
EXT_SNI, EXT_GROUPS, EXT_POINT_FORMATS, EXT_SIG_ALGS = 0, 10, 11, 13
EXT_ALPN, EXT_SUPPORTED_VERSIONS, EXT_KEY_SHARE = 16, 43, 51
MAX_HELLO = 1 << 16


def is_grease(value: int) -> bool:
    """RFC 8701 GREASE values 0x?A?A, ignored by both fingerprints."""
    return value & 0x0F0F == 0x0A0A and value >> 8 == value & 0xFF


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return struct.unpack("!H", self.take(2))[0]

    def vec(self, size_len: int) -> bytes:
        n = int.from_bytes(self.take(size_len), "big")
        return self.take(n)


def _u16_list(data: bytes) -> list[int]:
    if len(data) % 2:
        raise ValueError("odd length")
    return list(struct.unpack(f"!{len(data) // 2}H", data))


_TYPE_AND_LENGTH = struct.Struct("!HH")


def _extensions(data: bytes) -> tuple[list[tuple[int, bytes]], bool]:
    """The (type, body) extensions wholly inside ``data``, and whether they fill it
    (False: the last is cut off or its header is). One loop over the buffer, not a
    reader's calls: a capture's every ClientHello comes through here, and the
    calls were most of pcap mode's TLS parsing."""
    out: list[tuple[int, bytes]] = []
    pos, end = 0, len(data)
    unpack = _TYPE_AND_LENGTH.unpack_from
    while pos < end:
        if pos + 4 > end:
            return out, False
        ext_type, length = unpack(data, pos)
        stop = pos + 4 + length
        if stop > end:
            return out, False
        out.append((ext_type, data[pos + 4:stop]))
        pos = stop
    return out, True


@dataclass
class ClientHello:
    legacy_version: int
    random: bytes
    session_id: bytes
    ciphers: list[int]
    compression: bytes
    extensions: list[tuple[int, bytes]] = field(default_factory=list)
    record_version: int | None = None

    def ext(self, ext_type: int) -> bytes | None:
        for t, body in self.extensions:
            if t == ext_type:
                return body
        return None

    @property
    def sni(self) -> str | None:
        body = self.ext(EXT_SNI)
        if body is None:
            return None
        try:
            r = _Reader(_Reader(body).vec(2))
            while r.pos < len(r.data):
                kind, name = r.u8(), r.vec(2)
                if kind == 0:
                    return name.decode("ascii", "replace").lower().rstrip(".")
        except ValueError:
            return None
        return None

    @property
    def alpn(self) -> list[str]:
        body = self.ext(EXT_ALPN)
        out: list[str] = []
        if body is None:
            return out
        try:
            r = _Reader(_Reader(body).vec(2))
            while r.pos < len(r.data):
                out.append(r.vec(1).decode("ascii", "replace"))
        except ValueError:
            pass
        return out

    def _u16_ext(self, ext_type: int, size_len: int = 2) -> list[int]:
        body = self.ext(ext_type)
        if body is None:
            return []
        try:
            return _u16_list(_Reader(body).vec(size_len))
        except ValueError:
            return []

    @property
    def supported_groups(self) -> list[int]:
        return self._u16_ext(EXT_GROUPS)

    @property
    def signature_algorithms(self) -> list[int]:
        return self._u16_ext(EXT_SIG_ALGS)

    @property
    def supported_versions(self) -> list[int]:
        return self._u16_ext(EXT_SUPPORTED_VERSIONS, 1)

    @property
    def ec_point_formats(self) -> list[int]:
        body = self.ext(EXT_POINT_FORMATS)
        try:
            return list(_Reader(body).vec(1)) if body is not None else []
        except ValueError:
            return []

    @property
    def key_share_groups(self) -> list[int]:
        body = self.ext(EXT_KEY_SHARE)
        out: list[int] = []
        if body is None:
            return out
        try:
            r = _Reader(_Reader(body).vec(2))
            while r.pos < len(r.data):
                out.append(r.u16())
                r.vec(2)
        except ValueError:
            pass
        return out


def parse_client_hello_message(msg: bytes) -> ClientHello | None:
    """A ClientHello from its handshake message (type, 3-byte length, body)."""
    if len(msg) < 4 or msg[0] != CLIENT_HELLO:
        return None
    length = int.from_bytes(msg[1:4], "big")
    if len(msg) < 4 + length:
        return None
    try:
        r = _Reader(msg[4:4 + length])
        version = r.u16()
        rnd = r.take(32)
        sid = r.vec(1)
        ciphers = _u16_list(r.vec(2))
        comp = r.vec(1)
        exts: list[tuple[int, bytes]] = []
        if r.pos < len(r.data):
            exts, whole = _extensions(r.vec(2))
            if not whole:
                return None
    except ValueError:
        return None
    return ClientHello(version, rnd, sid, ciphers, comp, exts)


def parse_client_hello_prefix(msg: bytes) -> ClientHello | None:
    """The ClientHello fields that a cut-off handshake message holds whole.

    ``msg`` starts with the handshake header (type, 3-byte length) but may end
    anywhere. The fixed fields up to the extensions must all be there; of the
    extensions, those wholly inside ``msg`` are kept and the one cut off is
    dropped. This is what a parser that reads one packet, or one record, and
    does not wait for the rest sees (a censor without TCP or TLS reassembly,
    Wu et al., IEEE S&P 2025, §4.3). None if the fixed fields are cut off or
    this is no ClientHello.
    """
    if len(msg) < 4 or msg[0] != CLIENT_HELLO:
        return None
    body = msg[4:4 + int.from_bytes(msg[1:4], "big")]
    try:
        r = _Reader(body)
        version = r.u16()
        rnd = r.take(32)
        sid = r.vec(1)
        ciphers = _u16_list(r.vec(2))
        comp = r.vec(1)
    except ValueError:
        return None
    exts: list[tuple[int, bytes]] = []
    if r.pos + 2 <= len(body):
        declared = struct.unpack_from("!H", body, r.pos)[0]
        exts, _ = _extensions(body[r.pos + 2:r.pos + 2 + declared])  # less the one cut
    return ClientHello(version, rnd, sid, ciphers, comp, exts)


def parse_client_hello(stream: bytes) -> ClientHello | None:
    """The ClientHello at the start of a client→server TCP stream.

    Raises NeedMore while `stream` is a valid but incomplete prefix.
    """
    handshake = bytearray()
    pos = 0
    record_version = None
    while True:
        if len(stream) < pos + 5:
            if len(stream) == pos and len(handshake) >= 4:
                break  # a complete record boundary; decide below
            if len(stream) > pos and stream[pos] != HANDSHAKE:
                return None
            raise NeedMore
        ctype, ver, rlen = stream[pos], struct.unpack_from("!H", stream, pos + 1)[0], \
            struct.unpack_from("!H", stream, pos + 3)[0]
        if ctype != HANDSHAKE or ver >> 8 != 0x03 or rlen == 0 or rlen > 1 << 14:
            return None
        record_version = record_version or ver
        if len(stream) < pos + 5 + rlen:
            if not handshake and len(stream) >= pos + 6 and stream[pos + 5] != CLIENT_HELLO:
                return None
            raise NeedMore
        handshake += stream[pos + 5:pos + 5 + rlen]
        pos += 5 + rlen
        if handshake[0] != CLIENT_HELLO:
            return None
        if len(handshake) >= 4:
            need = 4 + int.from_bytes(handshake[1:4], "big")
            if need > MAX_HELLO:
                return None
            if len(handshake) >= need:
                break
    need = 4 + int.from_bytes(handshake[1:4], "big")
    if len(handshake) < need:
        raise NeedMore
    hello = parse_client_hello_message(bytes(handshake[:need]))
    if hello is not None:
        hello.record_version = record_version
    return hello


# -- fingerprints ------------------------------------------------------------------------


def ja3_string(hello: Any) -> str:
    """SSLVersion,Ciphers,Extensions,EllipticCurves,ECPointFormats (decimal, GREASE removed).

    Works on any hello with ``legacy_version``, ``ciphers``, ``extensions``,
    ``supported_groups`` and ``ec_point_formats`` (a DTLS hello too).
    """
    def join(xs: list[int]) -> str:
        return "-".join(str(x) for x in xs if not is_grease(x))

    return ",".join([str(hello.legacy_version), join(hello.ciphers),
                     join([t for t, _ in hello.extensions]), join(hello.supported_groups),
                     "-".join(str(x) for x in hello.ec_point_formats)])


def ja3(hello: Any) -> str:
    return hashlib.md5(ja3_string(hello).encode(), usedforsecurity=False).hexdigest()


_JA4_VERSIONS = {0x0304: "13", 0x0303: "12", 0x0302: "11", 0x0301: "10", 0x0300: "s3",
                 0x0002: "s2", 0xFEFF: "d1", 0xFEFD: "d2", 0xFEFC: "d3"}


def _sha12(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12] if text else "000000000000"


def ja4(hello: Any, transport: str = "t") -> str:
    """JA4 (FoxIO technical_details/JA4.md): ``a_b_c``.

    a: transport (t/q/d), highest non-GREASE supported_versions (else the
    legacy version), d/i for SNI present or not, cipher and extension counts
    (2 digits, GREASE excluded), first and last character of the first ALPN
    value ("00" without one). b: sha256 of the sorted cipher hex list. c:
    sha256 of the sorted extension hex list without SNI and ALPN, "_", and
    the signature algorithms in wire order. Sorting is why Chrome's
    extension-order randomisation changes JA3 but not JA4.
    """
    versions = [v for v in getattr(hello, "supported_versions", []) if not is_grease(v)]
    version = max(versions) if versions else hello.legacy_version
    ver = _JA4_VERSIONS.get(version, "00")
    ciphers = [c for c in hello.ciphers if not is_grease(c)]
    ext_types = [t for t, _ in hello.extensions if not is_grease(t)]
    sni_flag = "d" if EXT_SNI in ext_types else "i"
    alpn_list = list(getattr(hello, "alpn", []) or [])
    if alpn_list and alpn_list[0]:
        first = alpn_list[0]
        alpn = first[0] + first[-1]
        if not (alpn.isascii() and alpn.isalnum()):
            raw = first.encode("latin-1", "replace")
            alpn = f"{raw[0]:02x}"[0] + f"{raw[-1]:02x}"[1]
    else:
        alpn = "00"
    a = (f"{transport}{ver}{sni_flag}{min(len(ciphers), 99):02d}"
         f"{min(len(ext_types), 99):02d}{alpn}")
    b = _sha12(",".join(f"{c:04x}" for c in sorted(ciphers)))
    ext_c = sorted(t for t in ext_types if t not in (EXT_SNI, EXT_ALPN))
    sigs = [s for s in getattr(hello, "signature_algorithms", []) if not is_grease(s)]
    c_text = ",".join(f"{t:04x}" for t in ext_c)
    if sigs:
        c_text += "_" + ",".join(f"{s:04x}" for s in sigs)
    c = _sha12(c_text) if ext_c else "000000000000"
    return f"{a}_{b}_{c}"
