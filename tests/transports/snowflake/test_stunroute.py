"""STUN servers with no route are left out of gathering; everything else is kept."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from transports.snowflake.stunroute import has_route, routable_stun, stun_host_port


@pytest.mark.parametrize(("url", "want"), [
    ("stun:stun.example.net", ("stun.example.net", 3478)),
    ("stun:198.18.0.9:19302", ("198.18.0.9", 19302)),
    ("stun:[2001:db8::7]:3479", ("2001:db8::7", 3479)),
    ("stun:[2001:db8::7]", ("2001:db8::7", 3478)),
    ("stun:host.example?transport=udp", ("host.example", 3478)),
    ("turn:198.18.0.9:3478", None),
    ("stun:", None),
    ("stun:host:notaport", None),
])
def test_stun_urls_are_parsed(url, want):
    assert stun_host_port(url) == want


def test_the_kernel_is_asked_without_sending():
    assert has_route(socket.AF_INET, ("127.0.0.1", 3478))


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs root")
@pytest.mark.lab
def test_with_no_route_the_server_is_dropped_and_gathering_is_quick():
    """In a namespace with no routes (an anonymous one, gone when the process ends)
    the lab's unroutable STUN address is dropped, as pion fails it at once."""
    code = ("import asyncio, socket, sys; "
            "from transports.snowflake.stunroute import has_route, routable_stun; "
            "print(has_route(socket.AF_INET, ('203.0.113.1', 3478)), "
            "asyncio.run(routable_stun(['stun:203.0.113.1:3478'])))")
    out = subprocess.run(["unshare", "--net", sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60, cwd=Path(__file__).resolve().parents[3])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False ([], ['stun:203.0.113.1:3478'])"


def test_only_servers_with_no_route_at_all_are_dropped():
    refused = {"198.18.0.9", "2001:db8::9"}

    def route(family, addr):
        return addr[0] not in refused

    urls = ["stun:198.18.0.9:3478", "stun:198.18.0.10:3478", "turn:198.18.0.9:3478",
            "stun:[2001:db8::9]:3478", "stun:no-such-name.invalid:3478"]
    kept, dropped = asyncio.run(routable_stun(urls, route=route))
    assert dropped == ["stun:198.18.0.9:3478", "stun:[2001:db8::9]:3478"]
    # TURN is kept whatever the route, and a name that does not resolve is left
    # for aioice to report.
    assert kept == ["stun:198.18.0.10:3478", "turn:198.18.0.9:3478",
                    "stun:no-such-name.invalid:3478"]


def test_a_name_with_one_routable_address_is_kept(monkeypatch):
    async def fake_getaddrinfo(host, port, type=0):
        return [(socket.AF_INET6, type, 17, "", ("2001:db8::9", port, 0, 0)),
                (socket.AF_INET, type, 17, "", ("198.18.0.10", port))]

    async def run():
        monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", fake_getaddrinfo)
        return await routable_stun(["stun:dual.example"],
                                   route=lambda fam, addr: fam == socket.AF_INET)

    assert asyncio.run(run()) == (["stun:dual.example"], [])
