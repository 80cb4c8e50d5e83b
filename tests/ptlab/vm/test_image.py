"""The VM image's inputs, their hash, and the boot-time network script (no VM needed)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

import pytest

from netns.errors import LabError
from ptlab.vm import image
from tests.support.netlab import pair_lab


def test_setup_packages_are_read_from_scripts_setup():
    pkgs = image.setup_packages()
    assert {"tor", "obfs4proxy", "nftables", "nginx", "wireguard-go"} <= set(pkgs)
    assert not any(p.startswith("#") or p.startswith("(") for p in pkgs)


def test_the_image_holds_the_lab_packages_but_not_the_hosts_tools():
    inputs = image.default_inputs()
    assert set(image.BOOT_PACKAGES) <= set(inputs.packages)
    assert "tor" in inputs.packages and "chromium" not in inputs.packages
    assert "vagrant" not in inputs.packages
    assert any(p.startswith("aiortc==") for p in inputs.python_packages)
    assert not any(p.startswith("ptlab==") for p in inputs.python_packages)


def test_the_digest_changes_with_every_input_and_only_then():
    a = image.ImageInputs("bookworm", "http://deb.debian.org/debian", ("tor",), ("x==1",))
    assert a.digest() == replace(a).digest() and len(a.digest()) == 16
    for change in ({"suite": "trixie"}, {"mirror": "http://m/debian"},
                   {"packages": ("tor", "nginx")}, {"python_packages": ("x==2",)},
                   {"recipe": image.RECIPE + 1}):
        assert replace(a, **change).digest() != a.digest(), change


def test_the_mirror_is_read_from_deb822_and_one_line_sources(tmp_path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n")
    assert image.apt_mirror(tmp_path) == "http://mirror.example/debian"
    (d / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text(
        "# comment\ndeb http://security.example/debian-security bookworm-security main\n"
        "deb [arch=amd64] http://one.example/debian bookworm main\n")
    assert image.apt_mirror(tmp_path) == "http://one.example/debian"
    (tmp_path / "sources.list").write_text("")
    with pytest.raises(LabError, match="no Debian mirror"):
        image.apt_mirror(tmp_path)


def test_a_cached_image_is_returned_without_building(tmp_path):
    inputs = image.ImageInputs("bookworm", "http://m/debian", ("tor",), ())
    done = image.Image(tmp_path / inputs.digest(), inputs)
    done.dir.mkdir()
    for p in (done.disk, done.kernel, done.initrd, done.ssh_key, done.manifest):
        p.write_text("x")
    seen = []
    got = image.build(inputs, tmp_path, progress=lambda what, frac: seen.append(what))
    assert got.dir == done.dir and seen == ["cached"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a namespace: root")
@pytest.mark.lab
def test_the_boot_script_sets_addresses_routes_and_forwarding(tmp_path):
    script = tmp_path / "ptl-net"
    script.write_text(image.NET_SCRIPT)
    script.chmod(0o755)
    with pair_lab("vm") as lab:
        ns = lab.ns("vm")

        def sh(*argv: str) -> str:
            return subprocess.run(["ip", "netns", "exec", ns, *argv], check=True,
                                  capture_output=True, text=True).stdout

        sh("ip", "link", "add", "ptlva", "type", "veth", "peer", "name", "ptlvb")
        cmdline = tmp_path / "cmdline"
        cmdline.write_text("console=ttyS0 ptl.net=ptlva:198.18.250.10/24,ptlvb:198.18.251.1/24 "
                           "ptl.route=198.18.252.0/24:198.18.250.2 ptl.forward=1 quiet\n")
        sh(str(script), str(cmdline))
        assert "198.18.250.10/24" in sh("ip", "-4", "addr", "show", "ptlva")
        assert "198.18.251.1/24" in sh("ip", "-4", "addr", "show", "ptlvb")
        assert "198.18.252.0/24 via 198.18.250.2" in sh("ip", "route")
        assert sh("sysctl", "-n", "net.ipv4.ip_forward").strip() == "1"
