"""DTLS parsing and Russia's pion/dtls rules (docs/censors/fingerprints.md §2).

The pion fixtures are synthesized from pion/dtls's own marshalling code (the layouts are
spelled out next to each builder), the browser ones from what Chrome (BoringSSL) and
Firefox (NSS) put in a WebRTC DTLS 1.2 ClientHello. Every offset the Russian rules name
is checked against the byte layout before a rule is tested, so a wrong fixture fails
loudly instead of making a rule look right. A real OpenSSL ClientHello (and the second
one it sends after our HelloVerifyRequest) is the "real peer" vector.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.detectors import dtls
from tests.support.dtls_vectors import (
    PION_CIPHERS,
    PION_GROUP_BYTES,
    PION_SIGALGS,
    chrome_like_client_hello,
    chrome_like_server_hello,
    client_hello_body,
    colliding_client_hello,
    ext,
    firefox_like_client_hello,
    groups,
    handshake,
    hello_verify_request,
    pion_client_hello,
    pion_server_hello,
    record,
    server_hello_body,
    u16,
    vec16,
)

# ------------------------------------------------------------------ layout (offsets)


def test_pion_server_hello_layout_puts_1d_at_0x5a():
    """The 2021 rule's 0x5A is an offset in the UDP payload (pion/dtls#409).

    13 (record) + 12 (handshake) = 0x19 body; +2 version +32 random = 0x3B session_id
    length; 0x3C cipher; 0x3E compression; 0x3F extensions length; 0x41
    renegotiation_info (5); 0x46 extended_master_secret (4); 0x4A use_srtp (9);
    0x53 supported_groups; 0x59 the list ``00 1D 00 17 00 18``: ``1D`` at 0x5A.
    """
    p = pion_server_hello()
    sh = dtls.parse_server_hello(p)
    assert sh is not None
    assert sh.offset == 0x0D
    assert [hex(o) for o in sh.extension_offsets] == ["0x41", "0x46", "0x4a", "0x53", "0x5f"]
    assert sh.extension_offset(dtls.EXT_SUPPORTED_GROUPS) == 0x53
    assert sh.supported_groups_offset == 0x59
    assert p[0x59:0x5F] == PION_GROUP_BYTES
    assert p[0x5A:0x5F] == bytes.fromhex("1d00170018")


def test_pion_client_hello_layout_puts_curves_at_0x6e():
    """pion/dtls#474's 0x6E: 0x19 body; 0x3B session_id len; 0x3C cookie len;
    0x3D cipher_suites len + 12; 0x4B compression; 0x4D extensions len; 0x4F
    signature_algorithms (20); 0x63 renegotiation_info (5); 0x68 supported_groups;
    0x6E its list."""
    p = pion_client_hello()
    ch = dtls.parse_client_hello(p)
    assert ch is not None
    assert ch.extension_offsets[:3] == [0x4F, 0x63, 0x68]
    assert ch.supported_groups_offset == 0x6E
    assert p[0x6E:0x74] == PION_GROUP_BYTES
    # The second ClientHello echoes pion's 20-byte cookie: everything moves by 20.
    ch2 = dtls.parse_client_hello(pion_client_hello(cookie=b"\xaa" * 20))
    assert ch2 is not None and ch2.cookie == b"\xaa" * 20
    assert ch2.extension_offset(dtls.EXT_SUPPORTED_GROUPS) == 0x7C
    assert ch2.supported_groups_offset == 0x82


@pytest.mark.parametrize("build", [chrome_like_client_hello, firefox_like_client_hello])
def test_browser_client_hellos_put_their_groups_elsewhere(build):
    ch = dtls.parse_client_hello(build())
    assert ch is not None
    assert ch.supported_groups[:3] == list(dtls.PION_CURVES)  # same curves as pion...
    assert ch.supported_groups_offset not in (0x59, 0x6E)  # ...at other offsets
    assert ch.extension_offset(dtls.EXT_SUPPORTED_GROUPS) not in dtls.RU_2024_OFFSETS


# ------------------------------------------------------------------------------ rules


def test_ru_2021_blocks_pion_server_hello_only():
    assert dtls.ru_2021_serverhello(pion_server_hello())
    assert not dtls.ru_2021_serverhello(pion_server_hello(with_groups=False))  # v2.0.12 fix
    assert not dtls.ru_2021_serverhello(chrome_like_server_hello())
    for build in (chrome_like_client_hello, firefox_like_client_hello):
        assert not dtls.ru_2021_serverhello(build())
        assert not dtls.ru_2021_serverhello(build(dtls.DTLS_1_2))


def test_ru_2021_is_a_byte_rule():
    """The DPI compares bytes: the same payload shifted by one byte escapes it."""
    p = pion_server_hello()
    assert not dtls.ru_2021_serverhello(p[:0x59] + b"\x00" + p[0x59:])
    assert not dtls.ru_2021_serverhello(b"\x16\xfe\xff" + p[3:])  # DTLS 1.0 record magic


def test_ru_2022_blocks_pion_client_hello_only():
    assert dtls.ru_2022_clienthello(pion_client_hello())
    assert dtls.ru_2022_clienthello(pion_server_hello())  # 0x59: the old ServerHello spot
    # Fixes that were deployed: reorder the curves (livekit#1568, broadcast-box#82).
    assert not dtls.ru_2022_clienthello(
        pion_client_hello(curves=(dtls.X25519, dtls.SECP384R1, dtls.SECP256R1)))
    # The second ClientHello (20-byte cookie) has its curves at 0x82: not caught.
    assert not dtls.ru_2022_clienthello(pion_client_hello(cookie=b"\xaa" * 20))
    for build in (chrome_like_client_hello, firefox_like_client_hello):
        assert not dtls.ru_2022_clienthello(build())
        assert not dtls.ru_2022_clienthello(build(dtls.DTLS_1_2))  # offset alone saves it
    assert not dtls.ru_2022_clienthello(chrome_like_server_hello())


def test_ru_2024_supported_groups_offset():
    assert dtls.ru_2024_supported_groups_offset(pion_client_hello())
    assert dtls.ru_2024_supported_groups_offset(pion_client_hello(cookie=b"\xaa" * 20))
    reordered = pion_client_hello(curves=(dtls.X25519, dtls.SECP384R1, dtls.SECP256R1))
    assert not dtls.ru_2024_supported_groups_offset(reordered)
    assert dtls.ru_2024_supported_groups_offset(reordered, groups=None)  # position only
    for build in (chrome_like_client_hello, firefox_like_client_hello):
        assert not dtls.ru_2024_supported_groups_offset(build(dtls.DTLS_1_2))
    chrome = chrome_like_client_hello()
    assert dtls.ru_2024_supported_groups_offset(chrome, offsets=None)  # same curve list
    off = dtls.parse_client_hello(chrome).extension_offset(dtls.EXT_SUPPORTED_GROUPS)
    assert dtls.ru_2024_supported_groups_offset(chrome, offsets=[off])
    assert not dtls.ru_2024_supported_groups_offset(pion_server_hello())
    assert not dtls.ru_2024_supported_groups_offset(b"")


def test_fixed_offset_rules_collide_with_a_non_pion_layout():
    """Collateral damage of byte rules: a non-pion hello with the same curves at 0x6E is
    caught whenever its record says FE FD. Browsers' and OpenSSL's first ClientHello use a
    DTLS 1.0 (FE FF) record, which is what spares them from the ``16 FE FD`` magic."""
    p = colliding_client_hello(dtls.DTLS_1_2)
    assert dtls.parse_client_hello(p).supported_groups_offset == 0x6E
    assert dtls.ru_2022_clienthello(p)
    assert dtls.ru_2024_supported_groups_offset(p)  # parsed, but same place, same list
    assert not dtls.ru_2022_clienthello(colliding_client_hello())
    assert dtls.ru_2024_supported_groups_offset(colliding_client_hello())  # no magic in 2024


def test_is_dtls_handshake():
    for p in (pion_client_hello(), pion_server_hello(), chrome_like_client_hello(),
              hello_verify_request(b"c" * 20)):
        assert dtls.is_dtls_handshake(p)
    assert not dtls.is_dtls_handshake(b"")
    assert not dtls.is_dtls_handshake(record(dtls.CT_APPLICATION_DATA, b"x" * 40, epoch=1))
    assert not dtls.is_dtls_handshake(pion_client_hello()[:-1])  # truncated record
    assert not dtls.is_dtls_handshake(pion_client_hello() + b"\x00")  # trailing garbage
    assert not dtls.is_dtls_handshake(b"\x16\x03\x01\x00\x05hello")  # TLS, not DTLS
    stun = bytes.fromhex("000100002112a442") + os.urandom(12)
    assert not dtls.is_dtls_handshake(stun)


# ---------------------------------------------------------------------------- parsing


def test_client_hello_fields_and_tls_style_views():
    ch = dtls.parse_client_hello(pion_client_hello())
    assert ch.legacy_version == dtls.DTLS_1_2 and ch.record_version == dtls.DTLS_1_2
    assert ch.ciphers == PION_CIPHERS
    assert [t for t, _ in ch.extensions] == [13, 0xFF01, 10, 11, 14, 23]
    assert ch.signature_algorithms == PION_SIGALGS
    assert ch.supported_groups == list(dtls.PION_CURVES)
    assert ch.ec_point_formats == [0]
    assert ch.sni is None and ch.alpn == [] and ch.supported_versions == []
    assert ch.compression_methods == b"\x00" and ch.session_id == b"" and ch.cookie == b""
    assert not ch.truncated
    ff = dtls.parse_client_hello(firefox_like_client_hello())
    assert ff.alpn == ["webrtc", "c-webrtc"] and ff.record_version == dtls.DTLS_1_0


def test_sni_and_supported_versions():
    host = b"198.51.100.7"  # pion/dtls#406: pion once sent the peer's IP address as SNI
    sni = ext(dtls.EXT_SERVER_NAME, u16(len(host) + 3) + b"\x00" + u16(len(host)) + host)
    sv = ext(dtls.EXT_SUPPORTED_VERSIONS, b"\x04\xfe\xfc\xfe\xfd")  # DTLS 1.3, 1.2
    p = record(dtls.CT_HANDSHAKE, handshake(1, client_hello_body([0x1301], [sni, sv])))
    ch = dtls.parse_client_hello(p)
    assert ch.sni == "198.51.100.7" and ch.supported_versions == [0xFEFC, 0xFEFD]
    bad = ext(dtls.EXT_SERVER_NAME, b"\x00\x09\x00\x00\x20abc")  # name overruns
    ch = dtls.parse_client_hello(record(22, handshake(1, client_hello_body([1], [bad]))))
    assert ch is not None and ch.sni is None


def test_hello_verify_request_and_records():
    p = hello_verify_request(b"\x01" * 20) + pion_client_hello()
    recs = dtls.parse_records(p)
    assert [r.offset for r in recs] == [0, 13 + 12 + 23]
    hvr = dtls.parse_hello_verify_request(p)
    assert hvr.cookie == b"\x01" * 20 and hvr.server_version == dtls.DTLS_1_0 and hvr.offset == 13
    assert dtls.parse_client_hello(p).offset == recs[1].offset + 13
    assert dtls.parse_hello_verify_request(pion_client_hello()) is None


def test_no_extensions_block():
    p = record(22, handshake(1, client_hello_body([0xC02B], None)))
    ch = dtls.parse_client_hello(p)
    assert ch.extensions == [] and not ch.truncated and ch.supported_groups_offset is None


def test_first_fragment_parses_truncated_later_fragment_does_not():
    """RFC 6347 §4.2.3 fragments; no reassembly (the rules see one datagram)."""
    full = pion_client_hello()
    body = full[25:]
    cut = 0x6A - 25  # first fragment ends inside supported_groups
    frag1 = record(22, handshake(1, body, frag=body[:cut]))
    frag2 = record(22, handshake(1, body, frag_off=cut, frag=body[cut:]), seq=1)
    ch = dtls.parse_client_hello(frag1)
    assert ch is not None and ch.truncated
    assert ch.ciphers == PION_CIPHERS
    assert [t for t, _ in ch.extensions] == [13, 0xFF01]  # the ones that fit
    assert ch.supported_groups_offset is None
    assert dtls.parse_client_hello(frag2) is None
    msgs = dtls.parse_handshake_messages(frag2)
    assert msgs[0].fragment_offset == cut and not msgs[0].is_first_fragment
    # The fragment ends at 0x6A: the curves the 2022 rule wants at 0x6E are not in it.
    assert not dtls.ru_2022_clienthello(frag1)
    # A fragment whose extents exceed the message length is malformed.
    assert dtls.parse_handshake_messages(record(22, handshake(1, b"ab", frag_off=5))) is None


def test_dtls13_datagram_with_unified_header_record():
    """RFC 9147: plaintext ServerHello then encrypted records (unified header) in one datagram."""
    sv = ext(dtls.EXT_SUPPORTED_VERSIONS, b"\xfe\xfc")
    sh = record(22, handshake(2, server_hello_body(0x1301, [sv])))
    unified_len = bytes([0x2E]) + u16(7) + u16(5) + b"\x99" * 5  # 001 0 1 1 10: seq16, L
    unified_cid = bytes([0x3A]) + b"\x00\x01" + b"\x42" * 30  # C bit: rest is opaque
    recs = dtls.parse_records(sh + unified_len + unified_cid)
    assert [r.unified for r in recs] == [False, True, True]
    assert recs[1].epoch == 2 and recs[1].sequence_number == 7 and recs[1].fragment == b"\x99" * 5
    shp = dtls.parse_server_hello(sh + unified_len)
    assert shp.supported_versions == [0xFEFC]
    assert dtls.parse_records(sh + bytes([0x2E]) + u16(7) + u16(50)) is None  # L overruns


@pytest.mark.parametrize("bad", [
    b"", b"\x16", b"\x16\xfe\xfd", b"\x17\xfe\xfd" + b"\x00" * 8 + b"\x00\x10",
    b"\x63\xfe\xfd" + b"\x00" * 10,  # unknown content type
    b"\x16\x03\x03" + b"\x00" * 10,  # TLS record version
])
def test_malformed_records(bad):
    assert dtls.parse_records(bad) is None
    assert dtls.parse_client_hello(bad) is None
    assert not dtls.is_dtls_handshake(bad)


def test_malformed_hellos_return_none():
    p = bytearray(pion_client_hello())
    p[0x3B] = 33  # session_id longer than 32
    assert dtls.parse_client_hello(bytes(p)) is None
    p = bytearray(pion_client_hello())
    p[0x3E] = 0x0D  # odd cipher_suites length
    assert dtls.parse_client_hello(bytes(p)) is None
    p = bytearray(pion_client_hello())
    p[0x4E] += 1  # extensions length says one more byte than the body has
    assert dtls.parse_client_hello(bytes(p)) is None
    body = client_hello_body([0xC02B], [ext(10, b"\x00\x02\x00\x1d")])
    assert dtls.parse_client_hello(record(22, handshake(1, body + b"\x00"))) is None


# --------------------------------------------------------------------------- property


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_never_raise(data):
    for p in (data, dtls.DTLS_HANDSHAKE_MAGIC + data):
        dtls.parse_records(p)
        dtls.parse_handshake_messages(p)
        for parse in (dtls.parse_client_hello, dtls.parse_server_hello,
                      dtls.parse_hello_verify_request):
            parse(p)
        for rule in (dtls.is_dtls_handshake, dtls.ru_2021_serverhello,
                     dtls.ru_2022_clienthello, dtls.ru_2024_supported_groups_offset):
            assert isinstance(rule(p), bool)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([pion_client_hello(), pion_server_hello(), firefox_like_client_hello()]),
       st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4),
       st.integers(0, 400))
def test_fuzz_mutated_hellos_never_raise(base, flips, cut):
    p = bytearray(base)
    for i, v in flips:
        if i < len(p):
            p[i] = v
    p = bytes(p[:cut])
    ch = dtls.parse_client_hello(p)
    if ch is not None:
        for (t, _), off in zip(ch.extensions, ch.extension_offsets, strict=True):
            assert p[off : off + 2] == u16(t)
        _ = (ch.sni, ch.alpn, ch.supported_groups, ch.ec_point_formats,
             ch.signature_algorithms, ch.supported_versions, ch.supported_groups_offset)
    sh = dtls.parse_server_hello(p)
    if sh is not None:
        _ = (sh.supported_groups, sh.supported_versions, sh.sni, sh.alpn)
    dtls.ru_2024_supported_groups_offset(p)


_ext = st.tuples(st.integers(0, 0xFFFF).filter(lambda t: t != 10), st.binary(max_size=20))


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.binary(max_size=32), st.binary(max_size=40),
       st.lists(st.integers(0, 0xFFFF), min_size=1, max_size=20),
       st.lists(_ext, max_size=6), st.lists(st.integers(0, 0xFFFF), max_size=8),
       st.integers(0, 6), st.binary(max_size=30))
def test_roundtrip_client_hello(random, sid, cookie, ciphers, exts, curves, at, prefix_cookie):
    """Any well-formed ClientHello parses back; every offset points at its extension."""
    wire = [ext(t, d) for t, d in exts]
    wire.insert(min(at, len(wire)), groups(curves))
    hvr = hello_verify_request(prefix_cookie)  # a record before it shifts every offset
    p = hvr + record(22, handshake(1, client_hello_body(ciphers, wire, random=random,
                                                        session_id=sid, cookie=cookie)))
    ch = dtls.parse_client_hello(p)
    assert ch is not None
    assert (ch.random, ch.session_id, ch.cookie, ch.ciphers) == (random, sid, cookie, ciphers)
    assert ch.supported_groups == curves
    assert len(ch.extensions) == len(wire)
    for (t, d), off in zip(ch.extensions, ch.extension_offsets, strict=True):
        assert p[off : off + 4 + len(d)] == ext(t, d)
    g = ch.supported_groups_offset
    if curves:
        assert p[g : g + 2 * len(curves)] == vec16(curves)[2:]


# -------------------------------------------------------------------- real peer (openssl)


def _openssl_has_dtls() -> bool:
    exe = shutil.which("openssl")
    if exe is None:
        return False
    out = subprocess.run([exe, "s_client", "-help"], capture_output=True, text=True, timeout=10)
    return "-dtls1_2" in out.stdout + out.stderr


@pytest.mark.skipif(not _openssl_has_dtls(), reason="openssl without DTLS 1.2 support")
def test_real_openssl_client_hellos_parse():
    """``openssl s_client -dtls1_2`` against a loopback UDP socket that answers its first
    ClientHello with a HelloVerifyRequest: both ClientHellos must parse, the second with
    our cookie, and neither is pion (the Russian rules stay quiet)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    port = sock.getsockname()[1]
    proc = subprocess.Popen(["openssl", "s_client", "-dtls1_2", "-connect", f"127.0.0.1:{port}"],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        first, addr = sock.recvfrom(65535)
        cookie = bytes(range(1, 21))
        sock.sendto(hello_verify_request(cookie), addr)
        second, _ = sock.recvfrom(65535)
    finally:
        proc.kill()
        proc.wait()
        sock.close()
    ch1, ch2 = dtls.parse_client_hello(first), dtls.parse_client_hello(second)
    assert ch1 is not None and ch2 is not None
    assert dtls.is_dtls_handshake(first) and dtls.is_dtls_handshake(second)
    assert ch1.legacy_version == dtls.DTLS_1_2 and not ch1.truncated
    assert ch1.cookie == b"" and ch2.cookie == cookie and ch2.random == ch1.random
    assert ch2.message_seq == 1
    assert dtls.EXT_SUPPORTED_GROUPS in [t for t, _ in ch1.extensions]
    for (t, _), off in zip(ch2.extensions, ch2.extension_offsets, strict=True):
        assert second[off : off + 2] == u16(t)
    for p in (first, second):
        assert not dtls.ru_2022_clienthello(p)
        assert not dtls.ru_2024_supported_groups_offset(p)
