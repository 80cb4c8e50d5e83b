"""A tunnel-mode device counts as ready only once it is up with an address: tools
create the device first and configure it later, and a route via the tunnel's far
end is refused until then."""

import os
import subprocess
import sys

import pytest

from tests.support.netlab import pair_lab

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs a namespace: root")


def test_a_device_is_ready_only_when_up_with_an_address():
    with pair_lab("solo") as lab:
        ns = lab.ns("solo")

        def ip(*args: str) -> None:
            subprocess.run(["ip", "-n", ns, *args], check=True)

        dev = "ptltunready"

        def ready() -> bool:  # as tunroute sees it: run in the namespace, with its /sys
            code = f"from ptlab.tunroute import device_ready; print(device_ready({dev!r}))"
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
