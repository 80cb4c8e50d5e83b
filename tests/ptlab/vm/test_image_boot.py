"""The cached VM image boots under qemu and is reachable by the lab's ssh key, with the
lab's packages and Python environment in it: booted as ``ptlab vm up`` boots it (the
network from ``ptl.net=``, static) and as its Vagrant box boots it (no ``ptl.net``:
eth0 takes DHCP through systemd-networkd, and what Vagrant's Debian guest support
runs is there). Runs only where ``ptlab vm image`` has built the image for this
checkout's inputs and PTLAB_VM_TESTS=1 asks for it (it takes about two
minutes); skips with the reason otherwise."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from ptlab.vm import box, image
from tests.support.vmimage import cached_image

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None,
                                 reason="qemu-system-x86 is not installed")]


def _cached() -> image.Image:
    return cached_image()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LAB_INSIDE = ("/ptlab/.venv/bin/python -c 'import aiortc, scapy, netfilterqueue' && echo "
              "python-ok; command -v tor nginx obfs4proxy | wc -l;")
#: (kernel command line, what runs in the guest, what it prints)
BOOTS = {
    "ptlab vm up": ("console=ttyS0 root=/dev/vda rw net.ifnames=0 ptl.host=ptl-boot "
                    "ptl.net=eth0:10.0.2.15/24",
                    "hostname; " + LAB_INSIDE + " systemctl is-active ptl-net;"
                    " ip -4 -o addr show eth0 | grep -c 'inet 10.0.2.15/24 .*dynamic'; true",
                    ["ptl-boot", "python-ok", "3", "active", "0"]),
    "vagrant box": (box.BOX_CMDLINE,
                    "hostname; " + LAB_INSIDE + " systemctl is-active systemd-networkd;"
                    " ip -4 -o addr show eth0 | grep -c 'inet 10.0.2.15/24 .*dynamic';"
                    " command -v sudo rsync hostnamectl | wc -l",
                    ["ptl-vm", "python-ok", "3", "active", "1", "3"]),
}


@pytest.mark.parametrize("boot", list(BOOTS))
def test_the_cached_image_boots_and_answers_ssh_with_the_lab_inside(tmp_path, boot):
    cmdline, check, expected = BOOTS[boot]
    built = _cached()
    overlay = tmp_path / "ptl-boot.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(built.disk),
                    "-F", "raw", str(overlay)], check=True)
    port = _free_port()
    vm = subprocess.Popen(
        ["qemu-system-x86_64", "-name", "ptl-boot-test", "-accel", "tcg,thread=multi",
         "-cpu", "max", "-m", "1024", "-smp", "1", "-nographic", "-no-reboot",
         "-kernel", str(built.kernel), "-initrd", str(built.initrd),
         "-append", cmdline,
         "-drive", f"file={overlay},if=virtio,format=qcow2",
         "-netdev", f"user,id=m,hostfwd=tcp:127.0.0.1:{port}-:22",
         "-device", "virtio-net-pci,netdev=m"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, out = time.monotonic() + 240, None
        while time.monotonic() < deadline and vm.poll() is None:
            p = subprocess.run(["ssh", "-q", "-o", "BatchMode=yes", "-o",
                                "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                                "-o", "ConnectTimeout=3", "-i", str(built.ssh_key), "-p",
                                str(port), "root@127.0.0.1", check],
                               capture_output=True, text=True)
            if p.returncode == 0:
                out = p.stdout.split()
                break
            time.sleep(2)
        assert out == expected, out
    finally:
        vm.kill()
        vm.wait(10)
