"""The benign mix: every flow gets through an open lab, and a censor's block shows as damage."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

import pytest
from aioice import stun as aiostun

from netns.nsenter import ns_socket
from ptcommon.events import READY_PATTERN
from ptlab.workloads.benign import BenignResult, BenignTargets, collateral_share, run_benign_mix


def test_collateral_share() -> None:
    ok = BenignResult("dns-udp", "x", True, None, 0.01)
    bad = BenignResult("ssh", "y", False, "timeout after 1s", 1.0)
    assert collateral_share([]) == 0.0
    assert collateral_share([ok, ok]) == 0.0
    assert collateral_share([ok, bad, bad, ok]) == 0.5


async def test_empty_mix_runs_nothing() -> None:
    assert await run_benign_mix("ptl-not-used", BenignTargets()) == []


# --- the lab test ------------------------------------------------------------------

PY = [sys.executable, "-m"]
SITE = "shop.benign.lab"


async def _stun_from(ns: str, server: tuple[str, int]) -> tuple[str, int]:
    loop = asyncio.get_running_loop()
    sock = ns_socket(ns, socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, server)
        msg = aiostun.Message(aiostun.Method.BINDING, aiostun.Class.REQUEST)
        await loop.sock_sendall(sock, bytes(msg))
        resp = aiostun.parse_message(await asyncio.wait_for(loop.sock_recv(sock, 2048), 3))
        assert resp.transaction_id == msg.transaction_id
        return resp.attributes["XOR-MAPPED-ADDRESS"]
    finally:
        sock.close()


@pytest.mark.lab
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_benign_mix_in_lab_and_under_a_block(tmp_path: Path) -> None:
    from netns.lab import Lab
    from netns.process import LabProcess
    from netns.topology import default_topology
    from ptlab.services.ca import LabCA
    from ptlab.services.sshd import READY_MARKER, prepare_sshd

    with Lab(default_topology(0)) as lab:
        web, web6, cdn, svc = lab.addr("web"), lab.addr("web", v6=True), lab.addr("cdn"), \
            lab.addr("svc")
        ca = LabCA.load_or_create(tmp_path / "ca")
        web_cert, web_key = ca.issue(["web.lab"], [web], "web")
        edge_cert, edge_key = ca.issue([SITE], [cdn], "edge")
        (tmp_path / "edge.json").write_text(
            json.dumps({"routes": {SITE: f"http://{web}:80"}}))
        ssh = prepare_sshd(tmp_path / "ssh", [web, "::"], 22)
        ready = READY_PATTERN
        specs = [
            ("dns", "svc", [*PY, "ptlab.services.dns", "--listen", f"{svc}:53",
                            "--zone", f"web.lab={web},{web6}"], ready),
            ("stun", "svc", [*PY, "ptlab.services.stun", "--listen", f"{svc}:3478"], ready),
            ("benign", "web", [*PY, "ptlab.services.benign", "--binary-listen", f"{web}:7000",
                               "--udp-listen", f"{web}:7001"], ready),
            ("web-http", "web", [*PY, "ptlab.services.web", "--listen", f"{web}:80"], ready),
            ("web-https", "web", [*PY, "ptlab.services.web", "--listen", f"{web}:443",
                                  "--tls-cert", str(web_cert), "--tls-key", str(web_key)],
             ready),
            ("edge", "cdn", [*PY, "ptlab.services.edge", "--config",
                             str(tmp_path / "edge.json"), "--listen", f"{cdn}:443",
                             "--tls-cert", str(edge_cert), "--tls-key", str(edge_key)], ready),
            ("sshd", "web", list(ssh.argv), READY_MARKER),
            ("quic", "web", [*PY, "ptlab.services.quicecho", "--listen", f"{web}:443",
                             "--tls-cert", str(web_cert), "--tls-key", str(web_key)], ready),
        ]
        procs: list[LabProcess] = []
        try:
            for name, role, argv, _ in specs:
                procs.append(LabProcess(lab.ns(role), argv, name,
                                        tmp_path / f"{name}.log").start())
            for p, spec in zip(procs, specs, strict=True):
                p.wait_log(spec[3], 15)

            ca_path = str(ca.ca_path)
            targets = BenignTargets(
                https=[(cdn, 443, SITE, ca_path), (web, 443, "web.lab", ca_path)],
                http=[(web, 80, "web.lab")],
                dns=(svc, 53), dns_name="web.lab",
                ssh=(web, 22), binary=(web, 7000), udp=(web, 7001),
                quic=[(web, 443, "web.lab", ca_path)],
            )
            client = lab.ns("client")
            results = asyncio.run(run_benign_mix(client, targets, timeout=5.0, ssh=ssh))
            assert sorted(r.kind for r in results) == sorted(
                ["https", "https", "http", "dns-udp", "dns-tcp", "ssh", "binary", "udp-echo",
                 "quic"])
            assert [r for r in results if not r.ok] == []
            assert collateral_share(results) == 0.0
            # No NAT in the lab: STUN reflects the client's own address.
            assert asyncio.run(_stun_from(client, (svc, 3478)))[0] == lab.addr("client")
            # A certificate from another CA is a failure, not a success.
            other = LabCA.load_or_create(tmp_path / "other-ca")
            [wrong] = asyncio.run(run_benign_mix(client, BenignTargets(
                https=[(cdn, 443, SITE, str(other.ca_path))]), timeout=3.0))
            assert not wrong.ok and "certificate" in (wrong.error or "")
            [wrong_quic] = asyncio.run(run_benign_mix(client, BenignTargets(
                quic=[(web, 443, "web.lab", str(other.ca_path))]), timeout=3.0))
            assert not wrong_quic.ok

            # The censor drops everything to and from the web node.
            lab.exec("censor", ["nft", "-f", "-"], input=(
                "table inet ptltest {\n"
                " chain block {\n"
                "  type filter hook forward priority filter; policy accept;\n"
                f"  ip daddr {web} drop\n  ip saddr {web} drop\n"
                f"  ip6 daddr {web6} drop\n"
                " }\n}\n"))
            results = asyncio.run(run_benign_mix(client, targets, timeout=1.5, ssh=ssh))
            by = {(r.kind, r.target.split("@")[0]): r for r in results}
            blocked = {k for k, r in by.items() if not r.ok}
            assert blocked == {("https", "web.lab"), ("http", "web.lab"),
                               ("ssh", f"{web}:22"), ("binary", f"{web}:7000"),
                               ("udp-echo", f"{web}:7001"), ("quic", "web.lab")}
            assert all(r.error and "timeout" in r.error for r in results if not r.ok)
            # The edge reaches the web node behind the censor, and DNS is elsewhere.
            assert by[("https", SITE)].ok and by[("dns-udp", "web.lab")].ok
            assert collateral_share(results) == pytest.approx(6 / 9)
        finally:
            for p in reversed(procs):
                p.stop()
