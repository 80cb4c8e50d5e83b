"""``ptlab vm image``: the VMs' disk image, built here from Debian's packages alone.

The three machines of ``ptlab vm`` boot one image, each through a copy-on-write
overlay of its own. It is built with no download beyond Debian's packages:

1. ``debootstrap`` (minbase) of the suite this machine runs, from the mirror its
   apt sources name, with what a VM needs to boot and be reached (systemd,
   openssh-server, a kernel and initrd, python3);
2. in that root, at native speed, ``apt-get install`` of the lab's own packages
   (``scripts/setup``'s list, less what only a host needs: Vagrant, Chromium),
   with every service that would start on its own masked;
3. the checkout's Python environment: a venv made by the image's python3, with
   this machine's site-packages copied in (CPython 3.11 on both sides, so the
   same wheels), and the checkout itself found at ``/ptlab`` (pushed there per
   run, so the image does not change with the code);
4. the lab's ssh key for root, and ``ptl-net``, which sets each VM's addresses,
   routes and forwarding from its kernel command line (``ptl.net=...``); with no
   ``ptl.net`` there (booted as a Vagrant box), systemd-networkd takes DHCP on eth0;
5. a raw ext4 disk image (``mkfs.ext4 -d``), and the kernel and initrd beside it,
   which qemu boots directly.

The result is cached by a hash of its inputs (suite, mirror, packages, the
venv's package list, this module's recipe version), so a second build takes
seconds. Every step reports to a progress callback (the CLI draws a bar).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from netns.errors import LabError

REPO = Path(__file__).resolve().parent.parent.parent
#: Bump when the recipe changes, so cached images built by the old one are rebuilt.
RECIPE = 2
#: What a VM needs to boot, be reached and run the lab's Python; and, as a Vagrant
#: box, what Vagrant's Debian guest support uses: sudo for its commands, dbus for
#: hostnamectl, rsync for the synced checkout.
BOOT_PACKAGES = ("systemd-sysv", "udev", "kmod", "iproute2", "iputils-ping", "procps",
                 "netbase", "linux-image-cloud-amd64", "openssh-server", "python3",
                 "python3-venv", "ca-certificates", "dbus", "sudo", "rsync")
#: scripts/setup's packages a VM does not need (a host's tools, a browser).
HOST_ONLY = {"vagrant", "chromium", "debootstrap", "qemu-system-x86", "qemu-utils"}
DEFAULT_CACHE = Path(os.environ.get("PTLAB_VM_CACHE", "/var/cache/ptlab/vm"))
Progress = Callable[[str, float], None]  # (what is happening, fraction done 0..1)


@dataclass(frozen=True)
class ImageInputs:
    """Everything the image is made from; its hash names the cached image."""

    suite: str
    mirror: str
    packages: tuple[str, ...]
    python_packages: tuple[str, ...]  # "name==version" of the venv, sorted
    recipe: int = RECIPE

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Image:
    """A built image: where its disk, kernel, initrd and ssh key are."""

    dir: Path
    inputs: ImageInputs
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def disk(self) -> Path:
        return self.dir / "disk.raw"

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"

    @property
    def ssh_key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def manifest(self) -> Path:
        return self.dir / "manifest.json"

    def complete(self) -> bool:
        return all(p.is_file() for p in (self.disk, self.kernel, self.initrd, self.ssh_key,
                                         self.manifest))


# --- inputs --------------------------------------------------------------------------


def setup_packages(setup: Path = REPO / "scripts" / "setup") -> list[str]:
    """The PKGS=( ... ) array of scripts/setup, comments dropped."""
    text = setup.read_text()
    m = re.search(r"^PKGS=\((.*?)^\)", text, re.S | re.M)
    if not m:
        raise LabError(f"{setup}: no PKGS=( ... ) list")
    words = [w for line in m.group(1).splitlines() for w in line.split("#", 1)[0].split()]
    return words


def apt_mirror(sources_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line sources)."""
    candidates = sorted((sources_dir / "sources.list.d").glob("*.sources")) \
        if (sources_dir / "sources.list.d").is_dir() else []
    for path in candidates:
        for block in path.read_text().split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", block, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", block, re.M)
            if uris and suites and "security" not in uris.group(1) and not any(
                    s.endswith("-security") for s in suites.group(1).split()):
                return uris.group(1)
    one_line = sources_dir / "sources.list"
    if one_line.is_file():
        for line in one_line.read_text().splitlines():
            parts = line.split("#", 1)[0].split()
            if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[1]:
                return parts[1] if not parts[1].startswith("[") else parts[2]
    raise LabError("no Debian mirror in /etc/apt: debootstrap needs one")


def host_suite() -> str:
    """This machine's Debian codename (the image runs the same release)."""
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    raise LabError("/etc/os-release names no Debian codename")


def venv_packages(python: str = sys.executable) -> list[str]:
    """``name==version`` of what the venv holds, ptlab itself left out."""
    out = subprocess.run([python, "-m", "pip", "list", "--format=json",
                          "--exclude-editable", "--disable-pip-version-check"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(f"{p['name'].lower()}=={p['version']}" for p in json.loads(out))


def default_inputs() -> ImageInputs:
    packages = sorted(set(BOOT_PACKAGES) | (set(setup_packages()) - HOST_ONLY))
    return ImageInputs(host_suite(), apt_mirror(), tuple(packages), tuple(venv_packages()))


# --- the network script ------------------------------------------------------------

#: Run at boot: ``ptl.net=IFACE:ADDR/LEN,IFACE:ADDR/LEN`` ``ptl.route=DEST:VIA,...``
#: ``ptl.forward=1`` ``ptl.host=NAME`` from the kernel command line.
NET_SCRIPT = r"""#!/bin/sh
# ptl-net: a VM's addresses, routes and forwarding, from its kernel command line.
set -u
for word in $(cat "${1:-/proc/cmdline}"); do
  case "$word" in
    ptl.host=*) hostname "${word#ptl.host=}" ;;
    ptl.net=*) for a in $(echo "${word#ptl.net=}" | tr , ' '); do
        ip link set "${a%%:*}" up; ip addr replace "${a#*:}" dev "${a%%:*}"; done ;;
    ptl.route=*) for r in $(echo "${word#ptl.route=}" | tr , ' '); do
        ip route replace "${r%%:*}" via "${r#*:}"; done ;;
    ptl.forward=1) sysctl -q -w net.ipv4.ip_forward=1 ;;
  esac
done
ip link set lo up
"""

#: Booted as a Vagrant box (no ptl.net= on the command line), eth0 is Vagrant's
#: management network and takes DHCP; under ``ptlab vm up`` ptl-net sets it.
DHCP_NETWORK = """[Match]
Name=eth0
KernelCommandLine=!ptl.net

[Network]
DHCP=ipv4
"""

NET_UNIT = """[Unit]
Description=ptlab: addresses and routes from the kernel command line
After=systemd-udev-settle.service
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/ptl-net
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""


# --- building ------------------------------------------------------------------------


def _run(argv: list[str], what: str, log: Path, env: dict[str, str] | None = None) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise LabError(f"{what} failed (exit {proc.returncode}); see {log}: "
                       + " | ".join(tail))


def _chroot(root: Path, script: str, what: str, log: Path) -> None:
    _run(["chroot", str(root), "/bin/sh", "-c", script], what, log,
         env={"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"})


def _copy_venv(root: Path, python_in_image: str, log: Path) -> None:
    """A venv at /ptlab/.venv made by the image's python3, holding this machine's
    site-packages; the checkout at /ptlab is found through a .pth file."""
    _chroot(root, f"{python_in_image} -m venv /ptlab/.venv", "python3 -m venv", log)
    here = Path(sysconfig.get_paths()["purelib"])
    there = next((root / "ptlab/.venv/lib").glob("python3*/site-packages"))
    for entry in here.iterdir():
        # The editable install points at this checkout (the VM's is /ptlab), and
        # the new venv has its own pip.
        if entry.name.startswith("__editable__") or entry.name.startswith("pip") \
                or (entry.suffix == ".pth" and "editable" in entry.name):
            continue
        dest = there / entry.name
        if entry.is_dir():
            shutil.copytree(entry, dest, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(entry, dest)
    (there / "ptlab-checkout.pth").write_text("/ptlab\n")


def build(inputs: ImageInputs | None = None, cache: Path = DEFAULT_CACHE,
          progress: Progress = lambda what, done: None) -> Image:
    """Build the image for ``inputs`` (by default this machine's), or return the
    cached one. Needs root, debootstrap, chroot and mkfs.ext4."""
    inputs = inputs or default_inputs()
    image = Image(cache / inputs.digest(), inputs)
    if image.complete():
        progress("cached", 1.0)
        return image
    for tool in ("debootstrap", "mkfs.ext4", "chroot"):
        if shutil.which(tool) is None:
            raise LabError(f"{tool} is not installed (apt-get install debootstrap "
                           "qemu-system-x86 qemu-utils)")
    if os.geteuid() != 0:
        raise LabError("ptlab vm image must run as root (debootstrap, chroot)")
    work = image.dir.with_name(image.dir.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    root = work / "root"
    root.mkdir(parents=True)
    log = work / "build.log"
    seconds: dict[str, float] = {}

    def step(name: str, done: float, fn: Callable[[], None]) -> None:
        progress(name, done)
        t0 = time.monotonic()
        fn()
        seconds[name] = round(time.monotonic() - t0, 1)

    boot = sorted(set(BOOT_PACKAGES))
    step("debootstrap", 0.0, lambda: _run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(boot)}", inputs.suite,
         str(root), inputs.mirror], "debootstrap", log))
    lab = [p for p in inputs.packages if p not in boot]
    no_services = ("printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && "
                   "chmod 755 /usr/sbin/policy-rc.d && ")
    step("lab packages", 0.3, lambda: _chroot(
        root, no_services + "apt-get update -q && apt-get install -y -q "
        "--no-install-recommends " + " ".join(lab) + " && apt-get clean && "
        "rm -f /usr/sbin/policy-rc.d", "apt-get install (lab packages)", log))
    step("services", 0.6, lambda: _mask_services(root, log))
    step("python", 0.65, lambda: _copy_venv(root, "python3", log))
    step("ssh and network", 0.8, lambda: _access(root, work, log))
    step("disk", 0.85, lambda: _disk(root, work, log))
    (work / "manifest.json").write_text(json.dumps(
        {"inputs": asdict(inputs), "digest": inputs.digest(), "seconds": seconds,
         "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1))
    shutil.rmtree(root)
    if image.dir.exists():
        shutil.rmtree(image.dir)
    work.rename(image.dir)
    image.seconds = seconds
    progress("done", 1.0)
    return image


#: Services the lab's packages would start at boot: the lab starts its own.
MASKED = ("tor", "tor@default", "coturn", "snowflake-proxy", "iperf3", "shadowsocks-libev",
          "v2ray", "trojan", "openvpn", "iodined", "nginx")


def _mask_services(root: Path, log: Path) -> None:
    units = " ".join(f"{s}.service" for s in MASKED)
    _chroot(root, f"systemctl mask {units} >/dev/null 2>&1; true", "systemctl mask", log)


def _access(root: Path, work: Path, log: Path) -> None:
    key = work / "id_ed25519"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ptlab-vm", "-f", str(key)],
         "ssh-keygen", log)
    ssh = root / "root" / ".ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh / "authorized_keys").write_text((work / "id_ed25519.pub").read_text())
    os.chmod(ssh / "authorized_keys", 0o600)
    conf = root / "etc" / "ssh" / "sshd_config.d"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "ptlab.conf").write_text("PermitRootLogin prohibit-password\n"
                                     "PasswordAuthentication no\nUseDNS no\n")
    script = root / "usr" / "local" / "sbin" / "ptl-net"
    script.write_text(NET_SCRIPT)
    script.chmod(0o755)
    (root / "etc" / "systemd" / "system" / "ptl-net.service").write_text(NET_UNIT)
    wants = root / "etc" / "systemd" / "system" / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "ptl-net.service"
    if not link.exists():
        link.symlink_to("/etc/systemd/system/ptl-net.service")
    network = root / "etc" / "systemd" / "network"
    network.mkdir(parents=True, exist_ok=True)
    (network / "80-ptl-vagrant-dhcp.network").write_text(DHCP_NETWORK)
    # networkd runs (Vagrant's Debian guest writes its private networks for it), but
    # nothing waits for "online": under ptlab vm up no link is networkd's.
    _chroot(root, "systemctl enable systemd-networkd >/dev/null 2>&1 && "
            "systemctl mask systemd-networkd-wait-online.service >/dev/null 2>&1",
            "systemctl enable systemd-networkd", log)
    (root / "etc" / "hostname").write_text("ptl-vm\n")
    (root / "etc" / "fstab").write_text("/dev/vda / ext4 rw,relatime 0 1\n")
    # The serial console, where the boot shows, and no getty waiting elsewhere.
    (root / "ptlab").mkdir(exist_ok=True)


def _disk(root: Path, work: Path, log: Path) -> None:
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    initrds = sorted((root / "boot").glob("initrd.img-*"))
    if not kernels or not initrds:
        raise LabError("the image has no kernel or initrd in /boot")
    shutil.copy2(kernels[-1], work / "vmlinuz")
    shutil.copy2(initrds[-1], work / "initrd.img")
    used = int(subprocess.run(["du", "-sb", str(root)], capture_output=True, text=True,
                              check=True).stdout.split()[0])
    size = (used * 13 // 10 + (512 << 20)) // (1 << 20)  # MiB: 30 % and 512 MiB to spare
    disk = work / "disk.raw"
    _run(["truncate", "-s", f"{size}M", str(disk)], "truncate", log)
    _run(["mkfs.ext4", "-q", "-F", "-L", "ptlroot", "-d", str(root), str(disk)],
         "mkfs.ext4", log)
