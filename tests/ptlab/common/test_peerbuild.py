"""scripts/setup --peers (ptlab.common.peerbuild), with a stand-in for the go command:
the throwaway main module takes over the pinned module's directives, a peer is
rebuilt only when its pin changes, a module the proxy refuses is named with the
proxy's answer, and a run's provenance records the manifest."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from pathlib import Path

import pytest

from ptlab.common import peerbuild, peers, results

# A go.mod as lyrebird's and the Conjure client's are: comments, blocks, a
# single-line replace, a replace block, godebug and exclude.
GOMOD = """\
module example.org/peer // the peer

go 1.22.0

toolchain go1.22.4

godebug (
\ttlsmlkem=0
)

require (
\texample.org/dep v1.0.0 // indirect
)

exclude example.org/bad v0.1.0

replace example.org/utls v1.6.7 => example.org/utls-fork v0.0.0-20260114141111-0f042ad603ef

replace (
\texample.org/dtls/v2 => example.org/fork/dtls/v2 v2.0.0
)
"""

SING_BOX_REFUSAL = (
    "go/pkg/mod/github.com/sagernet/sing-box@v1.14.1/transport/wireguard/device.go:12:2: "
    "github.com/sagernet/wireguard-go@v0.0.6: reading https://proxy.golang.org/github.com/"
    "sagernet/wireguard-go/@v/v0.0.6.zip: 403 Forbidden\n"
    "\tserver response: This module version is not available.\n"
    "go/pkg/mod/github.com/sagernet/sing-box@v1.14.1/transport/wireguard/device.go:13:2: "
    "github.com/sagernet/wireguard-go@v0.0.6: reading https://proxy.golang.org/github.com/"
    "sagernet/wireguard-go/@v/v0.0.6.zip: 403 Forbidden\n"
    "\tserver response: This module version is not available.\n")
GO_INSTALL_REFUSAL = (
    "go: gitlab.torproject.org/tpo/anti-censorship/pluggable-transports/webtunnel/main/"
    "server@v0.0.3: loading deprecation for gitlab.torproject.org/tpo/anti-censorship/"
    "pluggable-transports/webtunnel: module gitlab.torproject.org/tpo/anti-censorship/"
    "pluggable-transports/webtunnel: reading https://proxy.golang.org/gitlab.torproject.org/"
    "tpo/anti-censorship/pluggable-transports/webtunnel/@v/list: 403 Forbidden\n"
    "\tserver response: This module version is not available.\n")


def test_the_main_module_takes_over_go_godebug_replace_and_exclude():
    d = peerbuild.parse_gomod(GOMOD)
    assert d == peerbuild.ModuleDirectives(
        "1.22.0", ("tlsmlkem=0",),
        ("example.org/utls v1.6.7 => example.org/utls-fork v0.0.0-20260114141111-0f042ad603ef",
         "example.org/dtls/v2 => example.org/fork/dtls/v2 v2.0.0"),
        ("example.org/bad v0.1.0",))
    pin = peers.Pin("peer", "example.org/peer", "v1.2.3", {"peer": "cmd/peer"})
    text = peerbuild.main_module(pin, d)
    assert text.startswith("module ptlab.invalid/peers/peer\n\ngo 1.22.0\n")
    assert "\nrequire example.org/peer v1.2.3\n" in text
    # What go itself reads back from it (the same parser, on the file we wrote).
    assert peerbuild.parse_gomod(text) == d


@pytest.mark.parametrize("target", ["./utls", "../utls", "/src/utls"])
def test_a_replace_with_a_directory_is_refused_by_name(target):
    with pytest.raises(ValueError, match="replaces with a directory"):
        peerbuild.parse_gomod(f"module m\ngo 1.22\nreplace example.org/x => {target}\n")


def test_a_go_mod_without_a_go_line_is_refused():
    with pytest.raises(ValueError, match="no go directive"):
        peerbuild.parse_gomod("module m\n")


def test_refusals_name_the_module_its_version_and_the_proxys_answer():
    assert peerbuild.refusals(SING_BOX_REFUSAL, ["https://proxy.golang.org"]) == [{
        "module": "github.com/sagernet/wireguard-go", "version": "v0.0.6",
        "url": "https://proxy.golang.org/github.com/sagernet/wireguard-go/@v/v0.0.6.zip",
        "answer": "403 Forbidden: This module version is not available."}]
    (listing,) = peerbuild.refusals(GO_INSTALL_REFUSAL, ["https://proxy.golang.org"])
    assert listing["module"] == ("gitlab.torproject.org/tpo/anti-censorship/"
                                 "pluggable-transports/webtunnel")
    assert listing["version"] == "" and listing["url"].endswith("/@v/list")
    # The proxy's escaped upper case, and a proxy under a path prefix.
    (gfw,) = peerbuild.refusals("reading https://goproxy.example/go/github.com/apernet/"
                                "!open!g!f!w/@v/v0.4.1.info: 404 Not Found\n",
                                ["https://goproxy.example/go"])
    assert (gfw["module"], gfw["version"], gfw["answer"]) == (
        "github.com/apernet/OpenGFW", "v0.4.1", "404 Not Found")
    assert peerbuild.refusals("# example.org/x\n./x.go:3:1: syntax error\n") == []


# -- a stand-in for go -----------------------------------------------------------

FAKE_GO = textwrap.dedent('''\
    import json, os, sys
    from pathlib import Path
    args = sys.argv[1:]
    log = Path(os.environ["FAKE_GO_LOG"])
    with log.open("a") as fh:
        fh.write(json.dumps({"args": args, "cwd": os.getcwd(),
                             "gomod": Path("go.mod").read_text() if Path("go.mod").exists()
                             else None}) + "\\n")
    if args[:3] == ["mod", "download", "-json"]:
        module, version = args[3].split("@")
        if "refused" in module:
            url = f"https://proxy.golang.org/{module}/@v/{version}.info"
            print(json.dumps({"Path": module, "Version": version, "Error":
                  f"{module}@{version}: reading {url}: 403 Forbidden\\n"
                  "\\tserver response: This module version is not available."}))
            sys.exit(1)
        gomod = Path(os.environ["FAKE_GO_MODS"]) / (module.replace("/", "_") + ".mod")
        gomod.write_text("module " + module + "\\n\\ngo 1.24.0\\n")
        print(json.dumps({"Path": module, "Version": version, "Sum": "h1:sum-" + version,
                          "GoMod": str(gomod)}))
    elif args[0] == "build":
        if "broken" in args[-1]:
            print("./main.go:1:1: syntax error", file=sys.stderr)
            sys.exit(1)
        out = Path(args[args.index("-o") + 1])
        require = next(l for l in Path("go.mod").read_text().splitlines()
                       if l.startswith("require "))
        out.write_text("#!/bin/sh\\n# " + " ".join(args) + "\\n# " + require + "\\n")
        out.chmod(0o755)
    elif args[:2] == ["version", "-m"]:
        _, module, version = open(args[2]).read().splitlines()[2].split()[1:]
        print(f"{args[2]}: go1.26.8\\n\\tpath\\t{module}/cmd\\n"
              f"\\tmod\\t{module}\\t{version}\\th1:sum-{version}")
    ''')


@pytest.fixture
def fake_go(tmp_path, monkeypatch):
    script = tmp_path / "go-fake.py"
    script.write_text(FAKE_GO)
    go = tmp_path / "go"
    go.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    go.chmod(0o755)
    (tmp_path / "mods").mkdir()
    monkeypatch.setenv("FAKE_GO_LOG", str(tmp_path / "go.log"))
    monkeypatch.setenv("FAKE_GO_MODS", str(tmp_path / "mods"))
    return go


def calls(tmp_path: Path) -> list[dict]:
    log = tmp_path / "go.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


PEER = peers.Pin("peer", "example.org/peer", "v1.2.3", {"peer-a": "cmd/a", "peer-b": ""},
                 ("with_utls",), "-X main.version={version}")


def test_a_build_records_module_version_sum_go_tags_and_hashes_then_is_a_no_op(
        tmp_path, fake_go):
    base = tmp_path / "peers"
    said: list[str] = []
    out = peerbuild.build([PEER], base, str(fake_go), said.append)
    assert (out.built, out.current, out.refused, out.failed) == (["peer"], [], [], [])
    entry = peers.read_manifest(base)["peers"]["peer"]
    assert (entry["module"], entry["version"], entry["module_sum"], entry["go"]) == (
        "example.org/peer", "v1.2.3", "h1:sum-v1.2.3", "go1.26.8")
    assert entry["go_directive"] == "1.24.0"  # the module's own, not a made-up one
    assert entry["tags"] == ["with_utls"] and entry["ldflags"] == "-X main.version=v1.2.3"
    for tool, package in (("peer-a", "example.org/peer/cmd/a"), ("peer-b", "example.org/peer")):
        info = entry["tools"][tool]
        assert info["package"] == package
        assert info["sha256"] == hashlib.sha256((base / info["path"]).read_bytes()).hexdigest()
    builds = [c for c in calls(tmp_path) if c["args"][0] == "build"]
    assert [c["args"][-1] for c in builds] == ["example.org/peer/cmd/a", "example.org/peer"]
    assert all({"-mod=mod", "-trimpath", "with_utls"} <= set(c["args"]) for c in builds)
    assert "go 1.24.0" in builds[0]["gomod"]
    assert peers.locate("peer-a", base) == (str((base / "bin/peer-a").resolve()),
                                             "peers example.org/peer@v1.2.3")
    before = len(calls(tmp_path))
    again = peerbuild.build([PEER], base, str(fake_go), said.append)
    assert again.current == ["peer"] and again.built == []
    assert len(calls(tmp_path)) == before  # no go command at all
    assert said[-1] == "peer: example.org/peer@v1.2.3 up to date"


def test_a_changed_pin_or_a_changed_binary_rebuilds(tmp_path, fake_go):
    base = tmp_path / "peers"
    peerbuild.build([PEER], base, str(fake_go), lambda m: None)
    retagged = peers.Pin(**{**PEER.__dict__, "tags": ("with_quic",)})
    assert retagged.key != PEER.key
    assert peerbuild.build([retagged], base, str(fake_go), lambda m: None).built == ["peer"]
    (base / "bin" / "peer-a").write_text("#!/bin/sh\n# tampered\n")
    assert peerbuild.build([retagged], base, str(fake_go), lambda m: None).built == ["peer"]


def test_a_refused_module_is_named_and_the_rest_are_built(tmp_path, fake_go, monkeypatch):
    base = tmp_path / "peers"
    refused = peers.Pin("gone", "example.org/refused", "v0.0.6", {"gone": "cmd/gone"})
    broken = peers.Pin("broken", "example.org/broken", "v1.0.0", {"broken": ""})
    said: list[str] = []
    out = peerbuild.build([refused, broken, PEER], base, str(fake_go), said.append)
    assert (out.built, out.refused, out.failed) == (["peer"], ["gone"], ["broken"])
    assert ("gone: NOT BUILT: the module proxy refused example.org/refused@v0.0.6: "
            "403 Forbidden: This module version is not available.") in said
    failed = peers.read_manifest(base)["failed"]
    assert failed["gone"]["refused"][0]["module"] == "example.org/refused"
    assert "refused" not in failed["broken"] and "syntax error" in failed["broken"]["error"]
    pins = tmp_path / "peers.toml"
    pins.write_text('[gone]\nmodule = "example.org/refused"\nversion = "v0.0.6"\n'
                    'packages = { gone = "cmd/gone" }\n')
    reason = peers.why_missing("gone", base, pins)
    assert reason.startswith("peer gone (example.org/refused@v0.0.6) is not built: run "
                             "`scripts/setup --peers`")
    assert reason.endswith("could not fetch example.org/refused@v0.0.6: the module proxy "
                           "answered 403 Forbidden: This module version is not available.")
    # main's exit status: 1 only for a failure that is not a refusal.
    monkeypatch.setenv(peers.ENV_DIR, str(base))
    pins.write_text(pins.read_text() + '[peer]\nmodule = "example.org/peer"\n'
                    'version = "v1.2.3"\npackages = { peer-a = "cmd/a" }\n')
    assert peerbuild.main(["--pins", str(pins), "--go", str(fake_go)]) == 0
    pins.write_text(pins.read_text() + '[broken]\nmodule = "example.org/broken"\n'
                    'version = "v1.0.0"\npackages = { broken = "" }\n')
    assert peerbuild.main(["--pins", str(pins), "--go", str(fake_go)]) == 1


def test_a_run_records_the_manifest_in_its_provenance(tmp_path, fake_go, monkeypatch):
    base = tmp_path / "peers"
    refused = peers.Pin("gone", "example.org/refused", "v0.0.6", {"gone": "cmd/gone"})
    peerbuild.build([PEER, refused], base, str(fake_go), lambda m: None)
    monkeypatch.setenv(peers.ENV_DIR, str(base))
    prov = results.provenance({"seed": 1}, [], peer_binaries=["peer-a"])
    a = prov["built_peers"]["peer-a"]
    assert {k: a[k] for k in ("peer", "module", "version", "module_sum", "go", "tags",
                              "package", "verified")} == {
        "peer": "peer", "module": "example.org/peer", "version": "v1.2.3",
        "module_sum": "h1:sum-v1.2.3", "go": "go1.26.8", "tags": ["with_utls"],
        "package": "example.org/peer/cmd/a", "verified": True}
    assert a["sha256"] == hashlib.sha256((base / "bin/peer-a").read_bytes()).hexdigest()
    assert set(prov["built_peers"]) == {"peer-a", "peer-b"}
    # A built peer that prints no version is named by its pin among the run's peers.
    assert prov["peers"] == {"peer-a": "example.org/peer@v1.2.3"}
    assert prov["peers_not_built"]["gone"]["refused"][0]["answer"].startswith("403 Forbidden")
    # A binary changed after the build is recorded as such, not passed off as the build.
    (base / "bin" / "peer-b").write_text("#!/bin/sh\n# swapped\n")
    assert peers.provenance(base)["peer-b"]["verified"] is False
