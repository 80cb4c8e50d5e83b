"""-ephemeral-ports-range: aiortc's ICE sockets land inside the range, and a full
range or a bad flag is a clear error."""

from __future__ import annotations

import asyncio
import errno
import re
import socket

import pytest
import uvloop

from transports.snowflake.proxy_cli import parse_args
from transports.snowflake.udpports import PortRange, PortRangeEventLoop, port_range_loop

# The range works on both loops the proxy may run on (ptcommon.eventloop).
LOOPS = pytest.mark.parametrize("base", [asyncio.SelectorEventLoop, uvloop.Loop],
                                ids=["asyncio", "uvloop"])


async def offer_ports() -> list[int]:
    from aiortc import RTCConfiguration, RTCPeerConnection

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.createDataChannel("snowflake")
    try:
        await pc.setLocalDescription(await pc.createOffer())
        return [int(m.group(1)) for m in
                re.finditer(r"a=candidate:\S+ \d+ udp \d+ \S+ (\d+) typ host",
                            pc.localDescription.sdp)]
    finally:
        await pc.close()


def free_udp_range(width: int) -> PortRange:
    """A range of ports that are free now (best effort: a random high block)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1]
    low = max(1024, min(base, 65535 - width))
    return PortRange(low, low + width - 1)


@LOOPS
@pytest.mark.network
def test_host_candidates_bind_inside_the_range(base):
    ports = free_udp_range(40)
    with asyncio.Runner(loop_factory=lambda: port_range_loop(ports, base)) as runner:
        got = runner.run(offer_ports())
    assert got, "no host candidates"
    assert all(ports.low <= p <= ports.high for p in got), (ports, got)


@LOOPS
def test_a_fixed_port_and_a_connected_socket_are_left_alone(base):
    ports = free_udp_range(5)

    async def bind() -> tuple[int, tuple]:
        loop = asyncio.get_running_loop()
        fixed, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", ports.high + 1))
        out, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, remote_addr=("127.0.0.1", 9))
        try:
            return fixed.get_extra_info("sockname")[1], out.get_extra_info("peername")
        finally:
            fixed.close()
            out.close()

    with asyncio.Runner(loop_factory=lambda: port_range_loop(ports, base)) as runner:
        fixed, peer = runner.run(bind())
    assert fixed == ports.high + 1
    assert peer == ("127.0.0.1", 9)


@LOOPS
def test_a_full_range_is_a_clear_error(base):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]

        async def bind() -> None:
            await asyncio.get_running_loop().create_datagram_endpoint(
                asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))

        with asyncio.Runner(loop_factory=lambda: port_range_loop(PortRange(port, port),
                                                                 base)) as r:
            with pytest.raises(OSError, match=f"no free UDP port in {port}:{port}") as exc:
                r.run(bind())
    assert exc.value.errno == errno.EADDRINUSE


def test_the_asyncio_variant_keeps_its_name():
    loop = port_range_loop(PortRange(2000, 2001), asyncio.SelectorEventLoop)
    try:
        assert type(loop) is PortRangeEventLoop and loop.ports == PortRange(2000, 2001)
    finally:
        loop.close()


@pytest.mark.parametrize("text", ["", "5", "a:b", "10:5", "0:10", "1:70000", "-1:5"])
def test_bad_ranges_are_refused(text):
    with pytest.raises(ValueError, match="port range"):
        PortRange.parse(text)


def test_the_flag_is_parsed_and_checked(capsys):
    assert parse_args(["-ephemeral-ports-range", "50000:50100"]).ports == (50000, 50100)
    assert parse_args([]).ports is None
    with pytest.raises(SystemExit):
        parse_args(["-ephemeral-ports-range", "9:1"])
    assert "-ephemeral-ports-range: port range '9:1'" in capsys.readouterr().err


def test_the_proxies_loop_factory_confines_only_when_given_a_range(monkeypatch):
    from transports.snowflake.udpports import loop_factory

    monkeypatch.delenv("PTLAB_EVENT_LOOP", raising=False)
    assert loop_factory(None) is uvloop.Loop
    monkeypatch.setenv("PTLAB_EVENT_LOOP", "asyncio")
    assert loop_factory(None) is asyncio.SelectorEventLoop
    loop = loop_factory(PortRange(3000, 3001))()
    try:
        assert type(loop) is PortRangeEventLoop and loop.ports == PortRange(3000, 3001)
    finally:
        loop.close()
