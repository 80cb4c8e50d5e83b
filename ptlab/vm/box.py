"""``ptlab vm image --vagrant-box FILE``: the same image as a Vagrant box (libvirt).

Vagrant users with no way to Vagrant Cloud can run the lab's Vagrantfile on the
image that ``ptlab vm image`` built here (``PTLAB_VM_BOX=<name> vagrant up``).
The box is vagrant-libvirt's format: a tar holding

- ``metadata.json``: ``provider`` "libvirt", ``format`` "qcow2" and
  ``virtual_size`` in whole GiB (what vagrant-libvirt reads to make the volume);
- ``box.img``: the image's disk, converted to compressed qcow2;
- ``Vagrantfile``: the box's defaults, merged under the project's. The image has
  no boot loader (qemu boots its kernel directly), so the box does the same
  through vagrant-libvirt's ``kernel``, ``initrd`` and ``cmd_line``, with the
  kernel and initrd shipped in the box; Vagrant logs in as root with the lab key
  shipped beside them (``insert_key`` off: the key is the image's own);
- ``vmlinuz``, ``initrd.img``, ``id_ed25519`` and ``ptlab-image.json`` (the
  image's manifest: what it was built from).

Without ``ptl.net=`` on its command line, the image's eth0 takes DHCP through
systemd-networkd (Vagrant's management network) and Vagrant configures the
private networks itself.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from netns.errors import LabError

from .image import Image, Progress

GIB = 1 << 30
#: The box's kernel command line: the image's root, no ptl.net (Vagrant sets the
#: networks), the classic interface names the image's network files match.
BOX_CMDLINE = "console=ttyS0 root=/dev/vda rw net.ifnames=0 quiet"
#: Files every box holds, in the order they are written to the tar.
MEMBERS = ("metadata.json", "Vagrantfile", "box.img", "vmlinuz", "initrd.img", "id_ed25519",
           "ptlab-image.json")

BOX_VAGRANTFILE = """\
# ptlab's VM image as a vagrant-libvirt box, made by 'ptlab vm image --vagrant-box'.
# The disk has no boot loader: libvirt boots the kernel and initrd shipped here.
here = File.dirname(__FILE__)
Vagrant.configure("2") do |config|
  config.ssh.username = "root"
  config.ssh.private_key_path = File.join(here, "id_ed25519")
  config.ssh.insert_key = false
  config.vm.provider :libvirt do |lv|
    lv.kernel = File.join(here, "vmlinuz")
    lv.initrd = File.join(here, "initrd.img")
    lv.cmd_line = "{cmdline}"
    lv.disk_bus = "virtio"
  end
end
"""


def metadata(image: Image) -> dict:
    """metadata.json: vagrant-libvirt's three fields, the size rounded up."""
    size = image.disk.stat().st_size
    return {"provider": "libvirt", "format": "qcow2", "virtual_size": -(-size // GIB)}


def export(image: Image, dest: Path, progress: Progress = lambda what, done: None) -> Path:
    """Write `image` as a vagrant-libvirt box at `dest` (a tar); return `dest`."""
    if not image.complete():
        raise LabError(f"no complete image at {image.dir}: run 'ptlab vm image' first")
    if shutil.which("qemu-img") is None:
        raise LabError("qemu-img is not installed (apt-get install qemu-utils)")
    dest = Path(dest)
    with tempfile.TemporaryDirectory(prefix="ptl-box-", dir=dest.parent) as tmp:
        work = Path(tmp)
        progress("box: qcow2", 0.0)
        proc = subprocess.run(["qemu-img", "convert", "-c", "-O", "qcow2", str(image.disk),
                               str(work / "box.img")], capture_output=True, text=True)
        if proc.returncode != 0:
            raise LabError(f"qemu-img convert failed: {proc.stderr.strip()}")
        progress("box: files", 0.8)
        (work / "metadata.json").write_text(json.dumps(metadata(image), indent=1) + "\n")
        (work / "Vagrantfile").write_text(BOX_VAGRANTFILE.replace("{cmdline}", BOX_CMDLINE))
        for name, src in (("vmlinuz", image.kernel), ("initrd.img", image.initrd),
                          ("id_ed25519", image.ssh_key), ("ptlab-image.json", image.manifest)):
            shutil.copy2(src, work / name)
        progress("box: tar", 0.85)
        partial = dest.with_name(dest.name + ".partial")
        with tarfile.open(partial, "w") as tar:  # box.img is compressed already
            for name in MEMBERS:
                tar.add(work / name, arcname=name)
        partial.replace(dest)
    progress("box: done", 1.0)
    return dest
