"""DTLS records and hellos built byte by byte: pion's (from pion/dtls's marshalling
code), browser-like ones, and the pieces they are made of. Shared by the DTLS detector
tests and the TSPU profile tests (docs/censors/fingerprints.md §2)."""

from __future__ import annotations

from censor_sim.detectors import dtls


def u16(v: int) -> bytes:
    return v.to_bytes(2, "big")


def ext(etype: int, data: bytes) -> bytes:
    return u16(etype) + u16(len(data)) + data


def vec16(values, prefix: int = 2) -> bytes:
    body = b"".join(u16(v) for v in values)
    return len(body).to_bytes(prefix, "big") + body


def handshake(msg_type: int, body: bytes, seq: int = 0, frag_off: int = 0,
              frag: bytes | None = None, total: int | None = None) -> bytes:
    frag = body if frag is None else frag
    total = len(body) if total is None else total
    return (bytes([msg_type]) + total.to_bytes(3, "big") + u16(seq)
            + frag_off.to_bytes(3, "big") + len(frag).to_bytes(3, "big") + frag)


def record(ctype: int, body: bytes, version: int = dtls.DTLS_1_2, epoch: int = 0,
           seq: int = 0) -> bytes:
    header = bytes([ctype]) + u16(version) + u16(epoch) + seq.to_bytes(6, "big")
    return header + u16(len(body)) + body


def client_hello_body(ciphers, extensions: list[bytes] | None, *, version=dtls.DTLS_1_2,
                      random=b"\x11" * 32, session_id=b"", cookie=b"",
                      compression=b"\x00") -> bytes:
    out = (u16(version) + random + bytes([len(session_id)]) + session_id
           + bytes([len(cookie)]) + cookie + vec16(ciphers)
           + bytes([len(compression)]) + compression)
    if extensions is not None:
        block = b"".join(extensions)
        out += u16(len(block)) + block
    return out


def server_hello_body(cipher: int, extensions: list[bytes], *, version=dtls.DTLS_1_2,
                      random=b"\x22" * 32, session_id=b"") -> bytes:
    block = b"".join(extensions)
    return (u16(version) + random + bytes([len(session_id)]) + session_id + u16(cipher) + b"\x00"
            + u16(len(block)) + block)


# pion/dtls signature schemes (pkg/crypto/signaturehash Algorithms(): hash byte, sig byte):
# ECDSA-SHA256/384/512, RSA-SHA256/384/512, Ed25519 -> 7 entries, 20-byte extension.
PION_SIGALGS = [0x0403, 0x0503, 0x0603, 0x0401, 0x0501, 0x0601, 0x0807]
# pion/dtls v2.1-v2.2 defaultCipherSuites(): ECDHE-ECDSA/RSA AES128-GCM, AES256-CBC, AES256-GCM.
PION_CIPHERS = [0xC02B, 0xC02F, 0xC00A, 0xC014, 0xC02C, 0xC030]
# pion/webrtc's default SRTP profiles: AEAD_AES_128_GCM, AES128_CM_HMAC_SHA1_80.
PION_SRTP = [0x0007, 0x0001]


def use_srtp(profiles) -> bytes:
    return ext(dtls.EXT_USE_SRTP, vec16(profiles) + b"\x00")  # + empty MKI


def groups(curves) -> bytes:
    return ext(dtls.EXT_SUPPORTED_GROUPS, vec16(curves))


RENEGOTIATION_INFO = ext(dtls.EXT_RENEGOTIATION_INFO, b"\x00")
EMS = ext(dtls.EXT_EXTENDED_MASTER_SECRET, b"")
POINT_FORMATS = ext(dtls.EXT_EC_POINT_FORMATS, b"\x01\x00")


def pion_client_hello(cookie: bytes = b"", curves=dtls.PION_CURVES) -> bytes:
    """pion/dtls v2.1.x flight1Generate / flight3Generate, as used by pion/webrtc.

    Extension order: signature_algorithms, renegotiation_info, supported_groups,
    ec_point_formats, use_srtp, extended_master_secret (no SNI or ALPN in WebRTC).
    """
    exts = [ext(dtls.EXT_SIGNATURE_ALGORITHMS, vec16(PION_SIGALGS)), RENEGOTIATION_INFO,
            groups(curves), POINT_FORMATS, use_srtp(PION_SRTP), EMS]
    body = client_hello_body(PION_CIPHERS, exts, cookie=cookie)
    return record(dtls.CT_HANDSHAKE, handshake(dtls.HT_CLIENT_HELLO, body, seq=1 if cookie else 0))


def pion_server_hello(with_groups: bool = True) -> bytes:
    """pion/dtls < v2.0.12 flight4Generate answering a browser (which offers SRTP and EMS).

    Extensions: renegotiation_info, extended_master_secret, use_srtp (one profile),
    then, for a certificate cipher suite, supported_groups and ec_point_formats —
    the supported_groups that pion/dtls#410 removed. The rest of the flight
    (Certificate, ...) follows in the same datagram; one stand-in record shows it.
    """
    exts = [RENEGOTIATION_INFO, EMS, use_srtp([0x0007])]
    if with_groups:
        exts += [groups(dtls.PION_CURVES), POINT_FORMATS]
    else:
        exts += [POINT_FORMATS]
    hello = record(dtls.CT_HANDSHAKE, handshake(dtls.HT_SERVER_HELLO,
                                                server_hello_body(0xC02B, exts), seq=1), seq=1)
    cert = record(dtls.CT_HANDSHAKE, handshake(11, b"\x00\x00\x03\x00\x00\x00", seq=2), seq=2)
    return hello + cert


def chrome_like_client_hello(record_version: int = dtls.DTLS_1_0) -> bytes:
    """Browser-like (Chrome/BoringSSL WebRTC) DTLS 1.2 ClientHello, synthesized.

    The first ClientHello goes in a DTLS 1.0 record (as OpenSSL's does too, see the
    real-peer test); 12 suites; extensions EMS, renegotiation_info, supported_groups
    (the same three curves as pion!), ec_point_formats, signature_algorithms, use_srtp.
    """
    ciphers = [0xC02B, 0xC02F, 0xCCA9, 0xCCA8, 0xC009, 0xC013, 0xC00A, 0xC014, 0x009C,
               0x009D, 0x002F, 0x0035]
    return _ems_first_client_hello(ciphers, record_version)


def _ems_first_client_hello(ciphers, record_version: int) -> bytes:
    sigalgs = [0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601]
    exts = [EMS, RENEGOTIATION_INFO, groups(dtls.PION_CURVES), POINT_FORMATS,
            ext(dtls.EXT_SIGNATURE_ALGORITHMS, vec16(sigalgs)),
            use_srtp([0x0007, 0x0008, 0x0001])]
    return record(dtls.CT_HANDSHAKE, handshake(dtls.HT_CLIENT_HELLO,
                                               client_hello_body(ciphers, exts)), record_version)


def colliding_client_hello(record_version: int = dtls.DTLS_1_0) -> bytes:
    """Not pion, yet pion's curves at pion's offset: 14 suites (+16 bytes) and only
    EMS + renegotiation_info (9 bytes, 16 fewer than pion's 25) before supported_groups."""
    ciphers = [0xC02B, 0xC02F, 0xC02C, 0xC030, 0xCCA9, 0xCCA8, 0xC009, 0xC013, 0xC00A,
               0xC014, 0x009C, 0x009D, 0x002F, 0x0035]
    return _ems_first_client_hello(ciphers, record_version)


def firefox_like_client_hello(record_version: int = dtls.DTLS_1_0) -> bytes:
    """Browser-like (Firefox/NSS WebRTC) DTLS 1.2 ClientHello, synthesized: 16 suites (with
    DHE), six groups, ALPN "webrtc"/"c-webrtc"."""
    ciphers = [0xC02B, 0xC02F, 0xCCA9, 0xCCA8, 0xC02C, 0xC030, 0xC00A, 0xC009, 0xC013,
               0xC014, 0x0033, 0x0039, 0x009C, 0x009D, 0x002F, 0x0035]
    alpn = b"".join(bytes([len(p)]) + p for p in (b"webrtc", b"c-webrtc"))
    exts = [EMS, RENEGOTIATION_INFO,
            groups([0x001D, 0x0017, 0x0018, 0x0019, 0x0100, 0x0101]), POINT_FORMATS,
            ext(dtls.EXT_ALPN, u16(len(alpn)) + alpn),
            use_srtp([0x0007, 0x0008, 0x0001, 0x0002]),
            ext(dtls.EXT_SIGNATURE_ALGORITHMS, vec16([0x0403, 0x0503, 0x0603, 0x0804, 0x0401]))]
    return record(dtls.CT_HANDSHAKE, handshake(dtls.HT_CLIENT_HELLO,
                                               client_hello_body(ciphers, exts)), record_version)


def chrome_like_server_hello() -> bytes:
    """Browser-like ServerHello (BoringSSL as DTLS server): no supported_groups."""
    exts = [EMS, RENEGOTIATION_INFO, POINT_FORMATS, use_srtp([0x0007])]
    return record(dtls.CT_HANDSHAKE, handshake(dtls.HT_SERVER_HELLO,
                                               server_hello_body(0xC02B, exts), seq=1))


def hello_verify_request(cookie: bytes, version: int = dtls.DTLS_1_0) -> bytes:
    body = u16(version) + bytes([len(cookie)]) + cookie
    return record(dtls.CT_HANDSHAKE, handshake(dtls.HT_HELLO_VERIFY_REQUEST, body), version)


PION_GROUP_BYTES = bytes.fromhex("001d00170018")
