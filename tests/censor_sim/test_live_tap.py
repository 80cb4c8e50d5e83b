"""The on-path censor on the real datapath: NFLOG copies in, conntrack marks out.

An in-path censor holds each inspected packet until its verdict; a tap
(``datapath.mode = "on-path"``) reads copies while the kernel forwards the
packets, so the trigger itself always gets through, and what follows is
blocked by the kernel state the censor writes: a residual set entry, or the
connection's conntrack mark over ctnetlink (docs/lab/censor.md §5).
"""

from __future__ import annotations

import socket
import time

import pytest

from netns.nsenter import ns_socket

pytestmark = pytest.mark.lab

NOISE = bytes.fromhex("8f3a91c4d2e7b05a6c19f3e8a47d20b6") * 4  # not exempt by any rule
HTTP = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
ON_PATH = {"datapath": {"mode": "on-path"}}


def fet(action: str, **datapath) -> dict:
    return {"policy": {"rules": [{"detector": "fet", "action": action, "probability": 1.0}]},
            "actions": {"residual": {"seconds": [3.0]}},
            "datapath": {"mode": "on-path", **datapath}}


def connect(lab, server: str, port: int) -> socket.socket:
    s = ns_socket(lab.ns("client"))
    s.settimeout(2)
    s.connect((server, port))
    return s


@pytest.mark.parametrize(("port", "batch"), [(7150, {}),
                                            (7153, {"tap_batch": 64, "tap_wait_ms": 10})],
                         ids=["one-copy-at-a-time", "batched"])
def test_the_trigger_passes_and_the_residual_blocks_what_follows(
        censor_lab, run_censor, echo, tcp, port, batch):
    srv = censor_lab.addr("bridge")
    server = echo([port])
    censor = run_censor("gfw-fet-2021", fet("residual", **batch))
    assert tcp(srv, port, [HTTP]) == "ok"  # exempt
    # A tap cannot stop the packet it judges: the server gets it and echoes it.
    assert tcp(srv, port, [NOISE]) == "ok"
    assert (port, NOISE) in server.received
    deadline = time.monotonic() + 2
    while not censor.events("action") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tcp(srv, port, [HTTP], timeout=0.8) == "connect-timeout"  # the 3-tuple is blocked
    final = censor.stop()
    assert final["mechanism"] == "nflog"
    assert final["counters"]["residual_drop"]["packets"] >= 1
    [det] = [d for d in censor.events("detection") if d["flow"]["server_port"] == port]
    assert det["detector"] == "fet" and det["actions"] == ["residual"]
    # Copies stop once a flow's inspection budget is spent, as queued packets do.
    assert 0 < final["queued"] < final["counters"]["forwarded"]["packets"]


def test_a_flow_drop_reaches_the_kernel_as_a_conntrack_mark(censor_lab, run_censor, echo):
    srv = censor_lab.addr("bridge")
    server = echo([7151])
    censor = run_censor("gfw-fet-2021", fet("drop"))
    s = connect(censor_lab, srv, 7151)
    try:
        s.sendall(NOISE)
        deadline = time.monotonic() + 2
        while not censor.events("action") and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        # The trigger got through (its echo raced the mark, and may not have).
        assert (7151, NOISE) in server.received
        s.sendall(HTTP)  # the same connection, now marked: dropped
        time.sleep(0.8)
        assert (7151, HTTP) not in server.received
    finally:
        s.close()
    assert run_tcp_ok_elsewhere(censor_lab, srv)
    final = censor.stop()
    assert final["marks_written"] == 1 and final["marks_missing"] == 0
    assert final["counters"]["flow_drop"]["packets"] >= 1


def run_tcp_ok_elsewhere(lab, srv: str) -> bool:
    """A new connection to the same port is a new flow, with no mark."""
    s = connect(lab, srv, 7151)
    try:
        s.sendall(HTTP)
        return s.recv(100) == HTTP
    finally:
        s.close()


def test_a_server_to_client_drop_marks_the_connection_by_its_reply_tuple(
        censor_lab, run_censor, echo):
    """A verdict drawn by the server's packet names the flow in the reply direction;
    the marker falls back to conntrack's reply tuple."""
    from censor_sim import ctmark, datapath
    from netns.nsenter import in_namespace

    srv = censor_lab.addr("bridge")
    echo([7152])
    run_censor("gfw-fet-2021", {**ON_PATH, "policy": {"rules": []}})
    s = connect(censor_lab, srv, 7152)
    try:
        s.sendall(HTTP)
        assert s.recv(100) == HTTP
        cport = s.getsockname()[1]
        marker = in_namespace(censor_lab.ns("censor"), ctmark.Marker, datapath.FLOW_MASK)
        try:
            ok = marker.mark([((srv, censor_lab.addr("client"), 6, 7152, cport),
                               datapath.MARK_DROP),
                              ((srv, censor_lab.addr("client"), 6, 7152, 1), datapath.MARK_DROP)])
        finally:
            marker.close()
        assert ok == [True, False]  # the second connection does not exist
        s.sendall(HTTP)
        s.settimeout(0.8)
        with pytest.raises(TimeoutError):
            s.recv(100)
    finally:
        s.close()


def test_a_tap_resets_a_blocked_name_after_its_hello_reached_the_server(
        censor_lab, run_censor, echo, tcp):
    """The GFW's injectors are on the path, not in it: the ClientHello arrives, the
    forged RSTs go to both ends, and the residual drops what the client sends next.
    Whether the client's end takes the RST depends on the race with the server's
    answer: once the answer has arrived, the RST's sequence number is stale and the
    client's kernel ignores it (RFC 5961), as it would the GFW's."""
    from tests.support.tlsrecords import client_hello

    srv = censor_lab.addr("bridge")
    server = echo([7154])
    censor = run_censor("sni-blocklist", {**ON_PATH,
                                          "actions": {"residual": {"seconds": [5]}}})
    hello = client_hello("www.blocked.lab")
    s = connect(censor_lab, srv, 7154)
    try:
        s.sendall(hello)
        time.sleep(0.5)
        try:
            s.sendall(b"more")
        except OSError:
            pass  # reset already
        time.sleep(0.5)
    finally:
        s.close()
    got = b"".join(data for port, data in server.received if port == 7154)
    assert got.startswith(hello) and b"more" not in got
    assert tcp(srv, 7154, [b"again"], timeout=0.8) == "connect-timeout"  # the residual
    final = censor.stop()
    assert final["mechanism"] == "nflog" and final["injected"] == 6  # RA x3 to each end
    [det] = censor.events("detection")
    assert det["evidence"]["matched"] == "blocked.lab"


@pytest.mark.parametrize(("port", "births", "copies_per_flow"),
                         [(7170, {}, 1), (7173, {"watch_births": False}, 2)],
                         ids=["births-watched", "syns-copied"])
def test_a_payload_censor_on_the_tap_gets_one_copy_per_tcp_flow(
        censor_lab, run_censor, echo, tcp, port, births, copies_per_flow):
    """FET reads only the client's first payload: with births watched the SYN stays in
    the kernel and each connection costs one copy, and every one is still judged
    from its first payload (docs/lab/censor.md §1)."""
    srv = censor_lab.addr("bridge")
    echo([port])
    censor = run_censor("gfw-fet-2021", {**fet("residual", **births),
                                         "policy": {"rules": [{"detector": "fet",
                                                               "action": "residual",
                                                               "probability": 0.0}]}})
    flows = 6
    for _ in range(flows):
        assert tcp(srv, port, [NOISE]) == "ok"
    final = censor.stop()
    detections = [d for d in censor.events("detection") if d["flow"]["server_port"] == port]
    assert len(detections) == flows
    assert all(d["evidence"]["rule"] == "not-exempt" for d in detections)
    assert final["queued"] == flows * copies_per_flow


def test_a_connection_open_before_the_tap_started_is_not_judged_mid_stream(
        censor_lab, run_censor, echo):
    srv, port = censor_lab.addr("bridge"), 7176
    echo([port])
    early = connect(censor_lab, srv, port)
    try:
        early.sendall(HTTP)
        assert early.recv(100)
        censor = run_censor("gfw-fet-2021", fet("residual"))
        early.sendall(NOISE)  # random bytes, mid-stream: not a first payload
        assert early.recv(100)
        final = censor.stop()
    finally:
        early.close()
    assert not [d for d in censor.events("detection") if d["flow"]["server_port"] == port]
    assert final["queued"] == 0
