"""Xue et al. 2022's OpenVPN probes and their decision chain (docs/censors/vpn.md §2.4).

The toy servers behave as the paper describes OpenVPN's TCP reader: read a 16-bit
length; refuse a length outside [1, 1627] at once; wait for the rest of a record
(until the handshake timeout, longer than the probe's watch here); then fail the
HMAC of anything complete and close. Closing with unread bytes makes Linux send a
RST, which is what the 2,000-byte probe draws.
"""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.prober import openvpn as ov
from censor_sim.prober.observe import ProbeResult


class ToyOpenVpn:
    """``reset=True``: no tls-auth, answers a client reset with a server reset."""

    def __init__(self, reset: bool, answers_http: bool = False) -> None:
        self.reset, self.answers_http = reset, answers_http

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self.serve(reader, writer)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        # Closing with bytes still unread makes Linux answer with a RST; asyncio has
        # already read them off the socket, so an abortive close (linger 0) stands in.
        try:
            unread = await asyncio.wait_for(reader.read(65536), 0.05)
        except (TimeoutError, ConnectionError):
            unread = b""
        if unread:  # linger 0: the close is a RST
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                       struct.pack("ii", 1, 0))
        writer.close()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readexactly(2), 30)
        if self.answers_http and head in (b"GE", b"SS", b"\x16\x03"):
            writer.write(b"HTTP/1.0 200 OK\r\n\r\nshared")
            await writer.drain()
            return
        (n,) = struct.unpack("!H", head)
        if not 1 <= n <= 1627:
            return  # an invalid length: closed at once
        body = await asyncio.wait_for(reader.readexactly(n), 30)
        if self.reset and body[0] >> 3 == 7:
            writer.write(b"\x00\x0c\x40" + bytes(12))  # a server reset
            await writer.drain()
            await asyncio.sleep(30)


async def probe(server: ToyOpenVpn | None, watch_s: float = 1.0) -> ov.Verdict:
    if server is None:  # nothing listens
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return await ov.investigate("127.0.0.1", port, watch_s=watch_s)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        return await ov.investigate("127.0.0.1", port, watch_s=watch_s)
    finally:
        srv.close()


def test_an_openvpn_server_without_tls_auth_answers_the_base_probe():
    v = asyncio.run(probe(ToyOpenVpn(reset=True)))
    assert (v.label, len(v.results)) == (ov.OPENVPN, 2)
    assert "server reset" in v.reason


def test_one_with_tls_auth_is_named_by_its_close_times_and_thresholds():
    v = asyncio.run(probe(ToyOpenVpn(reset=False)))
    assert v.label == ov.OPENVPN, v.reason
    assert len(v.results) == 10  # every probe of Table 1
    by = {r.probe: r for r in v.results}
    assert by["BaseProbe2"].close == "TIMEOUT" and by["One-Zero"].close == "TIMEOUT"
    assert by["2K-Random"].close == "RST"


def test_a_port_shared_with_a_web_server_is_left_to_a_human():
    v = asyncio.run(probe(ToyOpenVpn(reset=False, answers_http=True)))
    assert v.label == ov.PORT_SHARED and len(v.results) == 5


def test_nothing_listening_is_unreachable():
    assert asyncio.run(probe(None)).label == ov.UNREACHABLE


def r(name: str, close: str, after: float | None = 0.1, data: bytes = b"") -> ProbeResult:
    return ProbeResult(name, True, data, len(data), close, after)


def base(b1: ProbeResult, b2: ProbeResult) -> dict[str, ProbeResult]:
    return {"BaseProbe1": b1, "BaseProbe2": b2}


@pytest.mark.parametrize(("b1", "b2", "label"), [
    (r("BaseProbe1", "TIMEOUT", 1.0), r("BaseProbe2", "TIMEOUT", 1.0), ov.NOT_OPENVPN),
    (r("BaseProbe1", "FIN", 2.5), r("BaseProbe2", "TIMEOUT", 10.0), ov.NOT_OPENVPN),  # > 2 s
    (r("BaseProbe1", "FIN", 0.1), r("BaseProbe2", "FIN", 0.1), ov.NOT_OPENVPN),
    (r("BaseProbe1", "FIN", 0.1, b"HTTP/1.1 400"), r("BaseProbe2", "TIMEOUT"),
     ov.NOT_OPENVPN),
])
def test_the_base_probes_decide_alone_when_they_can(b1, b2, label):
    assert ov.decide(base(b1, b2), long_s=10.0)[0] == label


def test_the_short_close_bound_and_the_server_reset_shape():
    assert ov.short_close(r("x", "RST", 2.0)) and not ov.short_close(r("x", "RST", 2.01))
    assert ov.server_reset(b"\x00\x0c\x40" + bytes(12))
    assert not ov.server_reset(b"\x00\x0c\x38" + bytes(12))  # a client reset
    assert not ov.server_reset(b"\x07\x00\x40")  # length 1792 > 1627
    # Still undecided after the base probes: the protocol probes are needed.
    assert ov.decide(base(r("BaseProbe1", "FIN"), r("BaseProbe2", "TIMEOUT")), long_s=1) is None


NAMES = ["BaseProbe1", "BaseProbe2", "SSH", "HTTP-GET", "TLS", "TCP-Generic", "One-Zero",
         "Two-Zero", "Epmd", "2K-Random"]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(NAMES), st.tuples(
    st.booleans(), st.sampled_from(["FIN", "RST", "TIMEOUT", "REFUSED", "ERROR"]),
    st.one_of(st.none(), st.floats(0, 100, allow_nan=False)), st.binary(max_size=20))))
def test_the_chain_answers_for_any_reactions(reactions):
    results = {n: ProbeResult(n, ok, data, len(data), close, after)
               for n, (ok, close, after, data) in reactions.items()}
    out = ov.decide(results, long_s=3.0)
    assert out is None or out[0] in {ov.OPENVPN, ov.PORT_SHARED, ov.NOT_OPENVPN,
                                     ov.UNREACHABLE}
