"""Snowflake's current release (2.14.1, built by ``scripts/setup --peers``) against ours,
in the lab (the rig: :mod:`tests.support.snowflakelab`), byte-exact both ways:

* our volunteer proxy polls the current broker and relays the current client;
* the current proxy polls our broker (after a NAT test against our probe service)
  and relays our client;
* the current client goes through our broker, our proxy and our bridge.

The protocol differences from 2.5.1 that these met are in
docs/transports/snowflake.md §9. Each test moves 2 MB each way: enough to run
many KCP windows through the proxy, cheap enough for CI.
"""

from __future__ import annotations

import pytest

from tests.support import peers
from tests.support.netlab import default_lab_or_skip
from tests.support.snowflakelab import (
    MB,
    Rig,
    client_addresses,
    our_args,
    socks_open,
    upload_and_download,
)

pytestmark = [pytest.mark.lab, pytest.mark.interop]

BYTES = 2 * MB


@pytest.fixture(scope="module")
def sflab():
    yield from default_lab_or_skip(proxies=1)


def _rig(lab, out, broker: str | None = None):
    return Rig(lab, out, broker)


async def test_our_proxy_polls_current_broker_and_relays_its_client(sflab, tmp_path):
    broker = peers.require("snowflake-upstream-broker")
    client = peers.require("snowflake-upstream-client")
    rig = _rig(sflab, tmp_path, broker)
    try:
        # Tor's broker gives a client whose NAT is unknown (no RFC 5780 STUN server
        # here) only unrestricted proxies; ours learns it is one from the probe service.
        rig.nat_probe()
        proxy = rig.our_proxy(0, "-nat-probe-server", rig.nat_probe_url)
        proxy.wait_log(r"NAT type: unrestricted", 30)
        rig.wait_available(1)
        port = rig.upstream_client(client)
        reader, writer = await socks_open(sflab, port, None)
        took = await upload_and_download(reader, writer, BYTES)
        writer.close()
        attached = rig.attaches()
        assert attached and attached[0]["proxy"] == sflab.addr("proxy0")
        assert attached[0]["client_ip"] in client_addresses(sflab)  # our proxy's ?client_ip=
        print(f"{peers.version('snowflake-upstream-broker')}: our proxy, its client: "
              f"2 MB each way in {took:.1f} s")
    finally:
        rig.close()


async def test_current_proxy_polls_our_broker_and_relays_our_client(sflab, tmp_path):
    binary = peers.require("snowflake-upstream-proxy")
    rig = _rig(sflab, tmp_path)
    try:
        rig.nat_probe()
        proxy = rig.upstream_proxy(binary, 0, "-nat-probe-server", rig.nat_probe_url)
        # 2.14 tests its NAT type against our probe service before its first poll.
        proxy.wait_log(r"NAT Type measurement: unknown -> unrestricted", 30)
        rig.wait_available(1)
        debug = rig.debug_page()
        assert "\tstandalone proxies: 1" in debug and "\tunrestricted: 1" in debug, debug
        port = rig.our_client()
        reader, writer = await socks_open(sflab, port, our_args(rig))
        took = await upload_and_download(reader, writer, BYTES)
        writer.close()
        attached = rig.attaches()
        assert attached and attached[0]["proxy"] == sflab.addr("proxy0")
        assert attached[0]["client_ip"] in client_addresses(sflab)  # its ?client_ip=
        # It honours our broker's NextPoll (1000 ms) over its own 5 s interval.
        assert "Poll interval set to 1s" in proxy.log_text()
        print(f"{peers.version('snowflake-upstream-proxy')}: its proxy, our broker and client: "
              f"2 MB each way in {took:.1f} s")
    finally:
        rig.close()


async def test_current_client_through_our_broker_proxy_and_bridge(sflab, tmp_path):
    binary = peers.require("snowflake-upstream-client")
    rig = _rig(sflab, tmp_path)
    try:
        rig.our_proxy(0)
        rig.wait_available(1)
        port = rig.upstream_client(binary)
        reader, writer = await socks_open(sflab, port, None)
        took = await upload_and_download(reader, writer, BYTES)
        writer.close()
        attached = rig.attaches()
        assert attached and attached[0]["proxy"] == sflab.addr("proxy0")
        print(f"{peers.version('snowflake-upstream-client')}: its client, our broker, proxy "
              f"and bridge: 2 MB each way in {took:.1f} s")
    finally:
        rig.close()
