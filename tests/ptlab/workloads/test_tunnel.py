"""A SOCKS refusal is a failed flow (ConnectionError), never an escaping exception."""

import os
import sys

import pytest

from ptlab.plugins.base import Endpoint
from ptlab.workloads.latency import request_latency
from ptlab.workloads.tunnel import TunnelError, open_tunnel


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a namespace: root")
@pytest.mark.lab
async def test_refused_connect_is_a_connection_error(tmp_path):
    from netns.lab import Lab
    from netns.process import LabProcess
    from netns.topology import Topology

    t = Topology()
    t.add_node("client", "c")
    t.add_node("peer", "p")
    t.add_link("client", "peer")
    with Lab(t) as lab:
        # A refusing SOCKS server inside the client namespace, on loopback.
        code = (
            "import asyncio\n"
            "from transports.pt import socks5\n"
            "async def h(r, w):\n"
            "    await socks5.read_request(r, w)\n"
            "    w.write(socks5.reply(socks5.REP_HOST_UNREACHABLE)); await w.drain(); w.close()\n"
            "async def main():\n"
            "    s = await asyncio.start_server(h, '127.0.0.1', 1080)\n"
            "    print('listening', flush=True)\n"
            "    await asyncio.sleep(30)\n"
            "asyncio.run(main())\n")
        p = LabProcess(lab.ns("client"), [sys.executable, "-c", code], "socks",
                       tmp_path / "socks.log").start()
        try:
            p.wait_log("listening", 10)
            ep = Endpoint("127.0.0.1", 1080, "198.18.0.2", 9)
            with pytest.raises(TunnelError, match="reply 4"):
                await open_tunnel(lab.ns("client"), ep, 2.0)
            assert isinstance(TunnelError("x"), ConnectionError)
            assert await request_latency(lab.ns("client"), ep, 3, timeout=2.0) == []
        finally:
            p.stop()
