"""Xray-core's VLESS + Vision over REALITY (experiments/peers-reality.toml), Xray on both
sides: the row is declared by command lines and configs alone, finds the xray that
`scripts/setup --peers` builds, and moves the bulk byte-exact through the lab."""

from __future__ import annotations

import json
import subprocess
import tomllib

import pytest

from ptlab import plugins
from ptlab.experiment.spec import load_spec
from ptlab.plugins.external import ExternalPlugin
from tests.support import peers
from tests.support.extrows import EXPERIMENTS, curated, run_row

SPEC = EXPERIMENTS / "peers-reality.toml"
ROW = "xray-vless-reality"


def test_the_row_is_an_external_row_that_names_xray_and_no_python():
    load_spec(SPEC, known_transports=plugins.available())
    plugin = plugins.get(ROW)
    assert isinstance(plugin, ExternalPlugin)
    assert plugin.tools() == ["xray"]
    text = plugin.options["server"] + plugin.options["client"]
    assert "python" not in text and "ptlab" not in text


def test_its_configs_are_json_once_filled():
    """The templates' doubled braces come out as JSON objects Xray can read, with the
    key pair's placeholders left for the server's shell line to fill."""
    configs = tomllib.loads(SPEC.read_text())["transports"][ROW]["configs"]
    values = {"server_host": "198.18.0.9", "server_port": "9850", "socks_host": "127.0.0.1",
              "socks_port": "1080", "uuid": "00112233-4455-6677-8899-aabbccddeeff",
              "secret": "00112233445566778899aabbccddeeff", "target_host": "198.18.0.5"}
    server = json.loads(configs["server"].format(**values))
    client = json.loads(configs["client"].format(**values))
    reality = server["inbounds"][0]["streamSettings"]["realitySettings"]
    assert reality["privateKey"] == "@PRIVATE@" and reality["shortIds"] == ["00112233"]
    assert reality["target"] == "198.18.0.5:443" and reality["serverNames"] == ["web.lab"]
    out = client["outbounds"][0]["streamSettings"]["realitySettings"]
    assert out["password"] == "@PUBLIC@" and out["shortId"] == "00112233"
    assert out["serverName"] == "web.lab" and out["fingerprint"] == "chrome"


@peers.needs("xray")
def test_xrays_key_pair_lines_are_the_ones_the_row_reads():
    """The server's shell line reads `PrivateKey: ` and `Password (PublicKey): ` from
    `xray x25519`; a release that renames them would leave the configs empty."""
    out = subprocess.run([peers.require("xray"), "x25519"], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert len(lines["PrivateKey"]) == 43 and len(lines["Password (PublicKey)"]) == 43
    row = tomllib.loads(SPEC.read_text())["transports"][ROW]["server"]
    assert 's/^PrivateKey: //p' in row and 's/^Password (PublicKey): //p' in row


@pytest.mark.lab
@peers.needs("xray")
def test_xray_reality_moves_the_bulk_byte_exact(lab):
    """Xray on both sides: the workloads are byte-exact through REALITY (a bulk's
    SHA-256 is checked by the workload)."""
    cell = run_row(lab, ROW, curated(ROW, SPEC.name), bulk_size=3_000_000)
    assert cell.status == "reachable", cell.error
    assert cell.repetitions_ok == cell.repetitions == 1
    assert cell.goodput_mbit_s and cell.goodput_mbit_s > 1
