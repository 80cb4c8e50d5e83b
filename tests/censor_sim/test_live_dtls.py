"""ru-snowflake-dtls-2022 against Debian's pion binaries (snowflake-proxy, snowflake-client).

Our broker (``python -m broker``) and a WebSocket relay that records what
arrives let Debian's snowflake-proxy on the bridge node and snowflake-client
on the client node set up a real WebRTC data channel across the censor
(recipe: docs/transports/snowflake.md §7.4). The DTLS hellos are captured
on the censor and the Russian rules are evaluated on them; then the same
session runs under the censor profile, which must stop it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from censor_sim.detectors import dtls
from censor_sim.profile import load_profile
from netns.capture import Capture
from netns.nsenter import ns_socket
from netns.process import LabProcess
from ptcommon.events import READY_PATTERN, count_events
from transports.snowflake.messages import DEFAULT_BRIDGE_FINGERPRINT

pytestmark = [pytest.mark.lab, pytest.mark.interop,
              pytest.mark.skipif(not (shutil.which("snowflake-proxy")
                                      and shutil.which("snowflake-client")),
                                 reason="Debian's snowflake-proxy/-client are not installed")]

# The Turbo Tunnel preamble's token (docs/transports/turbotunnel.md §2.2).
TOKEN = bytes.fromhex("1293605d278175f5")
NO_ROUTE_STUN = "stun:203.0.113.1:3478"  # no route anywhere in the lab: gathering fails fast


class Rendezvous:
    """Our broker (``python -m broker``) on the broker node; a recording relay on the bridge."""

    def __init__(self, lab, out: Path) -> None:
        self.lab = lab
        self.out = out
        self.relayed = bytearray()
        self.relay_queries: list[str] = []
        self.runners: list = []
        self.broker: LabProcess | None = None

    async def start(self) -> None:
        from aiohttp import WSMsgType, web

        async def relay(request: web.Request) -> web.WebSocketResponse:
            self.relay_queries.append(request.query_string)
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    self.relayed += msg.data
            return ws

        relay_app = web.Application()
        relay_app.add_routes([web.get("/", relay)])
        sock = ns_socket(self.lab.ns("bridge"))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.lab.addr("bridge"), 8081))
        runner = web.AppRunner(relay_app)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        self.runners.append(runner)
        self.relay_url = f"ws://{self.lab.addr('bridge')}:8081/"
        bridges = self.out / "bridges.jsonl"
        bridges.write_text(json.dumps({"displayName": "lab", "webSocketAddress": self.relay_url,
                                       "fingerprint": DEFAULT_BRIDGE_FINGERPRINT}) + "\n")
        exact = f"^{self.lab.addr('bridge')}$"
        self.broker = LabProcess(self.lab.ns("broker"), [
            sys.executable, "-m", "broker", "--addr", f"{self.lab.addr('broker')}:8080",
            "--disable-tls", "--allowed-relay-pattern", exact, "--default-relay-pattern", exact,
            "--bridge-list-path", str(bridges), "--proxy-timeout", "8", "--next-poll", "1000",
            "--unknown-proxies-unrestricted"],  # the lab has no NAT; the proxy can't probe
            "broker", self.out / "broker.log").start()
        await asyncio.to_thread(self.broker.wait_log, READY_PATTERN, 20)
        self.broker_url = f"http://{self.lab.addr('broker')}:8080/"

    def broker_stats(self) -> dict:
        assert self.broker is not None
        self.broker.stop()
        for line in self.broker.log_text().splitlines():
            if count_events(line, "stats"):
                return json.loads(line)
        return {}

    async def close(self) -> None:
        if self.broker is not None and self.broker.running():
            self.broker.stop()
        for r in self.runners:
            await r.cleanup()


async def snowflake_session(lab, out: Path, wait_s: float,
                            seen: dict | None = None, our_proxy: bool = False) -> bytes:
    """Run Debian's proxy and client through the censor, rendezvousing through our
    broker; return what reached the relay (and, in ``seen``, the relay's query
    strings and the broker's final counters)."""
    rv = Rendezvous(lab, out)
    await rv.start()
    host = lab.addr("bridge")  # a suffix pattern, not a regex (docs/transports/snowflake.md §2.6)
    if our_proxy:  # an internal relay address must be named exactly (relaycheck)
        argv = [sys.executable, "-m", "ptlab", "snowflake-proxy", "-broker", rv.broker_url,
                "-relay", rv.relay_url, "-allowed-relay-hostname-pattern", f"^{host}$",
                "-allow-non-tls-relay", "-stun", NO_ROUTE_STUN, "-poll-interval", "1",
                "-nat-probe-server", "", "-unsafe-logging"]
    else:
        argv = ["snowflake-proxy", "-broker", rv.broker_url, "-relay", rv.relay_url,
                "-allowed-relay-hostname-pattern", f"{host}$", "-allow-non-tls-relay",
                "-stun", NO_ROUTE_STUN, "-verbose", "-summary-interval", "1h"]
    proxy = LabProcess(lab.ns("bridge"), argv, "snowflake-proxy", out / "proxy.log").start()
    state = out / "client-state"
    state.mkdir(exist_ok=True)
    env = {**os.environ, "TOR_PT_MANAGED_TRANSPORT_VER": "1",
           "TOR_PT_CLIENT_TRANSPORTS": "snowflake", "TOR_PT_STATE_LOCATION": str(state)}
    client = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns("client"), "snowflake-client", "-url", rv.broker_url,
         "-ice", NO_ROUTE_STUN, "-log", str(out / "client.log")],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = await asyncio.to_thread(_cmethod_port, client)
        reader, writer = await asyncio.open_connection(
            sock=await asyncio.to_thread(_socks_connect, lab, port))
        writer.write(b"HELLO-SNOWFLAKE")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and TOKEN not in rv.relayed:
            await asyncio.sleep(0.2)
        writer.close()
        return bytes(rv.relayed)
    finally:
        client.terminate()
        client.wait(5)
        proxy.stop()
        if seen is not None:
            seen["relay_queries"] = rv.relay_queries
            seen["broker"] = rv.broker_stats()
        await rv.close()


def _cmethod_port(proc: subprocess.Popen) -> int:
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("CMETHOD snowflake socks5"):
            return int(line.split()[-1].rsplit(":", 1)[1])
        if line.startswith("CMETHODS DONE"):
            break
    raise AssertionError("snowflake-client printed no CMETHOD")


def _socks_connect(lab, port: int) -> socket.socket:
    s = ns_socket(lab.ns("client"))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("198.18.255.1") + (1).to_bytes(2, "big"))
    reply = s.recv(10)
    assert reply[:2] == b"\x05\x00", reply
    s.setblocking(False)
    return s


def dtls_hellos(pcap: Path) -> list[tuple[str, bytes]]:
    from scapy.layers.inet import UDP
    from scapy.utils import rdpcap

    out = []
    for p in rdpcap(str(pcap)):
        if UDP in p:
            payload = bytes(p[UDP].payload)
            if dtls.parse_client_hello(payload) is not None:
                out.append(("client_hello", payload))
            elif dtls.parse_server_hello(payload) is not None:
                out.append(("server_hello", payload))
    return out


async def test_pion_hellos_captured_in_the_lab_match_the_2022_rule(censor_lab, tmp_path):
    cap = Capture(censor_lab.ns("censor"), censor_lab.iface("censor", "client"),
                  tmp_path / "dtls.pcap", snaplen=4096, bpf="udp").start()
    try:
        seen: dict = {}
        relayed = await snowflake_session(censor_lab, tmp_path, wait_s=25, seen=seen)
    finally:
        cap.stop()
    assert relayed.startswith(TOKEN), "no data channel with no censor: the setup is broken"
    # Debian's proxy and client rendezvoused through our broker, and the proxy told
    # the relay the client's address (docs/transports/snowflake.md §3.4).
    assert seen["broker"]["client_matched"] == 1 and seen["broker"]["bad_requests"] == 0
    assert seen["broker"]["proxy_polls"] >= 1
    # pion lists its IPv4 and IPv6 candidates in either order, and Tor's proxy
    # reports the first non-local one: either is the client's own address.
    client = {f"client_ip={censor_lab.addr('client', v6=v6)}" for v6 in (False, True)}
    assert client & set(seen["relay_queries"]), seen["relay_queries"]
    hellos = dtls_hellos(tmp_path / "dtls.pcap")
    ch = [p for kind, p in hellos if kind == "client_hello"]
    sh = [p for kind, p in hellos if kind == "server_hello"]
    assert ch and sh, hellos
    # pion (Debian snowflake 2.5.1): the May 2022 ClientHello rule still matches;
    # the December 2021 ServerHello rule no longer does (pion/dtls#410 fixed it).
    assert dtls.ru_2022_clienthello(ch[0])
    assert not dtls.ru_2021_serverhello(sh[0])
    assert dtls.parse_client_hello(ch[0]).supported_groups[:3] == [0x1D, 0x17, 0x18]
    # The 2026 rule's JA4 is this hello's, and the same as pion's marshalling code gives.
    print("pion JA4", dtls.ja4(ch[0]))
    assert dtls.ja4(ch[0]) in load_profile("tspu-dtls-ja4-2026").detectors["dtls"]["ja4"]


async def test_ru_snowflake_dtls_2022_stops_the_session(censor_lab, run_censor, tmp_path):
    censor = run_censor("ru-snowflake-dtls-2022")
    relayed = await snowflake_session(censor_lab, tmp_path, wait_s=10)
    assert TOKEN not in relayed
    det = censor.events("detection")
    assert det and det[0]["detector"] == "dtls"
    assert det[0]["evidence"]["rule"] == "ru_2022_clienthello"
    assert censor.stop()["counters"]["flow_drop"]["packets"] >= 1


async def test_debian_client_through_our_broker_and_our_aiortc_proxy(censor_lab, tmp_path):
    """Debian's snowflake-client rendezvouses through our broker with our proxy: the
    Turbo Tunnel preamble reaches the relay with the client's address. Our proxy is
    the DTLS client here (answerer, setup:active), and aiortc's ClientHello is not
    pion's: the May 2022 Russian rule does not match it (docs/transports/snowflake.md §7.6)."""
    cap = Capture(censor_lab.ns("censor"), censor_lab.iface("censor", "client"),
                  tmp_path / "dtls.pcap", snaplen=4096, bpf="udp").start()
    try:
        seen: dict = {}
        relayed = await snowflake_session(censor_lab, tmp_path, wait_s=25, seen=seen,
                                          our_proxy=True)
    finally:
        cap.stop()
    assert relayed.startswith(TOKEN), (tmp_path / "proxy.log").read_text()[-2000:]
    assert seen["broker"]["client_matched"] == 1
    # pion lists its IPv4 and IPv6 candidates in either order, and Tor's proxy
    # reports the first non-local one: either is the client's own address.
    client = {f"client_ip={censor_lab.addr('client', v6=v6)}" for v6 in (False, True)}
    assert client & set(seen["relay_queries"]), seen["relay_queries"]
    ch = [p for kind, p in dtls_hellos(tmp_path / "dtls.pcap") if kind == "client_hello"]
    assert ch, "no DTLS ClientHello captured"
    hello = dtls.parse_client_hello(ch[0])
    assert hello.supported_groups[:5] == [0x1D, 0x17, 0x1E, 0x18, 0x19]  # aiortc's, not pion's
    assert not dtls.ru_2022_clienthello(ch[0])
    # Nor does the 2026 JA4 rule: OpenSSL's DTLS 1.2 hello has another JA4.
    print("aiortc JA4", dtls.ja4(ch[0]))
    assert dtls.ja4(ch[0]) not in load_profile("tspu-dtls-ja4-2026").detectors["dtls"]["ja4"]


@pytest.mark.parametrize("profile", ["tspu-dtls-ja4-2026", "tspu-snowflake-stall-2024"])
async def test_tspu_stalls_pions_session_after_the_handshake(censor_lab, run_censor, tmp_path,
                                                             profile):
    """Debian's pion proxy is the DTLS client (setup:active), so its hello carries the
    JA4 the 2026 rule names, as the November 2024 stall's did: the handshake completes,
    data starts, and then nothing more reaches the client (docs/censors/russia.md
    §5.5)."""
    records = load_profile(profile).detectors["dtls"]["app_records"]
    censor = run_censor(profile)
    cap = Capture(censor_lab.ns("censor"), censor_lab.iface("censor", "client"),
                  tmp_path / "dtls.pcap", snaplen=256, bpf="udp").start()
    try:
        await snowflake_session(censor_lab, tmp_path, wait_s=12)
    finally:
        cap.stop()
    det = censor.events("detection")
    assert det and det[0]["evidence"]["rule"] == "ja4"
    assert det[0]["evidence"]["app_records"] >= records  # data reached the client first
    assert censor.stop()["counters"]["freeze_drop"]["packets"] >= 1
    # On the client's side of the censor: the handshake's flights, then application
    # data, in both directions, before the stall.
    from scapy.layers.inet import UDP
    from scapy.utils import rdpcap

    client = {censor_lab.addr("client", v6=v6) for v6 in (False, True)}
    app_to_client = sum(dtls.application_records(bytes(p[UDP].payload))
                        for p in rdpcap(str(tmp_path / "dtls.pcap"))
                        if UDP in p and p[UDP].underlayer.dst in client)
    assert app_to_client >= records


async def test_tspu_dtls_ja4_2026_lets_our_aiortc_proxy_through(censor_lab, run_censor,
                                                               tmp_path):
    censor = run_censor("tspu-dtls-ja4-2026")
    relayed = await snowflake_session(censor_lab, tmp_path, wait_s=25, our_proxy=True)
    assert relayed.startswith(TOKEN)
    assert not censor.events("detection")
