"""Bring-your-own-tool rows over UDP, from Debian tools that had no row before: a
port forwarder (kcptun, mode = "forward") and a tunnel on UDP port 443 (QuickTun),
run from their command lines with no SOCKS server added and no port written in
them (docs/lab/transports.md §7.1, §7.2)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ptlab.common.flowroles import BENIGN_PORTS
from ptlab.common.wellknown import SERVER_PORT, WEB_HTTP, WEB_HTTPS
from ptlab.plugins.external import LOCAL_PORT, SOCKS_PORT
from tests.support.extrows import capture_drops, curated, run_row

ROWS = ("kcptun", "quicktun")
BULK = 2_000_000


def _templates(row: dict) -> list[str]:
    return [row["server"], row["client"], *row.get("configs", {}).values()]


@pytest.mark.parametrize("name", ROWS)
def test_the_udp_rows_name_no_port_and_add_no_socks_server(name):
    """The ports come from the row's keys (server_port) and the lab's placeholders,
    never from the command lines, and neither side offers or needs SOCKS."""
    row = curated(name)
    assert row["server_proto"] == "udp" and row["mode"] in ("forward", "tunnel")
    port = row.get("server_port", SERVER_PORT)
    assert "{server_port}" in row["server"] and "{server_port}" in row["client"]
    for text in _templates(row):
        numbers = {int(n) for n in re.findall(r"(?<![\w.{])\d+(?![\w.}])", text)}
        assert not numbers & {port, SERVER_PORT, LOCAL_PORT, SOCKS_PORT, 443}, (text, numbers)
        assert "socks" not in text.lower()
    programs = {shlex.split(t)[0] for t in (row["server"], row["client"])}
    assert programs <= {"sh", *row["binaries"]}


def test_the_tool_on_443_says_so_by_key():
    assert (curated("quicktun")["server_port"], curated("quicktun")["server_proto"]) == (443, "udp")


def _crossed(lab, cell, proto_port: int) -> tuple[int, list[str]]:
    """Bytes the censor saw in UDP packets to or from the bridge's ``proto_port``, and
    the client's TCP packets to the web server's HTTP or HTTPS outside the benign mix's
    ports (its SSH comes from any port: the OpenSSH client cannot be given one)."""
    from scapy.all import IP, TCP, UDP, rdpcap

    bridge = lab.lab.addr("bridge")
    web = lab.runner.services.benign_targets().http[0][0]
    pkts = rdpcap(str(lab.out_dir / next(p for p in cell.pcaps if "censor-client" in p)))
    tool = sum(p[IP].len for p in pkts if IP in p and UDP in p and bridge in (p[IP].src, p[IP].dst)
               and proto_port in (p[UDP].sport, p[UDP].dport))
    stray = [p.summary() for p in pkts if IP in p and TCP in p and p[IP].dst == web
             and p[TCP].dport in (WEB_HTTP, WEB_HTTPS) and p[TCP].sport not in BENIGN_PORTS]
    return tool, stray


@pytest.mark.lab
@pytest.mark.parametrize(("name", "port"), [
    ("kcptun", SERVER_PORT),   # the forwarder on the default port ...
    ("kcptun", 443),           # ... and moved to 443 by one key: readiness follows it
    ("quicktun", 443),         # a UDP tunnel on 443
])
def test_a_udp_row_moves_the_bulk_byte_exact_inside_its_own_udp_flow(lab, name, port):
    row = {**curated(name), "server_port": port}
    cell = run_row(lab, name, row, bulk_size=BULK, benign=True, bootstrap_timeout_s=6.0)
    assert cell.status == "reachable", cell.error
    assert [r["bytes"] for r in cell.repetition_outcomes] == [BULK]
    assert cell.goodput_mbit_s and cell.collateral == 0.0
    # The bulk crossed the censor in UDP to or from the bridge's port, and the
    # workloads never reached the web server on their own.
    tool, stray = _crossed(lab, cell, port)
    assert tool > BULK, f"{tool} bytes in the pcap; capture drops {capture_drops(lab, cell)}"
    assert not stray, stray[:5]
    # The server was declared ready by what fits UDP: kcptun by its bound port
    # (it prints nothing to wait for), QuickTun by its tun device.
    events = (lab.out_dir / "events.jsonl").read_text()
    on = f'"on": "udp {lab.lab.addr("bridge")}:{port}"' if name == "kcptun" else '"on": "ptl'
    assert any(on in line and f'"{name}-server"' in line and '"ready"' in line
               and Path(cell.cell_dir).name in line for line in events.splitlines())


@pytest.mark.lab
@pytest.mark.parametrize("name", ROWS)
def test_a_udp_row_is_blocked_when_the_censor_blocks_the_servers_address(lab, name):
    cell = run_row(lab, name, curated(name), "ip-blocklist", bulk_size=BULK,
                   bootstrap_timeout_s=4.0)
    assert (cell.status, cell.repetitions_ok) == ("blocked", 0), cell.error
