
"""The Conjure row in a real lab: register through the edge, connect to a phantom in the
ISP's unused space, reach the covert destination through our station."""

from __future__ import annotations

import ipaddress
import json
import re
import sys

import pytest

from netns.nsenter import ns_socket
from netns.process import LabProcess
from ptcommon.events import READY_PATTERN, count_events
from ptlab import plugins
from ptlab.common.wellknown import ISP_PHANTOMS6, ISP_RANGE
from ptlab.plugins.conjure import PHANTOM_SUBNET, STATION_PORT
from transports.conjure.phantom import PhantomConfig, SubnetGroup, derive_keys, select_phantom
from transports.conjure.registration import build_registration, new_secret


def run(lab, censor: str = "none", overrides=None, bootstrap_s: float = 20.0,
        bulk_size: int = 2_000_000, **options):
    lab.spec.transports["conjure"] = {"reg_delay": 0.2, **options}
    try:
        return lab.run_cell("conjure", censor, overrides, bulk_size=bulk_size,
                            bootstrap_timeout_s=bootstrap_s, bulk_timeout_s=60.0,
                            idle_timeout_s=10.0)
    finally:
        lab.spec.transports.pop("conjure")


@pytest.mark.lab
@pytest.mark.parametrize("transport", ["min", "prefix", "obfs4"])
def test_each_transport_moves_20_mb_byte_exact_through_a_phantom(lab, transport):
    row = run(lab, bulk_size=20_000_000, transport=transport)
    assert row.status == "reachable", row.error
    cells = sorted((lab.out_dir / "cells").glob("conjure__none*"), key=lambda d: d.stat().st_mtime)
    log = (cells[-1] / "conjure-station.log").read_text()
    assert count_events(log, "registration") and re.search(f'"transport": ?"{transport}"', log)
    if transport == "prefix":  # GET / HTTP/1.1 then the tag, on the prefix's port 80
        assert re.search(r'"port": ?80\b', log)


@pytest.mark.lab
def test_an_ipv6_phantom_in_2001_db8(lab):
    row = run(lab, v6=True)
    assert row.status == "reachable", row.error
    cells = sorted((lab.out_dir / "cells").glob("conjure__none*"), key=lambda d: d.stat().st_mtime)
    log = (cells[-1] / "conjure-station.log").read_text()
    reg = next(json.loads(line) for line in log.splitlines() if '"registration"' in line)
    assert ipaddress.ip_address(reg["phantoms"][0]) in ipaddress.ip_network(ISP_PHANTOMS6)
    assert ipaddress.ip_address(reg["client"]).version == 6


def test_bad_options_are_named():
    p = plugins.get("conjure")
    with pytest.raises(ValueError, match="unknown option 'phantom'"):
        p.check_options({"phantom": "x"})
    with pytest.raises(ValueError, match="transport must be min, prefix or obfs4"):
        p.check_options({"transport": "dtls"})
    with pytest.raises(ValueError, match="reg_delay"):
        p.check_options({"reg_delay": -1})


def _probe(ns: str, dest: tuple[str, int], source: str | None = None,
           timeout: float = 1.5) -> str:
    """'silence' (no SYN-ACK, RST or ICMP before the timeout), 'refused' or 'open'."""
    sock = ns_socket(ns)
    sock.settimeout(timeout)
    try:
        if source:
            sock.bind((source, 0))
        sock.connect(dest)
        return "open"
    except TimeoutError:
        return "silence"
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:  # an ICMP error, e.g. host unreachable
        return f"error {exc.errno}"
    finally:
        sock.close()


def _register_from(ns: str, registrar: tuple[str, int], body: bytes) -> int:
    sock = ns_socket(ns)
    sock.settimeout(5)
    try:
        sock.connect(registrar)
        sock.sendall(b"POST /api/register HTTP/1.1\r\nHost: conjure.lab\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        head = sock.recv(4096)
    finally:
        sock.close()
    return int(head.split(b" ", 2)[1])


SPOOF = """
import random
import sys
from scapy.all import IP, TCP, conf, sr1
conf.verb = 0
src, dst, iface = sys.argv[1], sys.argv[2], sys.argv[3]
ans = sr1(IP(src=src, dst=dst) / TCP(sport=random.randint(20000, 60000), dport=443,
                                    flags="S", seq=1000),
          timeout=2, iface=iface)
print("synack" if ans is not None and TCP in ans and ans[TCP].flags.S and ans[TCP].flags.A
      else "nothing")
"""


def _spoofed_syn(lab, source: str, phantom: str, tries: int = 3) -> str:
    """From the censor's router, a SYN with ``source`` as its source address; does a
    SYN-ACK come back past the censor? scapy's ``sr1`` can miss an answer that comes
    back before it listens (a lab round trip is tens of microseconds), so "synack"
    from any of ``tries`` SYNs counts, and "nothing" needs every one to go unanswered."""
    answer = ""
    for _ in range(tries):
        out = lab.exec("censor", [sys.executable, "-c", SPOOF, source, phantom,
                                  lab.iface("censor", "inet")], check=False)
        answer = out.stdout.strip().splitlines()[-1] if out.stdout.strip() \
            else out.stderr[-300:]
        if answer == "synack":
            break
    return answer


@pytest.mark.lab
def test_phantoms_are_silent_to_everyone_but_the_registered_client(lab, tmp_path):
    """From the prober pool, a registered phantom, an unregistered one and the client's
    own phantom all look like unused space: no SYN-ACK, no RST, no ICMP. A used address
    of the same range without a listener answers RST, so the probe can tell."""
    L = lab.lab
    isp = L.addr("isp")
    station = LabProcess(L.ns("isp"), [
        sys.executable, "-m", "transports.conjure.station", "--phantoms", PHANTOM_SUBNET,
        "--listen", f"{isp}:{STATION_PORT}", "--registrar", f"{isp}:8090"],
        "station", tmp_path / "station.log").start()
    try:
        station.wait_log(READY_PATTERN, 15)
        secret = new_secret()
        body = build_registration(secret, "min", f"{L.addr('web')}:80", 1)
        assert _register_from(L.ns("client"), (isp, 8090), body) == 204
        phantom = str(select_phantom(derive_keys(secret).seed,
                                     PhantomConfig([SubnetGroup.parse(1, [PHANTOM_SUBNET])]),
                                     False).address)
        unregistered = str(ipaddress.ip_address(phantom) + 1
                           if phantom != "198.19.200.255" else "198.19.200.128")
        prober = "198.19.250.77"  # in the prober's source pool
        assert _probe(L.ns("client"), (phantom, 443)) == "open"
        for target in (phantom, unregistered):
            assert _probe(L.ns("prober"), (target, 443), prober) == "silence", target
        assert _probe(L.ns("client"), (unregistered, 443)) == "silence"
        assert _probe(L.ns("client"), (phantom, 80)) == "silence"  # not its port
        assert _probe(L.ns("prober"), ("198.19.200.20", 443), prober) == "refused"
        # Known limit: a censor on the path that spoofs the registered client's address
        # gets the station's SYN-ACK, so it can confirm a suspected phantom for that
        # client (what it sends next is read and discarded; it learns nothing more).
        assert _spoofed_syn(L, L.addr("client"), phantom) == "synack"
        assert _spoofed_syn(L, "198.18.0.77", phantom) == "nothing"
    finally:
        station.stop()


@pytest.mark.lab
def test_blocking_the_isp_range_stops_min_costs_the_isps_servers_and_misses_prefix(lab):
    """range-block on the ISP's range: unclassified first payloads are dropped. min's
    random tag is one; prefix's starts like HTTP and passes. The ISP's own binary
    server on a used address of the range is collateral damage."""
    block = {"detectors": {"unclassified": {"servers": [ISP_RANGE]}},
             "actions": {"residual": {"seconds": [2]}}}
    lab.spec.transports["conjure"] = {"reg_delay": 0.2}
    try:
        row = lab.run_cell("conjure", "range-block", block, bulk_size=500_000,
                           bootstrap_timeout_s=6.0, idle_timeout_s=5.0, benign=True)
    finally:
        lab.spec.transports.pop("conjure")
    assert row.status == "blocked" and row.detections.get("unclassified", 0) >= 1
    blocked = row.benign_detail.get("binary", {}).get("blocked", 0)
    assert blocked >= 1 and row.collateral and row.collateral > 0, row.benign_detail
    assert row.benign_detail["http"]["blocked"] == 0  # the ISP's web server passes
    prefixed = run(lab, "range-block", block, transport="prefix")
    assert prefixed.status == "reachable", prefixed.error
