"""The peers that scripts/setup --peers built are what the manifest says they are:
each binary's Go build info names the pinned module at the pinned version with the
manifest's checksum, carries the replacements the module's go.mod makes, and its
SHA-256 is the manifest's (docs/lab/peers.md §1.3)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ptlab.common import peers

pytestmark = [pytest.mark.interop]

PINS = {p.name: p for p in peers.load_pins()}


@pytest.mark.parametrize("name", list(PINS))
def test_each_built_peer_matches_its_pin_and_manifest(name):
    pin = PINS[name]
    entry = peers.read_manifest()["peers"].get(name)
    if entry is None or entry.get("key") != pin.key:
        pytest.skip(peers.why_missing(next(iter(pin.packages))))
    go = shutil.which("go")
    if go is None:
        pytest.skip("no go command to read the build info with")
    assert (entry["module"], entry["version"]) == (pin.module, pin.version)
    for tool, info in entry["tools"].items():
        path = peers.peers_dir() / info["path"]
        assert peers.sha256_file(path) == info["sha256"], tool
        out = subprocess.run([go, "version", "-m", str(path)], capture_output=True,
                             text=True, check=True, timeout=30).stdout
        assert out.splitlines()[0].endswith(entry["go"]), out
        mods = {f[1]: f[2:] for f in (line.split() for line in out.splitlines())
                if len(f) >= 3 and f[0] in ("mod", "dep")}
        assert mods[pin.module] == [pin.version, entry["module_sum"]], tool
        assert f"\tpath\t{info['package']}\n" in out, tool
        for rule in entry["replace"]:
            target = rule.split("=>")[1].split()[0]
            assert f"=>\t{target}\t" in out, (tool, rule)
        if pin.tags:
            assert f"-tags={','.join(pin.tags)}" in out, tool
