"""ClientHello parsing on real hellos (Python's ssl), JA3/JA4 on a published vector."""

from __future__ import annotations

import functools
import random
import ssl
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptcommon import tlshello
from ptcommon.tlshello import NeedMore


def real_hello(sni: str | None = "www.example.lab", alpn=("h2", "http/1.1")) -> bytes:
    ctx = ssl.create_default_context()
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    out = ssl.MemoryBIO()
    obj = ctx.wrap_bio(ssl.MemoryBIO(), out, server_hostname=sni)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


def test_real_hello_fields():
    h = tlshello.parse_client_hello(real_hello())
    assert h is not None and h.sni == "www.example.lab" and h.alpn == ["h2", "http/1.1"]
    assert 0x0304 in h.supported_versions and h.record_version >> 8 == 3
    assert h.supported_groups and h.signature_algorithms and h.key_share_groups
    assert tlshello.ja4(h).startswith("t13d") and tlshello.ja4(h)[8:10] == "h2"


def test_every_split_needs_more_then_parses_the_same():
    data = real_hello()
    want = tlshello.parse_client_hello(data)
    for cut in range(1, len(data)):
        with pytest.raises(NeedMore):
            tlshello.parse_client_hello(data[:cut])
    assert tlshello.parse_client_hello(data + b"\x17\x03\x03\x00\x01x").sni == want.sni


def test_hello_split_over_two_records():
    data = real_hello()
    msg = data[5:]
    two = (b"\x16\x03\x01" + struct.pack("!H", 40) + msg[:40]
           + b"\x16\x03\x01" + struct.pack("!H", len(msg) - 40) + msg[40:])
    assert tlshello.parse_client_hello(two).sni == "www.example.lab"


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\n\r\n", b"\x17\x03\x03\x00\x05hello",
                                  b"\x16\x03\x03\x00\x04\x02\x00\x00\x00", b"\x00" * 50])
def test_not_a_client_hello(data):
    assert tlshello.parse_client_hello(data) is None


def browserleaks_chrome() -> tlshello.ClientHello:
    """A Chrome 143 hello as published with its fingerprints by browserleaks.com
    (ja3 text/hash and ja4/ja4_ro; field lists in wire order)."""
    ciphers = [0x1301, 0x1302, 0x1303, 0xC02B, 0xC02F, 0xC02C, 0xC030, 0xCCA9, 0xCCA8, 0xC013,
               0xC014, 0x009C, 0x009D, 0x002F, 0x0035]
    exts = [0x002D, 0x0033, 0x0010, 0xFE0D, 0x0017, 0x44CD, 0x0000, 0x000B, 0x000A, 0x002B,
            0xFF01, 0x0023, 0x0012, 0x0005, 0x000D, 0x001B]
    sigs = [0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601]

    def v16(b: bytes) -> bytes:
        return struct.pack("!H", len(b)) + b

    def u16s(xs) -> bytes:
        return b"".join(struct.pack("!H", x) for x in xs)

    body = {0x0000: v16(b"\x00" + v16(b"tls.browserleaks.com")),
            0x0010: v16(b"\x02h2\x08http/1.1"), 0x000A: v16(u16s([4588, 29, 23, 24])),
            0x000B: b"\x01\x00", 0x000D: v16(u16s(sigs)), 0x002B: b"\x04\x03\x04\x03\x03"}
    return tlshello.ClientHello(0x0303, bytes(32), b"", ciphers, b"\x00",
                                [(t, body.get(t, b"")) for t in exts])


def test_ja3_and_ja4_match_a_published_vector():
    h = browserleaks_chrome()
    assert tlshello.ja3_string(h) == (
        "771,4865-4866-4867-49195-49199-49196-49200-52393-52392-49171-49172-156-157-47-53,"
        "45-51-16-65037-23-17613-0-11-10-43-65281-35-18-5-13-27,4588-29-23-24,0")
    assert tlshello.ja3(h) == "98487aa16281980e7d1120d399efb6a4"
    assert tlshello.ja4(h) == "t13d1516h2_8daaf6152771_d8a2da3f94cd"


def test_extension_order_changes_ja3_but_not_ja4():
    h = browserleaks_chrome()
    shuffled = tlshello.ClientHello(h.legacy_version, h.random, h.session_id, h.ciphers,
                                    h.compression, h.extensions[:])
    random.Random(3).shuffle(shuffled.extensions)
    assert tlshello.ja3(shuffled) != tlshello.ja3(h)
    assert tlshello.ja4(shuffled) == tlshello.ja4(h)


def test_grease_is_ignored():
    h = browserleaks_chrome()
    g = tlshello.ClientHello(h.legacy_version, h.random, h.session_id, [0x0A0A, *h.ciphers],
                             h.compression, [(0x1A1A, b""), *h.extensions, (0xFAFA, b"\x00")])
    assert tlshello.ja3(g) == tlshello.ja3(h) and tlshello.ja4(g) == tlshello.ja4(h)


@settings(max_examples=300)
@given(st.binary(max_size=600))
def test_fuzz_never_raises_anything_but_need_more(data):
    try:
        h = tlshello.parse_client_hello(data)
    except NeedMore:
        return
    if h is not None:
        tlshello.ja3(h), tlshello.ja4(h), h.sni, h.alpn, h.supported_versions


@functools.cache
def one_real_hello() -> bytes:
    """One real hello for every example of the fuzz below: a new ssl context loads the
    system's CA store, 40 ms an example, and the corruption is what varies."""
    return real_hello()


@settings(max_examples=200)
@given(st.integers(0, 2000), st.binary(min_size=1, max_size=8))
def test_fuzz_corrupted_real_hello(pos, junk):
    data = bytearray(one_real_hello())
    pos %= len(data)
    data[pos:pos + len(junk)] = junk
    try:
        h = tlshello.parse_client_hello(bytes(data))
    except NeedMore:
        return
    if h is not None:
        tlshello.ja4(h)
