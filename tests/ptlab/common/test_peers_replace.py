"""The ``replace`` key of a pin in scripts/peers.toml (gotapdance needs its own)."""

from __future__ import annotations

import pytest

from ptlab.common import peers

PIN = """[p]
module = "example.com/m"
version = "v1.0.0"
packages = { tool = "cmd/tool" }
"""


def test_replace_lines_are_read_and_change_the_key(tmp_path):
    plain, replaced = tmp_path / "a.toml", tmp_path / "b.toml"
    plain.write_text(PIN)
    replaced.write_text(PIN + 'replace = ["example.com/x => example.com/y v0.1.0"]\n')
    a, b = peers.load_pins(plain)[0], peers.load_pins(replaced)[0]
    assert a.replace == () and b.replace == ("example.com/x => example.com/y v0.1.0",)
    assert a.key != b.key  # a new replace line rebuilds the peer


def test_the_pinned_conjure_client_restates_gotapdances_replace_lines():
    pin = {p.name: p for p in peers.load_pins()}["conjure-client"]
    assert "github.com/pion/dtls/v2 => github.com/mingyech/dtls/v2 v2.0.0" in pin.replace


def test_an_unknown_key_is_still_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(PIN + 'replaces = ["x"]\n')
    with pytest.raises(ValueError, match="unknown keys"):
        peers.load_pins(path)
