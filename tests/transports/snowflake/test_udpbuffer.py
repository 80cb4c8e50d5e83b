"""ICE sockets get the bigger receive buffer, as far as the kernel allows."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aioice.turn
import pytest

from transports.snowflake.udpbuffer import RECEIVE_BUFFER, enlarge_ice_receive_buffer


async def gathered_buffers() -> list[int]:
    from aiortc import RTCConfiguration, RTCPeerConnection

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.createDataChannel("x")
    try:
        await pc.setLocalDescription(await pc.createOffer())
        conn = pc.sctp.transport.transport.iceGatherer._connection
        return [p.transport.get_extra_info("socket").getsockopt(socket.SOL_SOCKET,
                                                                 socket.SO_RCVBUF)
                for p in conn._protocols]
    finally:
        await pc.close()


@pytest.mark.network
def test_gathered_sockets_get_the_buffer(monkeypatch):
    monkeypatch.setattr(aioice.turn, "UDP_SOCKET_BUFFER_SIZE", 262144)
    assert enlarge_ice_receive_buffer() == RECEIVE_BUFFER
    cap = int(Path("/proc/sys/net/core/rmem_max").read_text())
    bufs = asyncio.run(gathered_buffers())
    assert bufs
    # Linux doubles what it grants, and grants at most rmem_max.
    assert all(b >= 2 * min(RECEIVE_BUFFER, cap) for b in bufs), (bufs, cap)


def test_it_never_lowers_a_bigger_setting(monkeypatch):
    monkeypatch.setattr(aioice.turn, "UDP_SOCKET_BUFFER_SIZE", 8 << 20)
    assert enlarge_ice_receive_buffer() == 8 << 20
