"""The lab STUN server: Binding Requests get the sender's address back, XOR-ed."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct

import pytest
from aioice import stun as aiostun
from hypothesis import given, settings
from hypothesis import strategies as st

from ptcommon.events import EventLog
from ptlab.services.stun import (
    MAGIC_COOKIE,
    StunServer,
    binding_response,
    handle_datagram,
    parse_binding_request,
)


class _Sink:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, s: str) -> None:
        self.lines.append(s)

    def flush(self) -> None:
        pass


def _request(tid: bytes | None = None, fingerprint: bool = False) -> tuple[bytes, bytes]:
    msg = aiostun.Message(message_method=aiostun.Method.BINDING,
                          message_class=aiostun.Class.REQUEST,
                          transaction_id=tid or os.urandom(12))
    if fingerprint:
        msg.add_fingerprint()
    return bytes(msg), msg.transaction_id


async def _exchange(host: str, port: int, data: bytes, timeout: float = 2.0
                    ) -> tuple[bytes, tuple[str, int]]:
    loop = asyncio.get_running_loop()
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.setblocking(False)
    try:
        await loop.sock_connect(s, (host, port))
        await loop.sock_sendall(s, data)
        reply = await asyncio.wait_for(loop.sock_recv(s, 2048), timeout)
        return reply, s.getsockname()[:2]
    finally:
        s.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
async def test_binding_on_loopback(host: str) -> None:
    sink = _Sink()
    server = StunServer(EventLog("stun", sink))  # type: ignore[arg-type]
    [(_, port)] = await server.start([(host, 0)])
    try:
        for fp in (False, True):
            req, tid = _request(fingerprint=fp)
            raw, mine = await _exchange(host, port, req)
            resp = aiostun.parse_message(raw)  # also checks our FINGERPRINT
            assert resp.message_method == aiostun.Method.BINDING
            assert resp.message_class == aiostun.Class.RESPONSE
            assert resp.transaction_id == tid
            assert resp.attributes["XOR-MAPPED-ADDRESS"] == mine
            assert resp.attributes["MAPPED-ADDRESS"] == mine
            assert "FINGERPRINT" in resp.attributes
        # Not STUN: no answer.
        with pytest.raises(TimeoutError):
            await _exchange(host, port, b"GET / HTTP/1.0\r\n\r\n", timeout=0.2)
    finally:
        server.close()
    binds = [json.loads(x) for x in sink.lines]
    assert [e["event"] for e in binds] == ["binding", "binding"]
    assert binds[-1]["peer"].endswith(f":{mine[1]}")


def test_xor_address_encoding_by_hand() -> None:
    tid = bytes(range(12))
    raw = binding_response(tid, "198.18.0.2", 40000)
    # XOR-MAPPED-ADDRESS is the first attribute: type 0x0020, port ^ 0x2112, addr ^ cookie.
    kind, length, _, fam, xport = struct.unpack_from("!HHBBH", raw, 20)
    assert (kind, length, fam) == (0x0020, 8, 1)
    assert xport ^ (MAGIC_COOKIE >> 16) == 40000
    xaddr = struct.unpack_from("!I", raw, 28)[0] ^ MAGIC_COOKIE
    assert socket.inet_ntoa(struct.pack("!I", xaddr)) == "198.18.0.2"
    v6 = aiostun.parse_message(binding_response(tid, "2001:db8::7", 9))
    assert v6.attributes["XOR-MAPPED-ADDRESS"] == ("2001:db8::7", 9)
    mapped = aiostun.parse_message(binding_response(tid, "::ffff:198.18.0.9", 9))
    assert mapped.attributes["XOR-MAPPED-ADDRESS"] == ("198.18.0.9", 9)


def test_rejects_non_binding_and_broken_messages() -> None:
    req, _ = _request(fingerprint=True)
    assert parse_binding_request(req) is not None
    bad_fp = req[:-1] + bytes([req[-1] ^ 1])
    assert parse_binding_request(bad_fp) is None
    wrong_cookie = req[:4] + b"\x00\x00\x00\x00" + req[8:]
    assert parse_binding_request(wrong_cookie) is None
    indication = b"\x00\x11" + req[2:]
    assert parse_binding_request(indication) is None
    assert parse_binding_request(req[:-4]) is None  # length no longer matches
    assert handle_datagram(b"", ("127.0.0.1", 1)) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_never_raises(data: bytes) -> None:
    reply = handle_datagram(data, ("198.18.0.2", 1234))
    if reply is not None:
        assert aiostun.parse_message(reply).transaction_id == data[8:20]
