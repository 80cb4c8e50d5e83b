"""``ptlab vm image --vagrant-box``: the image as a vagrant-libvirt box, checked for
structure (its members, metadata.json, a qcow2 disk holding the image's bytes, the
box's Vagrantfile) and added by the real Vagrant. Built from a small stand-in image,
so it runs everywhere qemu-img is; booting the image the box's way is in
test_image_boot.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from netns.errors import LabError
from ptlab.vm import box
from ptlab.vm.image import Image, ImageInputs

pytestmark = pytest.mark.skipif(shutil.which("qemu-img") is None,
                                reason="qemu-img is not installed (scripts/setup: qemu-utils)")

DISK_BYTES = (1 << 30) + (3 << 20)  # just over 1 GiB: virtual_size rounds up to 2


def stand_in(tmp_path: Path) -> Image:
    """An image's files: a sparse disk with a few known blocks, kernel, initrd, key."""
    img = Image(tmp_path / "img", ImageInputs("bookworm", "http://deb.example", ("tor",),
                                              ("aiortc==1.9.0",)))
    img.dir.mkdir()
    with open(img.disk, "wb") as f:
        f.truncate(DISK_BYTES)
        for offset in (0, 1 << 20, DISK_BYTES - 4096):
            f.seek(offset)
            f.write(os.urandom(4096))
    img.kernel.write_bytes(b"kernel " + os.urandom(64))
    img.initrd.write_bytes(b"initrd " + os.urandom(64))
    img.ssh_key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nlab\n")
    img.manifest.write_text(json.dumps({"digest": img.inputs.digest()}))
    return img


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("box")
    img = stand_in(tmp)
    steps: list[str] = []
    dest = box.export(img, tmp / "ptlab.box", progress=lambda what, done: steps.append(what))
    out = tmp / "unpacked"
    with tarfile.open(dest) as tar:
        names = tar.getnames()
        tar.extractall(out, filter="data")
    return {"image": img, "box": dest, "names": names, "dir": out, "steps": steps}


def test_the_box_holds_vagrant_libvirts_files_and_the_images(exported):
    assert exported["names"] == list(box.MEMBERS)
    d, img = exported["dir"], exported["image"]
    for name, src in (("vmlinuz", img.kernel), ("initrd.img", img.initrd),
                      ("id_ed25519", img.ssh_key), ("ptlab-image.json", img.manifest)):
        assert (d / name).read_bytes() == src.read_bytes(), name
    assert exported["steps"][0] == "box: qcow2" and exported["steps"][-1] == "box: done"
    assert not list(exported["box"].parent.glob("ptl-box-*"))  # its work dir is gone
    assert not exported["box"].with_name("ptlab.box.partial").exists()


def test_metadata_names_the_provider_the_format_and_the_size_rounded_up(exported):
    meta = json.loads((exported["dir"] / "metadata.json").read_text())
    assert meta == {"provider": "libvirt", "format": "qcow2", "virtual_size": 2}


def test_box_img_is_qcow2_with_the_images_bytes(exported):
    img = exported["dir"] / "box.img"
    assert img.read_bytes()[:4] == b"QFI\xfb"
    info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", str(img)],
                                     capture_output=True, text=True, check=True).stdout)
    assert info["format"] == "qcow2" and info["virtual-size"] == DISK_BYTES
    assert "backing-filename" not in info  # self-contained, not an overlay
    assert img.stat().st_size < DISK_BYTES // 50  # sparse and compressed
    same = subprocess.run(["qemu-img", "compare", "-f", "qcow2", "-F", "raw", str(img),
                           str(exported["image"].disk)], capture_output=True, text=True)
    assert same.returncode == 0, same.stdout + same.stderr


def test_the_boxs_vagrantfile_boots_the_shipped_kernel_and_logs_in_with_the_lab_key(exported):
    text = (exported["dir"] / "Vagrantfile").read_text()
    for needle in ('File.join(here, "vmlinuz")', 'File.join(here, "initrd.img")',
                   'File.join(here, "id_ed25519")', "insert_key = false",
                   f'cmd_line = "{box.BOX_CMDLINE}"', 'username = "root"'):
        assert needle in text, needle
    assert "ptl.net" not in box.BOX_CMDLINE  # Vagrant sets the networks, DHCP on eth0
    assert "root=/dev/vda" in box.BOX_CMDLINE and "net.ifnames=0" in box.BOX_CMDLINE


@pytest.mark.skipif(not shutil.which("vagrant"), reason="vagrant is not installed")
def test_vagrant_adds_the_box_for_libvirt(exported, tmp_path):
    env = {**os.environ, "VAGRANT_CHECKPOINT_DISABLE": "1", "VAGRANT_HOME": str(tmp_path)}
    add = subprocess.run(["vagrant", "box", "add", "--name", "ptl-test", str(exported["box"])],
                         env=env, capture_output=True, text=True, timeout=300)
    assert add.returncode == 0, add.stdout + add.stderr
    listed = subprocess.run(["vagrant", "box", "list"], env=env, capture_output=True,
                            text=True, timeout=60).stdout
    assert "ptl-test" in listed and "libvirt" in listed, listed
    added = next(tmp_path.glob("boxes/ptl-test/*/libvirt"))
    assert {p.name for p in added.iterdir()} >= set(box.MEMBERS)


def test_an_incomplete_image_is_refused_in_one_line(tmp_path):
    img = stand_in(tmp_path)
    img.initrd.unlink()
    with pytest.raises(LabError, match="run 'ptlab vm image' first"):
        box.export(img, tmp_path / "x.box")
    assert not (tmp_path / "x.box").exists()
