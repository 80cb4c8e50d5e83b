"""The lab resolver on loopback: answers from its map, never crashes, never forwards."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import sys

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptcommon.events import EventLog
from ptlab.services.dns import DnsServer, Zone, handle_query, load_zone
from ptlab.services.main import ConfigError
from ptlab.services.netutil import parse_hostport

ZONE_NAMES = {
    "web.lab": ["198.18.7.2", "2001:db8:0:7::2"],
    "*.cdn.lab": ["198.18.4.2"],
    "v4only.lab": ["198.18.9.9"],
}


@pytest.fixture
def zone() -> Zone:
    return Zone.from_mapping(ZONE_NAMES)


class _Sink:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, s: str) -> None:
        self.lines.append(s)

    def flush(self) -> None:
        pass


def _ask(zone: Zone, name: str, rdtype: str, tcp: bool = False) -> dns.message.Message:
    q = dns.message.make_query(name, rdtype)
    reply = handle_query(q.to_wire(), zone, tcp=tcp)
    assert reply is not None
    resp = dns.message.from_wire(reply.wire)
    assert q.is_response(resp)
    return resp


def _addrs(resp: dns.message.Message) -> set[str]:
    return {rd.address for rrset in resp.answer for rd in rrset}


def test_handler_a_aaaa_nxdomain_wildcard(zone: Zone) -> None:
    r = _ask(zone, "web.lab", "A")
    assert r.rcode() == dns.rcode.NOERROR and r.flags & dns.flags.AA
    assert _addrs(r) == {"198.18.7.2"}
    assert _addrs(_ask(zone, "WEB.lab.", "AAAA")) == {"2001:db8:0:7::2"}
    assert _addrs(_ask(zone, "a.cdn.lab", "A")) == {"198.18.4.2"}
    assert _addrs(_ask(zone, "x.y.cdn.lab", "A")) == {"198.18.4.2"}
    # The wildcard covers names below cdn.lab, not cdn.lab itself.
    assert _ask(zone, "cdn.lab", "A").rcode() == dns.rcode.NXDOMAIN
    assert _ask(zone, "example.com", "A").rcode() == dns.rcode.NXDOMAIN
    nodata = _ask(zone, "v4only.lab", "AAAA")
    assert nodata.rcode() == dns.rcode.NOERROR and not nodata.answer
    assert _ask(zone, "web.lab", "MX").rcode() == dns.rcode.NOERROR


def test_handler_refuses_and_formerrs(zone: Zone) -> None:
    q = dns.message.make_query("web.lab", "A", rdclass="CH")
    reply = handle_query(q.to_wire(), zone)
    assert reply is not None and dns.message.from_wire(reply.wire).rcode() == dns.rcode.REFUSED
    axfr = dns.message.make_query("web.lab", "AXFR")
    reply = handle_query(axfr.to_wire(), zone)
    assert reply is not None and reply.rcode == "REFUSED"
    # A header that claims a question which is not there: FORMERR, same id.
    bad = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x03abc"
    reply = handle_query(bad, zone)
    assert reply is not None
    qid, flags = struct.unpack("!HH", reply.wire[:4])
    assert qid == 0x1234 and flags & 0x8000 and flags & 0xF == dns.rcode.FORMERR
    # Two questions: FORMERR.
    two = struct.pack("!HHHHHH", 7, 0, 2, 0, 0, 0) + (b"\x03web\x03lab\x00\x00\x01\x00\x01" * 2)
    reply = handle_query(two, zone)
    assert reply is not None and reply.rcode == "FORMERR"
    # Too short for a header, or a response rather than a query: silence.
    assert handle_query(b"\x00\x01\x02", zone) is None
    resp = dns.message.make_response(dns.message.make_query("web.lab", "A"))
    assert handle_query(resp.to_wire(), zone) is None


def test_handler_truncates_big_udp_answers() -> None:
    big = Zone.from_mapping({"many.lab": [f"198.18.{i // 250}.{i % 250 + 1}" for i in range(60)]})
    q = dns.message.make_query("many.lab", "A")
    udp = handle_query(q.to_wire(), big, tcp=False)
    tcp = handle_query(q.to_wire(), big, tcp=True)
    assert udp is not None and tcp is not None
    assert len(udp.wire) <= 512
    assert dns.message.from_wire(udp.wire).flags & dns.flags.TC
    assert len(_addrs(dns.message.from_wire(tcp.wire))) == 60


def _check_reply(data: bytes, reply) -> None:
    if reply is None:
        return
    assert len(reply.wire) >= 12
    assert reply.wire[:2] == data[:2]  # same id
    assert reply.wire[2] & 0x80  # QR set
    dns.message.from_wire(reply.wire)  # a valid message


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    zone = Zone.from_mapping(ZONE_NAMES)
    _check_reply(data, handle_query(data, zone, tcp=False))
    _check_reply(data, handle_query(data, zone, tcp=True))


_VALID = dns.message.make_query("a.cdn.lab", "A", use_edns=0).to_wire()


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)), max_size=8),
       st.integers(0, len(_VALID)))
def test_fuzz_mutated_queries(edits: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(_VALID)
    for pos, val in edits:
        data[pos] = val
    data = bytes(data[:cut]) if cut >= 12 else bytes(data)
    _check_reply(data, handle_query(data, Zone.from_mapping(ZONE_NAMES)))


def test_load_zone_and_config_errors(tmp_path) -> None:
    f = tmp_path / "z.json"
    f.write_text(json.dumps({"names": {"*.cdn.lab": ["198.18.4.2"], "x.lab": "198.18.1.1"}}))
    zone = load_zone(["web.lab=198.18.7.2,2001:db8::7", "web.lab=198.18.7.3"], [str(f)])
    assert _addrs(_ask(zone, "web.lab", "A")) == {"198.18.7.2", "198.18.7.3"}
    assert _addrs(_ask(zone, "q.cdn.lab", "A")) == {"198.18.4.2"}
    assert _addrs(_ask(zone, "x.lab", "A")) == {"198.18.1.1"}
    for bad in (["noequals"], ["web.lab=not-an-ip"], ["=1.2.3.4"]):
        with pytest.raises(ConfigError):
            load_zone(bad, [])
    f.write_text("[1, 2]")
    with pytest.raises(ConfigError):
        load_zone([], [str(f)])
    with pytest.raises(ConfigError):
        load_zone([], [str(tmp_path / "missing.json")])
    with pytest.raises(ConfigError):
        parse_hostport("1.2.3.4:99999")
    assert parse_hostport("[::1]:53") == ("::1", 53)
    assert parse_hostport("::1", 53) == ("::1", 53)


async def _udp_query(host: str, port: int, wire: bytes) -> bytes:
    loop = asyncio.get_running_loop()
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        await loop.sock_connect(s, (host, port))
        await loop.sock_sendall(s, wire)
        return await asyncio.wait_for(loop.sock_recv(s, 65535), 2)


async def test_server_udp_and_tcp_on_loopback(zone: Zone) -> None:
    sink = _Sink()
    server = DnsServer(zone, EventLog("dns", sink))  # type: ignore[arg-type]
    (host, port), (host6, port6) = await server.start([("127.0.0.1", 0), ("::1", 0)])
    try:
        q = dns.message.make_query("web.lab", "A")
        r = dns.message.from_wire(await _udp_query(host, port, q.to_wire()))
        assert _addrs(r) == {"198.18.7.2"}
        q6 = dns.message.make_query("b.cdn.lab", "A")
        r6 = dns.message.from_wire(await _udp_query(host6, port6, q6.to_wire()))
        assert _addrs(r6) == {"198.18.4.2"}
        # Garbage over UDP gets no answer, and the server keeps serving.
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            await loop.sock_connect(s, (host, port))
            await loop.sock_sendall(s, b"\xff" * 5)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(loop.sock_recv(s, 100), 0.2)

        # TCP: several queries on one connection, same port as UDP.
        reader, writer = await asyncio.open_connection(host, port)
        for name, rdtype, want in [("web.lab", "AAAA", dns.rcode.NOERROR),
                                   ("nope.lab", "A", dns.rcode.NXDOMAIN),
                                   ("z.cdn.lab", "A", dns.rcode.NOERROR)]:
            q = dns.message.make_query(name, rdtype)
            wire = q.to_wire()
            writer.write(struct.pack("!H", len(wire)) + wire)
            await writer.drain()
            (n,) = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), 2))
            resp = dns.message.from_wire(await reader.readexactly(n))
            assert q.is_response(resp) and resp.rcode() == want
        # A too-short message on the stream ends the connection.
        writer.write(b"\x00\x03abc")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 2) == b""
        writer.close()
    finally:
        await server.close()
    events = [json.loads(x) for x in sink.lines]
    queries = [e for e in events if e["event"] == "query"]
    assert {"transport": "udp", "name": "web.lab", "type": "A", "rcode": "NOERROR"}.items() \
        <= queries[0].items()
    assert [e["transport"] for e in queries].count("tcp") == 3
    assert any(e["rcode"] == "NXDOMAIN" for e in queries)


async def test_close_ends_an_idle_tcp_connection(zone: Zone) -> None:
    server = DnsServer(zone)
    [(host, port)] = await server.start([("127.0.0.1", 0)])
    reader, writer = await asyncio.open_connection(host, port)
    await asyncio.sleep(0.05)
    await asyncio.wait_for(server.close(), 2)  # well before TCP_IDLE_TIMEOUT
    assert await asyncio.wait_for(reader.read(), 2) == b""
    writer.close()


def test_cli_bad_config_is_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "ptlab.services.dns", "--listen", "127.0.0.1:0",
                           "--zone", "web.lab=bogus"], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "bad config" in proc.stderr


def test_cli_serves_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "ptlab.services.dns", "--listen",
                             "127.0.0.1:0", "--zone", "web.lab=198.18.7.2"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready"
        host, port = parse_hostport(ready["listen"][0])
        q = dns.message.make_query("web.lab", "A")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(2)
            s.sendto(q.to_wire(), (host, port))
            assert _addrs(dns.message.from_wire(s.recv(4096))) == {"198.18.7.2"}
        proc.terminate()
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class _Delegate(asyncio.DatagramProtocol):
    """A toy authoritative server for the delegated zone: answers every query with
    one TXT record naming the question, and remembers the IDs it saw."""

    def __init__(self, silent: bool = False) -> None:
        self.silent, self.ids, self.transport = silent, [], None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        q = dns.message.from_wire(data)
        self.ids.append(q.id)
        if self.silent:
            return
        r = dns.message.make_response(q)
        r.answer.append(dns.rrset.from_text(q.question[0].name, 0, "IN", "TXT", '"tunnel"'))
        self.transport.sendto(r.to_wire(), addr)


async def test_a_delegated_zone_is_relayed_and_the_rest_answered_here(zone: Zone) -> None:
    loop = asyncio.get_running_loop()
    tr, delegate = await loop.create_datagram_endpoint(_Delegate, local_addr=("127.0.0.1", 0))
    dport = tr.get_extra_info("sockname")[1]
    server = DnsServer(zone, delegations={"tunnel.lab": ("127.0.0.1", dport)})
    (host, port), = await server.start([("127.0.0.1", 0)])
    try:
        names = ["aaaa.tunnel.lab", "x" * 60 + ".y.tunnel.lab", "aaaa.tunnel.lab"]
        for i, name in enumerate(names):
            q = dns.message.make_query(name, "NULL" if i else "TXT")
            q.id = 7  # the same client ID every time: the relay uses its own
            r = dns.message.from_wire(await _udp_query(host, port, q.to_wire()))
            assert r.id == 7 and r.answer[0].name.to_text() == name + "."
        assert len(set(delegate.ids)) == 3 and 7 not in delegate.ids
        # Names outside the delegated zone are still answered from the map.
        r = dns.message.from_wire(await _udp_query(
            host, port, dns.message.make_query("web.lab", "A").to_wire()))
        assert _addrs(r) == {"198.18.7.2"} and len(delegate.ids) == 3
        # Over TCP a delegated name is refused, not answered from the map.
        reader, writer = await asyncio.open_connection(host, port)
        wire = dns.message.make_query("q.tunnel.lab", "A").to_wire()
        writer.write(struct.pack("!H", len(wire)) + wire)
        await writer.drain()
        (n,) = struct.unpack("!H", await reader.readexactly(2))
        assert dns.message.from_wire(await reader.readexactly(n)).rcode() == dns.rcode.REFUSED
        writer.close()
    finally:
        await server.close()
        tr.close()


async def test_a_silent_delegate_gets_the_client_servfail_and_bounded_state(zone) -> None:
    loop = asyncio.get_running_loop()
    tr, _ = await loop.create_datagram_endpoint(lambda: _Delegate(silent=True),
                                                local_addr=("127.0.0.1", 0))
    server = DnsServer(zone, delegations={"t.lab": tr.get_extra_info("sockname")})
    (host, port), = await server.start([("127.0.0.1", 0)])
    fwd = next(iter(server.forwarders.values()))
    fwd.timeout_s = 0.2
    try:
        q = dns.message.make_query("a.t.lab", "TXT")
        r = dns.message.from_wire(await _udp_query(host, port, q.to_wire()))
        assert r.id == q.id and r.rcode() == dns.rcode.SERVFAIL and not fwd.pending
        fwd.max_pending = 0  # full: answered SERVFAIL at once, nothing relayed
        r = dns.message.from_wire(await _udp_query(host, port, q.to_wire()))
        assert r.rcode() == dns.rcode.SERVFAIL and fwd.relayed == 1
    finally:
        await server.close()
        tr.close()


@pytest.mark.parametrize("bad", ["tunnel.lab", "tunnel.lab=", "=1.2.3.4:53",
                                 "tunnel.lab=host.example:53", "tunnel.lab=1.2.3.4:99999"])
def test_bad_delegations_are_config_errors(bad: str) -> None:
    from ptlab.services.dns import parse_delegations

    with pytest.raises(ConfigError, match="--delegate"):
        parse_delegations([bad])
