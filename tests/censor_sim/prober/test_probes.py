"""The Frolov probe payloads are well formed, the right sizes, and reproducible."""

import ssl
import struct
from datetime import UTC, datetime, timedelta

import dns.message
import dns.rdataclass
import dns.rdatatype
import pytest
from scapy.all import load_layer

from censor_sim.prober.probes import (
    FROLOV_RANDOM_SIZES,
    Probe,
    frolov_suite,
    replay_probe,
    tls_client_hello,
)

load_layer("tls")
from scapy.layers.tls.extensions import TLS_Ext_ServerName  # noqa: E402
from scapy.layers.tls.handshake import TLSClientHello  # noqa: E402
from scapy.layers.tls.record import TLS  # noqa: E402


def by_name(probes: list[Probe]) -> dict[str, bytes]:
    return {p.name: p.payload for p in probes}


def test_suite_has_the_papers_thirteen_probes():
    names = [p.name for p in frolov_suite()]
    assert names == ["http", "tls", "modbus", "s7", "empty", "dns-axfr", "stun",
                     "rand-23", "rand-25", "rand-47", "rand-51", "rand-7k", "rand-17k"]


def test_random_probe_sizes_match_and_are_a_parameter():
    p = by_name(frolov_suite())
    assert [len(p[n]) for n in ("rand-23", "rand-25", "rand-47", "rand-51", "rand-7k",
                                "rand-17k")] == list(FROLOV_RANDOM_SIZES)
    assert FROLOV_RANDOM_SIZES[0] == 23 and FROLOV_RANDOM_SIZES[-1] == 17410
    custom = by_name(frolov_suite(random_sizes=[1, 3000, 4096, 5000]))
    # 4096 and 5000 would both be "rand-4k", so they keep exact names.
    assert {k: len(v) for k, v in custom.items() if k.startswith("rand-")} == {
        "rand-1": 1, "rand-2k": 3000, "rand-4096": 4096, "rand-5000": 5000}
    with pytest.raises(ValueError):
        frolov_suite(random_sizes=[0])
    with pytest.raises(ValueError):
        frolov_suite(random_sizes=[5, 5])


def test_seeded_determinism():
    assert frolov_suite(seed=7) == frolov_suite(seed=7)
    a, b = by_name(frolov_suite(seed=1)), by_name(frolov_suite(seed=2))
    assert a["http"] == b["http"] and a["s7"] == b["s7"]
    for name in ("tls", "stun", "dns-axfr", "rand-23", "rand-17k"):
        assert a[name] != b[name], name


def test_tls_client_hello_parses_with_sni_and_modern_offer():
    rec = TLS(by_name(frolov_suite())["tls"])
    assert rec.type == 22 and rec.len == 512  # BoringSSL pads the handshake to 512
    hello = rec.msg[0]
    assert isinstance(hello, TLSClientHello)
    assert hello.version == 0x0303 and hello.sidlen == 32
    assert {0x1301, 0x1302, 0x1303, 0xC02F} <= set(hello.ciphers)
    sni = [e for e in hello.ext if isinstance(e, TLS_Ext_ServerName)]
    assert sni and sni[0].servernames[0].servername == b"example.com"
    types = [e.type for e in hello.ext]
    assert 0x002B in types and 0x0033 in types and types[-1] == 0x0015  # padding last


def test_tls_client_hello_without_sni_like_the_paper():
    hello = TLS(tls_client_hello(sni=None)).msg[0]
    assert not any(isinstance(e, TLS_Ext_ServerName) for e in hello.ext)


def _self_signed(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "example.com")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "c.pem", tmp_path / "k.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_a_real_tls_stack_answers_the_hello_with_a_server_hello(tmp_path):
    """Realistic enough that OpenSSL negotiates TLS 1.3 instead of alerting."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*_self_signed(tmp_path))
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    conn = ctx.wrap_bio(inc, out, server_side=True)
    inc.write(tls_client_hello())
    with pytest.raises(ssl.SSLWantReadError):
        conn.do_handshake()
    reply = out.read()
    assert reply[0] == 22 and reply[5] == 2  # handshake record carrying a ServerHello
    (rec_len,) = struct.unpack("!H", reply[3:5])
    assert b"\x00\x2b\x00\x02\x03\x04" in reply[5:5 + rec_len]  # selected TLS 1.3


def test_dns_axfr_is_a_tcp_framed_zone_transfer_query():
    payload = by_name(frolov_suite())["dns-axfr"]
    (length,) = struct.unpack("!H", payload[:2])
    assert length == len(payload) - 2
    msg = dns.message.from_wire(payload[2:])
    (q,) = msg.question
    assert q.rdtype == dns.rdatatype.AXFR and q.rdclass == dns.rdataclass.IN
    assert q.name.to_text() == "example.com."


def test_fixed_protocol_probes():
    p = by_name(frolov_suite())
    assert p["http"] == b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"
    assert p["empty"] == b""
    # STUN Binding Request: type 1, length 0, magic cookie, 12-byte transaction id.
    assert len(p["stun"]) == 20 and p["stun"][:8] == bytes.fromhex("000100002112a442")
    # Modbus/TCP MBAP (protocol 0, length 5, unit 0) + Read Device Identification.
    assert p["modbus"][2:] == bytes.fromhex("00000005002b0e0100")
    # TPKT v3 length 22, COTP CR (0xE0) with TSAPs 0x0100 -> 0x0102.
    s7 = p["s7"]
    assert s7[:4] == b"\x03\x00\x00\x16" and len(s7) == 22
    assert s7[4] == len(s7) - 5 and s7[5] == 0xE0 and s7.endswith(b"\xc2\x02\x01\x02")
    # OSSH's tree (Fig. 4) needs S7, STUN, Modbus and rand-23 under 24 bytes.
    assert all(len(p[n]) < 24 for n in ("s7", "stun", "modbus", "rand-23"))


def test_replay_probe_copies_the_capture():
    captured = bytearray(b"\x01\x02\x03")
    probe = replay_probe("replay-r1", captured)
    captured[0] = 9
    assert probe == Probe("replay-r1", b"\x01\x02\x03")
    assert "len=3" in repr(probe)
    with pytest.raises(ValueError):
        replay_probe("", b"x")
