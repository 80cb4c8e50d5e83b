"""gfw-prober live: suspicion → delayed replay probes from the prober node → blocking."""

from __future__ import annotations

import ipaddress
import sys
import time

import pytest

from netns.process import LabProcess
from ptcommon.events import READY_PATTERN, count_events

pytestmark = pytest.mark.lab

NOISE = bytes.fromhex("8f3a91c4d2e7b05a6c19f3e8a47d20b6") * 6


def test_a_server_that_answers_replays_is_blocked_and_a_silent_one_is_not(
        censor_lab, run_censor, echo, tcp, tmp_path):
    srv = censor_lab.addr("bridge")
    echo([7500])              # answers anything, replays included: no replay filter
    echo([7501], sink=True)   # never answers
    listen = f"{censor_lab.addr('prober')}:9100"
    pool = censor_lab.topology.nodes["prober"].extra_prefixes
    prober = LabProcess(censor_lab.ns("prober"), [sys.executable, "-m", "censor_sim.prober",
                                                  "serve", "--listen", listen,
                                                  "--sources", ",".join(pool)],
                        "prober", tmp_path / "prober.log").start()
    try:
        prober.wait_log(READY_PATTERN, timeout=15)
        # Delays drawn from the published distribution, shrunk 100× and capped at 1 s.
        censor = run_censor("gfw-prober", {"prober": {
            "watch_s": 1.0, "delay": "alice2020", "delay_scale": 0.01, "delay_max_s": 100.0}},
                            prober=listen)
        assert tcp(srv, 7500, [NOISE]) == "ok"       # the real client's session
        assert tcp(srv, 7501, [NOISE], timeout=0.5) == "timeout"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(censor.events("probe_verdict")) < 2:
            time.sleep(0.2)
        verdicts = {e["flow"]["server_port"]: e for e in censor.events("probe_verdict")}
        assert verdicts[7500]["answers_replay"] and verdicts[7500]["escalated"]
        assert not verdicts[7501]["answers_replay"] and not verdicts[7501]["escalated"]
        assert [e["port"] for e in censor.events("block_server")] == [7500]
        delays = [e["request"]["delay_s"] for e in censor.events("probe_request")]
        assert len(delays) == 2 and all(0.0028 <= d <= 1.0 for d in delays)
        assert tcp(srv, 7500, [b"GET / HTTP/1.1\r\n\r\n"], timeout=0.8) == "connect-timeout"
        assert tcp(srv, 7501, [b"GET / HTTP/1.1\r\n\r\n"], timeout=0.5) == "timeout"  # open
        # The probes came from the prober's pool, each connection its own address
        # (none from the client or the prober's link address).
        v4 = ipaddress.ip_network(pool[0])
        for v in verdicts.values():
            assert len(v["sources"]) == v["probes"] >= 3
            assert all(ipaddress.ip_address(a) in v4 for a in v["sources"])
        assert count_events(prober.log_text(), "verdict")
        assert censor.stop()["counters"]["server_drop"]["packets"] >= 1
    finally:
        prober.stop()


def test_probe_service_rejects_bad_requests(censor_lab, tmp_path):
    import asyncio
    import json

    from censor_sim.prober.service import handle_request

    assert "error" in asyncio.run(handle_request([1, 2]))
    assert "error" in asyncio.run(handle_request({"host": "x"}))
    assert "unknown suites" in asyncio.run(handle_request(
        {"host": "198.18.0.1", "port": 1, "suites": ["nope"]}))["error"]
    assert json.dumps(asyncio.run(handle_request({"id": 3, "host": "h", "port": 0})))


def test_runner_starts_the_prober_and_obfs4_survives_it(lab):
    """obfs4's replay filter and silence on bad input give the prober nothing:
    probed, not blocked (the runner starts the probe service for this column)."""
    row = lab.run_cell("obfs4", "gfw-prober", {"prober": {"watch_s": 1.0, "delay_s": 0.2}},
                       bulk_size=1_000_000)
    assert row.status == "reachable", row.error
    assert row.probes_sent >= 1 and row.detector == "fet" and row.action == "probe"
    assert sum(row.probe_verdicts.values()) == row.probes_sent


def _toy_in(ns: str, addr: str, port: int, threshold: int | None):
    """A :class:`ToyServer` listening inside the lab namespace ``ns``."""
    import socket

    from netns.nsenter import ns_socket
    from tests.support.toyserver import ToyServer

    sock = ns_socket(ns)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((addr, port))
    sock.listen(64)
    return ToyServer(threshold, sock=sock)


def test_frolov_trees_label_what_they_probe_and_a_label_blocks(
        censor_lab, run_censor, tcp, tmp_path):
    """The Frolov suite in the live loop: an Outline-like server (closes after 50
    bytes) is labelled and blocked; a read-forever server is labelled MTProto-like
    and, not being on the block list, stays reachable."""
    srv = censor_lab.addr("bridge")
    outline = _toy_in(censor_lab.ns("bridge"), srv, 7510, 50)
    forever = _toy_in(censor_lab.ns("bridge"), srv, 7511, None)
    listen = f"{censor_lab.addr('prober')}:9101"
    prober = LabProcess(censor_lab.ns("prober"), [sys.executable, "-m", "censor_sim.prober",
                                                  "serve", "--listen", listen],
                        "prober", tmp_path / "prober.log").start()
    try:
        prober.wait_log(READY_PATTERN, timeout=15)
        censor = run_censor("gfw-prober", {"prober": {
            "suites": ["frolov"], "watch_s": 1.5, "delay_s": 0.1, "block_on_replay": False,
            "block_labels": ["shadowsocks-outline"]}}, prober=listen)
        tcp(srv, 7510, [NOISE], timeout=0.5)  # the real clients' first payloads
        tcp(srv, 7511, [NOISE], timeout=0.5)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(censor.events("probe_verdict")) < 2:
            time.sleep(0.2)
        labels = {e["flow"]["server_port"]: e["label"] for e in censor.events("probe_verdict")}
        assert labels == {7510: "shadowsocks-outline", 7511: "mtproto"}
        assert [e["port"] for e in censor.events("block_server")] == [7510]
        assert tcp(srv, 7510, [b"x" * 10], timeout=0.8) == "connect-timeout"
        assert tcp(srv, 7511, [b"x" * 10], timeout=0.5) == "timeout"  # reachable, silent
    finally:
        prober.stop()
        outline.close()
        forever.close()


def test_a_probe_that_raises_is_an_error_reply_and_the_service_carries_on(monkeypatch):
    """An exception no suite expected ends that request with an error reply and one
    event line; the connection and the service go on to the next request."""
    import asyncio
    import json

    from censor_sim.prober import service

    calls = []

    async def flaky(req, pool=None):
        calls.append(req["id"])
        if req["id"] == 1:
            raise RuntimeError("a suite's bug")
        return {"id": req["id"], "label": "ok"}

    monkeypatch.setattr(service, "handle_request", flaky)

    # serve() binds where it is told: find a free port first.
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def exchange() -> list[dict]:
        stop = asyncio.Event()
        task = asyncio.create_task(service.serve("127.0.0.1", port, stop))
        for _ in range(50):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.05)
        replies = []
        for rid in (1, 2):
            writer.write(json.dumps({"id": rid}).encode() + b"\n")
            replies.append(json.loads(await asyncio.wait_for(reader.readline(), 5)))
        writer.close()
        stop.set()
        await task
        return replies

    first, second = asyncio.run(exchange())
    assert first == {"id": 1, "error": "probe failed: RuntimeError"}
    assert second == {"id": 2, "label": "ok"} and calls == [1, 2]
