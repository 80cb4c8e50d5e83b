"""The qemu provider: the Vagrantfile's three machines, booted here from ``ptlab vm image``.

``ptlab vm up --provider qemu`` starts three qemu processes, one vCPU each,
each on a copy-on-write overlay of the cached image, with the kernel and
initrd booted directly. The machines' links are qemu socket netdevs on the
loopback: the censor listens for the ``ptl-inside`` link (to the client) and
the ``ptl-outside`` link (to the servers), so lab traffic never touches a
host device. Each machine also has a user-mode management NIC whose ssh port
is forwarded to a loopback port, which is how ``ptlab vm run`` reaches it.
Addresses, routes and the censor's forwarding ride on each kernel command
line and are set at boot by the image's ``ptl-net``.

KVM is used when qemu starts a guest with it (a short probe); otherwise TCG,
which is what these machines give (their KVM runs only guest kernels built
for it). The state directory records what runs where, and the accelerator.
``ptlab vm down`` stops every qemu process of ours, by its pid file and by the
``ptl-vm-`` name on its command line (so a ``vm up`` killed half-way leaves
nothing behind), and removes the overlays.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from netns.errors import LabError

from .hosts import SshHost, close_masters, control_dir
from .image import REPO, Image
from .layout import MACHINES, PREFIXLEN

STATE = Path(os.environ.get("PTLAB_VM_STATE", "/var/lib/ptlab/vm-qemu"))
NAME_PREFIX = "ptl-vm-"
MEMORY_MB = 1024
#: The checkout's files a VM needs (the venv is in the image; results stay here).
EXCLUDE = {".git", ".venv", "results", "datasets", ".vagrant", "__pycache__", ".ruff_cache",
           ".pytest_cache", "build"}
Progress = Callable[[str, float], None]


# How many times longer a Python process takes to start under TCG than on the host:
# measured 2026-11-27 with ``python -c 'import ptlab.services.web'``-sized imports on this
# kind of machine (2 cores, three guests), about 6-8 times, so waits take 12.
TCG_SLOWDOWN = 12.0


def slowdown(accel: str) -> float:
    """The factor that waits for a guest's processes are multiplied by."""
    return 1.0 if accel == "kvm" else TCG_SLOWDOWN


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kernel_cmdline(machine: str) -> str:
    """The VM's command line: its name, eth0 for management (user-mode), eth1 and
    eth2 for its lab networks in the layout's order, its route, forwarding."""
    m = MACHINES[machine]
    nets = ["eth0:10.0.2.15/24"] + [f"eth{i + 1}:{addr}/{PREFIXLEN}"
                                   for i, (_, addr) in enumerate(m.nets)]
    words = ["console=ttyS0", "root=/dev/vda", "rw", "net.ifnames=0", "quiet",
             f"ptl.host=ptl-{machine}", "ptl.net=" + ",".join(nets)]
    if m.route:
        words.append(f"ptl.route={m.route[0]}:{m.route[1]}")
    else:
        words.append("ptl.forward=1")
    return " ".join(words)


def link_ports(state: dict) -> dict[str, int]:
    """One loopback port per lab network, the censor listening on each."""
    return state.setdefault("links", {net: _free_port() for net in ("ptl-inside",
                                                                     "ptl-outside")})


def qemu_argv(machine: str, image: Image, overlay: Path, ssh_port: int,
              links: dict[str, int], accel: str, pidfile: Path, serial: Path) -> list[str]:
    m = MACHINES[machine]
    cpu = "host" if accel == "kvm" else "max"
    argv = ["qemu-system-x86_64", "-name", f"{NAME_PREFIX}{machine}",
            "-accel", "kvm" if accel == "kvm" else "tcg,thread=multi", "-cpu", cpu,
            "-m", str(MEMORY_MB), "-smp", "1", "-display", "none", "-no-reboot",
            "-serial", f"file:{serial}", "-pidfile", str(pidfile), "-daemonize",
            "-kernel", str(image.kernel), "-initrd", str(image.initrd),
            "-append", kernel_cmdline(machine),
            "-drive", f"file={overlay},if=virtio,format=qcow2",
            "-netdev", f"user,id=mgmt,hostfwd=tcp:127.0.0.1:{ssh_port}-:22",
            "-device", "virtio-net-pci,netdev=mgmt"]
    for i, (net, _) in enumerate(m.nets):
        side = "listen" if machine == "censor" else "connect"
        argv += ["-netdev", f"socket,id=lab{i},{side}=127.0.0.1:{links[net]}",
                 "-device", f"virtio-net-pci,netdev=lab{i}"]
    return argv


def kvm_works(image: Image, timeout: float = 8.0) -> bool:
    """Whether qemu boots this kernel with KVM: it prints "Linux version" on the
    serial console in time (a KVM that aborts on an MSR write, or crawls, fails)."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    try:
        proc = subprocess.Popen(
            ["qemu-system-x86_64", "-accel", "kvm", "-cpu", "host", "-m", "256",
             "-display", "none", "-no-reboot", "-serial", "stdio", "-kernel", str(image.kernel),
             "-append", "console=ttyS0 panic=-1"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    except OSError:
        return False
    seen = b""
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None  # stdout=PIPE
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        while time.monotonic() < deadline and proc.poll() is None:
            seen += proc.stdout.read() or b""
            if b"Linux version" in seen:
                return True
            time.sleep(0.1)
        return False
    finally:
        proc.kill()
        proc.wait()


def ssh_config(state_dir: Path, state: dict, key: Path) -> Path:
    cfg = state_dir / "ssh_config"
    cfg.write_text("".join(
        f"Host {m}\n  HostName 127.0.0.1\n  Port {v['ssh_port']}\n  User root\n"
        f"  IdentityFile {key}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
        f"  UserKnownHostsFile /dev/null\n  ConnectTimeout 5\n"
        for m, v in state["machines"].items()))
    return cfg


def _save(state_dir: Path, state: dict) -> None:
    tmp = state_dir / ".state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, state_dir / "state.json")


def load_state(state_dir: Path = STATE) -> dict | None:
    try:
        return json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None


def up(image: Image, state_dir: Path = STATE, accel: str = "auto",
       progress: Progress = lambda what, done: None, boot_timeout: float = 300.0) -> dict:
    """Boot the three machines; return the state (ports, accelerator, timings)."""
    if load_state(state_dir):
        raise LabError(f"the qemu VMs are already up ({state_dir}): 'ptlab vm down' first")
    if shutil.which("qemu-system-x86_64") is None or shutil.which("qemu-img") is None:
        raise LabError("qemu is not installed (scripts/setup installs qemu-system-x86 and "
                       "qemu-utils)")
    state_dir.mkdir(parents=True, exist_ok=True)
    progress("accelerator", 0.0)
    chosen = accel if accel != "auto" else ("kvm" if kvm_works(image) else "tcg")
    state: dict = {"image": str(image.dir), "accel": chosen, "machines": {},
                   "started": time.time()}
    links = link_ports(state)
    _save(state_dir, state)
    t0 = time.monotonic()
    # The censor first: it listens for both links, which the others connect to.
    for i, machine in enumerate(("censor", "client", "servers")):
        progress(f"starting {machine} ({chosen})", 0.05 + 0.05 * i)
        overlay = state_dir / f"{NAME_PREFIX}{machine}.qcow2"
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image.disk),
                        "-F", "raw", str(overlay)], check=True, capture_output=True)
        ssh_port = _free_port()
        pidfile = state_dir / f"{NAME_PREFIX}{machine}.pid"
        serial = state_dir / f"{NAME_PREFIX}{machine}.serial"
        state["machines"][machine] = {"ssh_port": ssh_port, "overlay": str(overlay),
                                      "pidfile": str(pidfile), "serial": str(serial)}
        _save(state_dir, state)
        proc = subprocess.run(qemu_argv(machine, image, overlay, ssh_port, links,
                                        chosen, pidfile, serial),
                              capture_output=True, text=True)
        if proc.returncode != 0:
            down(state_dir)
            raise LabError(f"qemu would not start {machine}: "
                           f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    cfg = ssh_config(state_dir, state, image.ssh_key)
    waiting = set(state["machines"])
    deadline = time.monotonic() + boot_timeout
    while waiting:
        if time.monotonic() > deadline:
            down(state_dir)
            raise LabError(f"no ssh from {', '.join(sorted(waiting))} after "
                           f"{boot_timeout:.0f} s ({chosen})")
        for m in sorted(waiting):
            p = subprocess.run(["ssh", "-F", str(cfg), "-o", "BatchMode=yes", "-o",
                                "LogLevel=ERROR", m, "true"], capture_output=True)
            if p.returncode == 0:
                waiting.discard(m)
                state["machines"][m]["ready_s"] = round(time.monotonic() - t0, 1)
        progress(f"booting ({chosen}): {3 - len(waiting)}/3 answer ssh",
                 0.2 + 0.7 * (3 - len(waiting)) / 3)
        time.sleep(1)
    state["boot_s"] = round(time.monotonic() - t0, 1)
    _save(state_dir, state)
    progress("up", 1.0)
    return state


def _ours(pid: int, state_dir: Path) -> bool:
    """A qemu of this state directory: its overlay (an argument) lies in it."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    mark = f"{state_dir}/{NAME_PREFIX}".encode()
    return bool(cmd) and cmd[0].endswith(b"qemu-system-x86_64") and any(
        mark in a for a in cmd)


def our_qemu_pids(state_dir: Path = STATE) -> list[int]:
    """Every qemu process whose overlay is in ``state_dir``, recorded or not."""
    return sorted(int(e.name) for e in os.scandir("/proc") if e.name.isdigit()
                  and _ours(int(e.name), state_dir))


def down(state_dir: Path = STATE) -> list[int]:
    """Stop every qemu of ``state_dir`` and remove its overlays and state; the pids
    stopped. Found by command line, so a ``vm up`` killed half-way leaves nothing."""
    stopped = our_qemu_pids(state_dir)
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(_ours(p, state_dir) for p in stopped) and time.monotonic() < deadline:
        time.sleep(0.05)
    if state_dir.is_dir():
        for path in state_dir.iterdir():
            if path.name.startswith(NAME_PREFIX) or path.name in ("state.json", "ssh_config"):
                path.unlink(missing_ok=True)
        ssh = state_dir / "ssh"
        shutil.rmtree(ssh, ignore_errors=True)
    return stopped


def checkout_tar() -> bytes:
    """The checkout as a tar stream, less what a VM need not have."""
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for entry in sorted(REPO.iterdir()):
            if entry.name in EXCLUDE:
                continue
            tar.add(entry, arcname=entry.name,
                    filter=lambda t: None if any(part in EXCLUDE
                                                 for part in Path(t.name).parts) else t)
    return buf.getvalue()


class QemuMachines:
    """The booted qemu VMs as the runner's three machines, reached over ssh; the
    checkout is copied to /ptlab on each before a run."""

    def __init__(self, work: Path, state_dir: Path = STATE) -> None:
        self.work, self.state_dir = Path(work), state_dir
        self.hosts: dict[str, SshHost] = {}
        self.accel = "?"
        self.slowdown = 1.0

    def up(self) -> QemuMachines:
        state = load_state(self.state_dir)
        if not state:
            raise LabError("the qemu VMs are not up: run 'ptlab vm up --provider qemu' first")
        self.accel = state["accel"]
        self.slowdown = slowdown(self.accel)
        cfg = self.state_dir / "ssh_config"
        control = control_dir(self.state_dir / "ssh")
        self.hosts = {m: SshHost(m, cfg, sudo=False, control_dir=control) for m in MACHINES}
        data = checkout_tar()
        for host in self.hosts.values():
            host._ssh("rm -rf /ptlab/ptlab /ptlab/transports /ptlab/censor_sim && "
                      "mkdir -p /ptlab && tar -C /ptlab -xf -", input=data, timeout=120)
        return self

    def down(self) -> None:
        """Close the shared ssh connections; the VMs stay up for the next run."""
        close_masters(self.hosts)
        self.hosts = {}
