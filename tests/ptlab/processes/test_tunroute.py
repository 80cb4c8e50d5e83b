"""A tunnel-mode device counts as ready only once it is up with an address: tools
create the device first and configure it later, and a route via the tunnel's far
end is refused until then."""

import subprocess
import sys

import pytest

from tests.support.netlab import pair_lab

pytestmark = pytest.mark.lab  # a namespace: root


def test_a_device_is_ready_only_when_up_with_an_address():
    with pair_lab("solo") as lab:
        ns = lab.ns("solo")

        def ip(*args: str) -> None:
            subprocess.run(["ip", "-n", ns, *args], check=True)

        dev = "ptltunready"

        def ready() -> bool:  # as tunroute sees it: run in the namespace, with its /sys
            code = ("from ptlab.processes.tunroute import device_ready; "
                    f"print(device_ready({dev!r}))")
            out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code],
                                 capture_output=True, text=True, check=True).stdout
            return out.strip() == "True"

        assert not ready()                       # no such device
        ip("tuntap", "add", "dev", dev, "mode", "tun")
        assert not ready()                       # created, down, no address
        ip("addr", "add", "198.19.253.2", "peer", "198.19.253.1", "dev", dev)
        assert not ready()                       # configured but still down
        ip("link", "set", dev, "up")
        assert ready()


def test_teardown_aborts_the_connections_still_bound_to_the_tunnel():
    """A connection through the tunnel that outlives it would, once the routes are
    gone, send its retransmissions out of the main table with the tunnel's address:
    tunroute aborts such connections first. Others are left alone."""
    with pair_lab("solo") as lab:
        ns = lab.ns("solo")
        dev = "ptltunkill"
        for args in (["tuntap", "add", "dev", dev, "mode", "tun"],
                     ["addr", "add", "198.19.253.2", "peer", "198.19.253.1", "dev", dev],
                     ["link", "set", dev, "up"],
                     ["route", "add", "198.18.7.2/32", "dev", dev]):
            subprocess.run(["ip", "-n", ns, *args], check=True)
        # No tool reads the device: the SYNs go nowhere and the connections wait in
        # SYN-SENT, the one to 198.18.7.2 via the tunnel, the other via the same
        # device but to an address tunroute was not asked about.
        code = f"""
import socket, subprocess, sys, time
from ptlab.processes.tunroute import abort_tunnel_connections
subprocess.run(["ip", "route", "add", "198.18.7.3/32", "dev", {dev!r}], check=True)
socks = {{}}
for dst in ("198.18.7.2", "198.18.7.3"):
    s = socks[dst] = socket.socket()
    s.setblocking(False)
    s.connect_ex((dst, 80))
time.sleep(0.2)
abort_tunnel_connections({dev!r}, "198.18.7.2/32")
time.sleep(0.2)
print(socks["198.18.7.2"].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR),
      socks["198.18.7.3"].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
"""
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        import errno

        aborted, waiting = map(int, out.stdout.split())
        assert (aborted, waiting) == (errno.ECONNABORTED, 0)
