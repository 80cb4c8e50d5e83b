"""Bring-your-own-tool rows: templates checked at spec load, filled per cell, and a
real tool (Debian's shadowsocks-libev) run from command lines alone."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from hypothesis import given, settings
from hypothesis import strategies as st

from netns.errors import LabError
from netns.process import wait_for_log
from ptlab import plugins
from ptlab.common.flowroles import BENIGN_PORTS
from ptlab.common.wellknown import SERVER_PORT
from ptlab.experiment.spec import SpecError, parse_spec
from ptlab.plugins.base import CellContext
from ptlab.plugins.external import (
    LOCAL_HOST,
    LOCAL_PORT,
    NAMED_PLACEHOLDERS,
    PLACEHOLDERS,
    ExternalPlugin,
)
from ptlab.services.ca import LabCA
from tests.support.extrows import capture_drops, curated, run_row

SS = {"kind": "external", "mode": "socks",
      "server": "ss-server -s {server_host} -p {server_port} -k {secret} "
                "-m chacha20-ietf-poly1305",
      "client": "ss-local -s {server_host} -p {server_port} -l {socks_port} -b {socks_host} "
                "-k {secret} -m chacha20-ietf-poly1305",
      "binaries": ["ss-server", "ss-local"]}


def spec_with(row: dict) -> dict:
    return {"transports": {"mytool": row}, "censors": {"none": {}}}


def test_an_external_row_loads_and_becomes_the_rows_plugin():
    spec = parse_spec(spec_with(SS), known_transports=plugins.available())
    assert "mytool" in spec.transports
    plugin = plugins.get("mytool")
    assert isinstance(plugin, ExternalPlugin) and plugin.peer_binaries() == ["ss-server",
                                                                             "ss-local"]
    assert "ss-local against ss-server" in plugin.description


def test_a_row_whose_client_names_the_resolver_tunnels_through_it():
    """Its flows to the lab resolver are then the transport's, not infrastructure."""
    parse_spec(spec_with(SS))
    assert not plugins.get("mytool").resolver_is_wire
    parse_spec({"transports": {"iodine": curated("iodine")}, "censors": {"none": {}}})
    assert plugins.get("iodine").resolver_is_wire


@pytest.mark.parametrize(("change", "message"), [
    ({"client": "ss-local -l {sock_port}"},
     "transports.mytool.client: unknown placeholder {sock_port} (did you mean 'socks_port'?)"),
    ({"server": "ss-server -p {server_port"}, "transports.mytool.server: "),
    ({"server": "ss-server 'unclosed"}, "transports.mytool.server: No closing quotation"),
    ({"clinet": "x"}, "transports.mytool.clinet: unknown key"),
    ({"mode": "vpn"},
     "transports.mytool.mode: 'vpn' is not supported (supported: socks, forward, tunnel)"),
    ({"server_port": 0}, "transports.mytool.server_port: expected a port number (1-65535)"),
    ({"server_port": 65536}, "transports.mytool.server_port: expected a port number"),
    ({"server_port": "443"}, "transports.mytool.server_port: expected a port number"),
    ({"server_port": True}, "transports.mytool.server_port: expected a port number"),
    ({"server_proto": "quic"},
     "transports.mytool.server_proto: 'quic' is not supported (supported: tcp, udp)"),
    ({"server_probe": "nc -z {server_host} {server_port}", "server_ready": "started"},
     "transports.mytool.server_probe: give server_ready (a line of its log) or server_probe"),
    ({"client_probe": "probe {nope}"}, "transports.mytool.client_probe: unknown placeholder"),
    ({"client_probe": "probe 'x"}, "transports.mytool.client_probe: No closing quotation"),
    ({"mode": "forward"}, "transports.mytool.client: {socks_port} is for mode = \"socks\" "
                          "only; this row's mode is \"forward\" (a forwarder's clients connect "
                          "to {local_host}:{local_port}, with no SOCKS)"),
    ({"client": "fwd -l {local_port}"},
     "transports.mytool.client: {local_port} is for mode = \"forward\" only"),
    ({"server": "ss-server -p {server_port:d}"},
     "transports.mytool.server: {server_port}: Unknown format code 'd'"),
    ({"server": "ss-server -p {server_port!z}"},
     "transports.mytool.server: {server_port}: Unknown conversion specifier z"),
    ({"configs": {"c_json": "{{\"port\": {nope}}}"}},
     "transports.mytool.configs.c_json: unknown placeholder {nope}"),
    ({"configs": {"c.json": "x"}}, "transports.mytool.configs.c.json: a config name must"),
    ({"binaries": "ss-server"}, "transports.mytool.binaries: expected a list"),
    ({"bootstrap_floor_s": "x"}, "transports.mytool.bootstrap_floor_s: expected seconds"),
    ({"lab_cert_names": "www.ptl.example"},
     "transports.mytool.lab_cert_names: expected a list of DNS names"),
    ({"lab_cert_names": []}, "transports.mytool.lab_cert_names: expected a list of DNS names"),
])
def test_bad_templates_fail_at_spec_load_with_the_key_path(change, message):
    with pytest.raises(SpecError) as exc:
        parse_spec(spec_with({**SS, **change}))
    assert str(exc.value).startswith("spec: " + message), exc.value


def test_missing_command_is_named():
    row = dict(SS)
    del row["client"]
    with pytest.raises(SpecError, match="transports.mytool.client: missing"):
        parse_spec(spec_with(row))


class _Lab:
    def addr(self, role: str) -> str:
        return {"bridge": "198.18.3.2", "web": "198.18.5.2"}[role]


def test_templates_and_configs_are_filled_per_cell(tmp_path: Path):
    row = {**SS, "binaries": [sys.executable.rsplit("/", 1)[-1]],
           "configs": {"server.json": '{{"server": "{server_host}", "port": {server_port}, '
                                      '"password": "{secret}"}}'},
           "server": "python3 -c pass --config {config.server.json}"}
    # "server.json" is not an identifier: the config placeholder names must be.
    with pytest.raises(SpecError):
        parse_spec(spec_with(row))
    row["configs"] = {"server_json": row["configs"]["server.json"]}
    row["server"] = "python3 -c pass --config {config.server_json} --state {state}"
    parse_spec(spec_with(row))
    plugin = plugins.get("mytool")
    ctx = CellContext(lab=_Lab(), workdir=tmp_path, options=row, seed=1,  # type: ignore[arg-type]
                      upstream=("198.18.5.2", 80))
    argv = plugin._argv("server", ctx)
    config = Path(argv[argv.index("--config") + 1])
    doc = json.loads(config.read_text())
    secret = (tmp_path / "mytool-state" / "secret").read_text().strip()
    assert doc == {"server": "198.18.3.2", "port": 9850, "password": secret}
    assert argv[-1] == str(tmp_path / "mytool-state")
    assert config == tmp_path / "mytool-state" / "server-server_json"
    # The client gets the same secret in the same cell (the binaries checked here are
    # python3's, so this needs no shadowsocks).
    assert secret in plugin._argv("client", ctx)


def test_configs_may_name_each_other_in_any_order(tmp_path: Path):
    row = {**SS, "binaries": [], "server": "tool {config.a}",
           "configs": {"a": "include {config.b}", "b": "port = {server_port}"}}
    parse_spec(spec_with(row))
    ctx = CellContext(lab=_Lab(), workdir=tmp_path, options=row, seed=1,  # type: ignore[arg-type]
                      upstream=("198.18.5.2", 80))
    argv = plugins.get("mytool")._argv("server", ctx)
    a = Path(argv[1])
    assert a.read_text() == f"include {a.parent / 'server-b'}"
    assert (a.parent / "server-b").read_text() == "port = 9850"


def test_lab_cert_is_issued_by_the_lab_ca_for_the_rows_names(tmp_path: Path):
    """{lab_cert}/{lab_key}: a server certificate the lab's clients trust through the
    lab CA, for the row's names and the bridge's address, the same for both sides."""
    ca = LabCA.load_or_create(tmp_path / "ca")
    row = {**SS, "binaries": [], "server": "tool --cert {lab_cert} --key {lab_key}",
           "client": "tool --ca {lab_ca}", "lab_cert_names": ["www.ptl.example"]}
    parse_spec(spec_with(row))
    ctx = CellContext(lab=_Lab(), workdir=tmp_path, options=row, seed=1,  # type: ignore[arg-type]
                      upstream=("198.18.5.2", 80), lab_ca=ca.ca_path)
    argv = plugins.get("mytool")._argv("server", ctx)
    cert_path, key_path = Path(argv[2]), Path(argv[4])
    leaf, root = x509.load_pem_x509_certificates(cert_path.read_bytes())
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.ca_path.read_bytes()))
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["www.ptl.example"]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["198.18.3.2"]
    key = load_pem_private_key(key_path.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.public_key().public_numbers() == leaf.public_key().public_numbers()
    assert plugins.get("mytool")._argv("client", ctx)[-1] == str(ca.ca_path)
    # The next cell reuses the same files (same names, same address).
    assert plugins.get("mytool")._argv("server", ctx)[2] == str(cert_path)


def test_lab_cert_defaults_to_the_bridges_name_and_needs_a_lab_ca(tmp_path: Path):
    row = {**SS, "binaries": [], "server": "tool --cert {lab_cert}"}
    parse_spec(spec_with(row))
    ctx = CellContext(lab=_Lab(), workdir=tmp_path, options=row, seed=1,  # type: ignore[arg-type]
                      upstream=("198.18.5.2", 80))
    with pytest.raises(LabError, match=r"mytool: \{lab_cert\} needs the lab CA"):
        plugins.get("mytool")._argv("server", ctx)
    ctx.lab_ca = LabCA.load_or_create(tmp_path / "ca").ca_path
    leaf = x509.load_pem_x509_certificates(
        Path(plugins.get("mytool")._argv("server", ctx)[-1]).read_bytes())[0]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["bridge.lab"]


def test_a_tool_that_is_not_installed_is_named(tmp_path: Path):
    parse_spec(spec_with({**SS, "binaries": ["no-such-tool-ptl"]}))
    ctx = CellContext(lab=_Lab(), workdir=tmp_path, options={}, seed=1,  # type: ignore[arg-type]
                      upstream=("198.18.5.2", 80))
    with pytest.raises(FileNotFoundError, match="no-such-tool-ptl not installed"):
        plugins.get("mytool").servers(ctx)


def test_extlaunch_is_not_ready_while_its_port_is_closed_and_passes_sigterm_on(
        tmp_path: Path):
    server = ("import socket, signal, sys, time\n"
              "time.sleep(0.3)\n"
              "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              "s.bind(('127.0.0.1', 0)); s.listen()\n"
              f"open({str(tmp_path / 'port')!r}, 'w').write(str(s.getsockname()[1]))\n"
              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\n"
              "while True: time.sleep(0.1)\n")
    # The launcher watches port 1, which never opens: the tool runs, no ready event.
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "ptlab.processes.extlaunch", "--ready-port",
                             "127.0.0.1:1", "--component", "t", "--", sys.executable, "-c",
                             server], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not port_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert port_file.exists()
    time.sleep(0.3)  # port 1 never opens: no ready event
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    events = [json.loads(x) for x in out.splitlines()]
    assert [e["event"] for e in events] == ["exited"] and events[0]["status"] == 3
    assert proc.returncode == 3


def test_extlaunch_ready_event(tmp_path: Path):
    import socket as _socket

    listener = _socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    out = subprocess.run([sys.executable, "-m", "ptlab.processes.extlaunch", "--ready-port",
                          f"127.0.0.1:{port}", "--component", "t", "--", sys.executable,
                          "-c", "import time; time.sleep(0.5)"],
                         capture_output=True, text=True, timeout=20)
    listener.close()
    events = [json.loads(x)["event"] for x in out.stdout.splitlines()]
    assert events == ["ready", "exited"] and out.returncode == 0


FET = {"policy": {"rules": [{"detector": "fet", "action": "residual", "probability": 1.0}]},
       "actions": {"residual": {"seconds": [20]}}}


@pytest.mark.lab
def test_debian_shadowsocks_from_command_lines_moves_the_bulk_byte_exact(lab):
    row = run_row(lab, "mytool", SS, bulk_size=2_000_000, benign=True)
    assert row.status == "reachable", row.error
    assert row.goodput_mbit_s and row.collateral == 0.0


@pytest.mark.lab
def test_fet_blocks_shadowsocks_on_its_first_data_packet(lab):
    """Wu et al. (USENIX Security 2023): Shadowsocks' first packet is random-looking,
    so no exemption applies; at p = 1 every connection is caught."""
    row = run_row(lab, "mytool", SS, "gfw-fet-2021", FET, bootstrap_timeout_s=4.0)
    assert (row.status, row.repetitions_ok) == ("blocked", 0), row.error
    assert (row.detector, row.detection_data_packet) == ("fet", 1)
    # The cell's capture, replayed offline (no namespaces, no root), gives the verdict
    # the live censor gave: on the flow it caught, at its first data packet, and every
    # later connection to the server dropped by the residual block.
    from censor_sim.offline import replay
    from censor_sim.profile import load_profile

    events = [json.loads(x) for x in (lab.out_dir / "events.jsonl").read_text().splitlines()]
    (live,) = [e["flow"] for e in events if e.get("cell") == Path(row.cell_dir).name
               and e.get("component") == "censor" and e["event"] == "detection"]
    pcap = lab.out_dir / next(p for p in row.pcaps if "censor-client" in p)
    ours = [v for v in replay(load_profile("gfw-fet-2021", FET), pcap)
            if v.flow["server_port"] == 9850]
    # On failure: every flow's verdict, and tcpdump's own count of packets it dropped.
    why = [v.to_json() for v in ours], pcap.with_suffix(".log").read_text()
    i = next((i for i, v in enumerate(ours) if v.flow == live), None)
    assert i is not None, why
    # Before it, at most the last packets of an earlier cell's connections to the
    # same server (the shared lab's previous Shadowsocks row), which began before
    # this capture did: mid-stream, so not judged.
    assert all(v.midstream and v.verdict == "pass" for v in ours[:i]), why
    assert (ours[i].verdict, ours[i].detector, ours[i].data_packet) == ("residual", "fet", 1), why
    assert not ours[i].midstream, why
    assert {v.verdict for v in ours[i + 1:]} <= {"dropped-by-residual"}, why


@pytest.mark.lab
@pytest.mark.parametrize(("row", "censor", "status"), [
    ("vmess", "none", "reachable"),        # v2ray's VMess over TCP, from config templates
    ("vmess", "gfw-fet-2021", "blocked"),  # Wu et al. 2023: VMess caught
    ("shadowsocks-obfs-http", "gfw-fet-2021", "reachable"),  # HTTP-looking: exempt (Ex5)
    ("vmess-ws-tls", "none", "reachable"),  # VMess over WebSocket+TLS behind nginx
    ("vmess-ws-tls", "gfw-fet-2021", "reachable"),  # a TLS ClientHello: exempt (Ex5)
    ("trojan", "none", "reachable"),        # Debian trojan 1.16, TLS with a password
    ("trojan", "gfw-fet-2021", "reachable"),  # a TLS ClientHello: exempt (Ex5)
])
def test_curated_proxy_rows_against_fet(lab, row, censor, status):
    cell = run_row(lab, row, curated(row), censor, FET if censor != "none" else None,
                   bootstrap_timeout_s=5.0, bulk_size=2_000_000)
    assert cell.status == status, cell.error
    if status == "blocked":
        assert (cell.detector, cell.detection_data_packet) == ("fet", 1)
    else:
        assert cell.detector is None and cell.goodput_mbit_s


@pytest.mark.lab
@pytest.mark.parametrize("row", ["openvpn-udp", "openvpn-tcp", "wireguard"])
def test_tunnel_mode_vpns_move_the_bulk_byte_exact_beside_the_benign_mix(lab, row):
    """Tunnel mode: the tools bring up tun devices; the lab routes the workload
    destination into the client's, and the benign mix stays outside it."""
    cell = run_row(lab, row, curated(row), bulk_size=2_000_000, benign=True)
    assert cell.status == "reachable", cell.error
    assert cell.goodput_mbit_s and cell.collateral == 0.0
    # The routes were put in place for the cell and taken down at its end ...
    events = [json.loads(x) for x in (lab.out_dir / "events.jsonl").read_text().splitlines()]
    routes = [e for e in events if e.get("cell") == Path(cell.cell_dir).name
              and e.get("component") == "tunroute-client"]
    assert [e["event"] for e in routes] == ["ready", "removed"]
    # ... and the bulk crossed the censor inside the VPN's flow: at least its 2 MB
    # in packets to or from the VPN's port, and nothing to the web server but the
    # benign mix's own HTTP (from its labelled ports).
    from scapy.all import IP, TCP, UDP, rdpcap

    client_side = next(p for p in cell.pcaps if "censor-client" in p)
    pkts = rdpcap(str(lab.out_dir / client_side))
    web, _ = lab.runner.services.benign_targets().http[0][:2]
    vpn = [p for p in pkts if (UDP in p or TCP in p) and 9850 in (p.sport, p.dport)]
    crossed = sum(p[IP].len for p in vpn)
    assert crossed > 2_000_000, f"{crossed} bytes; capture drops {capture_drops(lab, cell)}"
    assert not any(IP in p and p[IP].dst == web and TCP in p and p[TCP].dport == 80
                   and p[TCP].sport not in BENIGN_PORTS for p in pkts)


@pytest.mark.lab
@pytest.mark.parametrize(("row", "censor", "detector"), [
    ("openvpn-udp", "openvpn-fingerprint-2022", "openvpn"),  # Xue et al. 2022, UDP ...
    ("openvpn-tcp", "openvpn-fingerprint-2022", "openvpn"),  # ... and TCP, by its framing
    ("wireguard", "tspu-wireguard-2023", "wireguard"),       # the handshake's fixed form
])
def test_vpn_fingerprints_block_the_real_vpns_and_none_of_the_benign_mix(
        lab, row, censor, detector):
    cell = run_row(lab, row, curated(row), censor, bootstrap_timeout_s=6.0,
                   bulk_size=2_000_000, benign=True)
    assert cell.status == "blocked", cell.error
    assert cell.detector == detector
    assert cell.collateral == 0.0
    if row == "openvpn-tcp":  # the Prober confirms it: an explicit server reset
        assert cell.probes_sent >= 1 and cell.probe_verdicts == {"openvpn": cell.probes_sent}
    elif row == "openvpn-udp":  # UDP cannot be probed, as the paper found
        assert cell.probe_verdicts == {"unreachable": cell.probes_sent}


@pytest.mark.lab
def test_the_shadowsocks_prober_classifies_debian_shadowsocks_libev_3_3_5(lab):
    """Alice et al. (IMC 2020) found shadowsocks-libev 3.3.1 and 3.3.3 with AEAD ciphers
    timing out on every probe, replays included; 3.3.5 keeps that behaviour, so the
    prober learns nothing, classifies it so and leaves it alone."""
    cell = run_row(lab, "mytool", SS, "gfw-prober",
                   {"prober": {"watch_s": 1.5, "delay_s": 0.2}}, bulk_size=1_000_000)
    assert cell.status == "reachable", cell.error
    assert cell.probes_sent >= 1 and cell.detector == "fet" and cell.action == "probe"
    assert cell.probe_verdicts == {"timeout-on-every-probe": cell.probes_sent}


@pytest.mark.lab
def test_iodine_tunnels_through_the_lab_resolvers_delegation(lab):
    """Tunnel mode over DNS: iodine asks the lab resolver, which relays tunnel.lab to
    iodined on the bridge; the bulk crosses the censor as DNS queries and answers."""
    cell = run_row(lab, "iodine", curated("iodine"), bulk_size=200_000, benign=True,
                   bootstrap_timeout_s=20.0)
    assert cell.status == "reachable", cell.error
    assert cell.goodput_mbit_s and cell.collateral == 0.0
    from scapy.all import IP, TCP, UDP, rdpcap

    client_side = next(p for p in cell.pcaps if "censor-client" in p)
    resolver = lab.runner.services.benign_targets().dns[0]
    web, _ = lab.runner.services.benign_targets().http[0][:2]
    pkts = rdpcap(str(lab.out_dir / client_side))
    answers = [p for p in pkts if UDP in p and p[IP].src == resolver and p[UDP].sport == 53]
    # The download came back in the resolver's answers: at least the 200 kB bulk ...
    assert sum(p[IP].len for p in answers) > 200_000
    # ... and nothing reached the web server's HTTP outside the benign mix's ports.
    stray = [p.summary() for p in pkts if IP in p and p[IP].dst == web and TCP in p
             and p[TCP].dport == 80 and p[TCP].sport not in BENIGN_PORTS]
    assert not stray, stray[:5]


@pytest.mark.lab
def test_the_dns_tunnel_model_blocks_iodine_and_none_of_the_benign_mix(lab):
    cell = run_row(lab, "iodine", curated("iodine"), "dns-tunnel-model", bulk_size=200_000,
                   benign=True, bootstrap_timeout_s=20.0)
    assert cell.status == "blocked", cell.error
    assert cell.detector == "dns_tunnel" and cell.collateral == 0.0


@pytest.fixture
def inner_tls(lab):
    """The cell's workloads speak HTTPS inside the transport (workloads.inner_tls)."""
    lab.spec.workloads.inner_tls = True
    try:
        yield lab
    finally:
        lab.spec.workloads.inner_tls = False


@pytest.mark.lab
def test_workloads_can_carry_https_inside_the_transport(inner_tls):
    cell = run_row(inner_tls, "mytool", SS, bulk_size=1_000_000)
    assert cell.status == "reachable", cell.error
    assert cell.goodput_mbit_s and not cell.notes


@pytest.mark.lab
def test_the_tls_in_tls_censor_blocks_shadowsocks_carrying_https_and_no_benign_flow(inner_tls):
    """Xue et al. 2024's detector on the datapath, with the model trained in the lab
    on plain flows only: Shadowsocks carrying the user's HTTPS is dropped at its 25th
    data packet; the benign mix's own HTTPS, HTTP and SSH pass."""
    cell = run_row(inner_tls, "mytool", SS, "tls-in-tls-2024", bulk_size=1_000_000,
                   benign=True, bootstrap_timeout_s=4.0)
    assert cell.status == "blocked", cell.error
    assert cell.detector == "tls_in_tls" and cell.collateral == 0.0


# --- placeholders, server address, readiness (issue 45: bringing your own tool) -------

def test_the_unknown_placeholder_error_lists_every_form_a_template_may_use():
    row = {**SS, "configs": {"conf": "x"}, "server": "ss-server {sever_port}"}
    with pytest.raises(SpecError) as exc:
        parse_spec(spec_with(row))
    message = str(exc.value)
    assert "unknown placeholder {sever_port} (did you mean 'server_port'?)" in message
    for name in [*PLACEHOLDERS, *NAMED_PLACEHOLDERS]:
        assert "{" + name + "}" in message, name
    assert "this row's configs: {config.conf}" in message


def test_the_docs_table_lists_every_placeholder_and_no_other():
    """docs/lab/transports.md §7.1 is the user's list: the same as the code's."""
    docs = Path(__file__).resolve().parents[3] / "docs" / "lab" / "transports.md"
    text = docs.read_text()
    table = text[text.index("### 7.1 Placeholders"):text.index("### 7.2")]
    rows = [line for line in table.splitlines() if line.startswith("| `{")]
    named = {m for line in rows for m in re.findall(r"`\{([\w.]+)\}`", line.split("|")[1])}
    assert named == set(PLACEHOLDERS) | set(NAMED_PLACEHOLDERS)


def _plugin(row: dict) -> ExternalPlugin:
    parse_spec(spec_with(row))
    plugin = plugins.get("mytool")
    assert isinstance(plugin, ExternalPlugin)
    return plugin


def _ctx(tmp_path: Path, row: dict, upstream=("198.18.5.2", 80)) -> CellContext:
    return CellContext(lab=_Lab(), workdir=tmp_path, options=row, seed=1,  # type: ignore[arg-type]
                       upstream=upstream)


FWD = {"kind": "external", "mode": "forward", "server_proto": "udp",
       "server": "fwd-server -l {server_host}:{server_port} -t {target}",
       "client": "fwd-client -l {local_host}:{local_port} -r {server_host}:{server_port}",
       "binaries": []}


def test_forward_mode_fills_target_and_the_local_port_and_has_no_socks(tmp_path: Path):
    plugin = _plugin({**FWD, "server_port": 443})
    ctx = _ctx(tmp_path, FWD)
    assert plugin._argv("server", ctx) == ["fwd-server", "-l", "198.18.3.2:443",
                                           "-t", "198.18.5.2:80"]
    assert plugin._argv("client", ctx) == ["fwd-client", "-l", f"{LOCAL_HOST}:{LOCAL_PORT}",
                                           "-r", "198.18.3.2:443"]
    ep = plugin.endpoint(ctx)
    assert not ep.socks and (ep.target_host, ep.target_port) == (LOCAL_HOST, LOCAL_PORT)
    # An IPv6 target is written as [V6]:PORT, as tools parse it.
    v6 = _ctx(tmp_path, FWD, upstream=("2001:db8:5::2", 80))
    assert plugin._argv("server", v6)[-1] == "[2001:db8:5::2]:80"


def test_the_server_port_defaults_to_the_labs_and_follows_the_row(tmp_path: Path):
    ctx = _ctx(tmp_path, SS)
    assert _plugin({**SS, "binaries": []})._argv("server", ctx)[4] == str(SERVER_PORT)
    assert _plugin({**SS, "binaries": [], "server_port": 443})._argv("server", ctx)[4] == "443"


def test_a_dns_tunnel_keeps_the_port_the_resolver_delegates_to():
    with pytest.raises(SpecError, match=r"server_port: the lab resolver delegates "
                                        r"\{tunnel_domain\} to port 9850"):
        parse_spec(spec_with({**curated("iodine"), "server_port": 53}))


def _ready(plugin: ExternalPlugin, role: str, tmp_path: Path):
    ctx = _ctx(tmp_path, plugin.options)
    (svc,) = [s for s in (plugin.servers(ctx) if role == "server" else plugin.clients(ctx))
              if s.name == f"mytool-{role}"]
    launch = svc.argv[svc.argv.index("ptlab.processes.extlaunch") + 1:svc.argv.index("--")] \
        if "ptlab.processes.extlaunch" in svc.argv else []
    return svc, launch


def test_a_tcp_server_is_ready_when_its_port_accepts_and_the_words_say_so(tmp_path: Path):
    svc, launch = _ready(_plugin({**SS, "binaries": []}), "server", tmp_path)
    assert launch[:2] == ["--ready-port", "198.18.3.2:9850"]
    assert svc.ready_what == ("ready (waited for TCP 198.18.3.2:9850 to accept a connection "
                              "(server_proto = \"tcp\"))")
    assert svc.ready_hint == ("to wait for something else, set server_ready = \"REGEX\" (a line "
                              "of its log) or server_probe = \"COMMAND\" (exits 0 once it is "
                              "ready); ready_timeout_s (now 15) gives it longer")


def test_a_udp_server_is_ready_when_its_process_has_bound_the_port_not_by_a_tcp_connect(
        tmp_path: Path):
    svc, launch = _ready(_plugin({**FWD, "server_port": 443, "ready_timeout_s": 4}), "server",
                         tmp_path)
    assert launch[:2] == ["--ready-udp", "198.18.3.2:443"]
    assert "--ready-port" not in svc.argv
    assert svc.ready_what == ("ready (waited for its process to bind UDP 198.18.3.2:443, the "
                              "check for server_proto = \"udp\")")
    assert "server_ready" in svc.ready_hint and "(now 4)" in svc.ready_hint
    # The forwarder's client is ready when its local port accepts.
    svc, launch = _ready(_plugin(FWD), "client", tmp_path)
    assert launch[:2] == ["--ready-port", f"{LOCAL_HOST}:{LOCAL_PORT}"]
    assert "its forwarded port" in str(svc.ready_what)


def test_a_rows_log_line_or_probe_replaces_the_default_check(tmp_path: Path):
    svc, launch = _ready(_plugin({**FWD, "server_ready": "listening on"}), "server", tmp_path)
    assert launch == [] and svc.ready == "listening on" and svc.argv[0] == "fwd-server"
    assert svc.ready_what == "ready (waited for a line of its log matching /listening on/ " \
                             "(server_ready))"
    assert svc.ready_hint == "fix server_ready, or ready_timeout_s (now 15) gives it longer"
    svc, launch = _ready(_plugin({**FWD, "server_probe": "probe -u {server_host} {server_port}"}),
                         "server", tmp_path)
    assert launch[:2] == ["--ready-cmd", "probe -u 198.18.3.2 9850"]
    assert "server_probe to exit 0 (probe -u 198.18.3.2 9850)" in str(svc.ready_what)


def test_a_tunnel_is_ready_when_its_device_is_up(tmp_path: Path):
    row = {**curated("wireguard"), "binaries": []}
    parse_spec({"transports": {"mytool": row}, "censors": {"none": {}}})
    svc, launch = _ready(plugins.get("mytool"), "server", tmp_path)  # type: ignore[arg-type]
    assert launch[0] == "--ready-dev" and "tun device" in str(svc.ready_what)


def test_a_readiness_timeout_says_what_was_waited_for_and_what_changes_it():
    with pytest.raises(LabError) as exc:
        wait_for_log("kcptun-server", lambda: "", lambda: True, lambda text: False, 0.05,
                     "ready (waited for its process to bind UDP 198.18.3.2:443, the check for "
                     "server_proto = \"udp\")", hint="set server_ready")
    assert str(exc.value) == ("kcptun-server not ready (waited for its process to bind UDP "
                              "198.18.3.2:443, the check for server_proto = \"udp\") after 0s; "
                              "set server_ready")


@pytest.mark.lab
def test_a_udp_server_that_never_binds_is_an_error_that_says_so(lab):
    """The default for a UDP row is its bound port, never a TCP connect; the cell's
    ERROR says what was waited for and which keys change it."""
    row = {**FWD, "server": "sleep 30 {server_port}", "client": "sleep 30 {local_port}",
           "binaries": ["sleep"], "ready_timeout_s": 1}
    cell = run_row(lab, "mytool", row)
    assert cell.status == "ERROR"
    bridge = lab.lab.addr("bridge")
    assert cell.error == (f"mytool-server not ready (waited for its process to bind UDP "
                          f"{bridge}:{SERVER_PORT}, the check for server_proto = \"udp\") after "
                          "1s; to wait for something else, set server_ready = \"REGEX\" (a line "
                          "of its log) or server_probe = \"COMMAND\" (exits 0 once it is ready); "
                          "ready_timeout_s (now 1) gives it longer")


_KEYS = st.sampled_from(["server", "client", "server_probe", "client_probe", "server_port",
                         "server_proto", "mode", "server_ready"])
_VALUES = st.one_of(st.text(max_size=40), st.integers(-5, 70000), st.booleans(),
                    st.sampled_from(["{target}", "{local_port}", "{socks_port}", "{config.x}",
                                     "{tool.sing-box}", "{tool.}", "{", "}", "'", "forward",
                                     "tunnel", "udp", "{server_port!r}", "{target:>9}"]))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=5))
def test_any_row_is_loaded_or_refused_in_one_line_naming_its_key(change):
    """Whatever a row holds, the spec loads or fails with a SpecError naming the
    row's key path: never another exception."""
    try:
        parse_spec(spec_with({**FWD, **change}))
    except SpecError as exc:
        assert str(exc).startswith("spec: transports.mytool"), exc
        assert "\n" not in str(exc)
