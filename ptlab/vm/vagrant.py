"""The Vagrant VMs of the top-level Vagrantfile, as the runner's three machines.

``ptlab vm up`` is ``vagrant up`` (boots and provisions with scripts/setup);
``ptlab vm down`` is ``vagrant destroy -f``. For a run, :class:`VagrantMachines`
checks that all three VMs are running, copies the current checkout into them
(``vagrant rsync``: they run the code you have), and reaches them with the ssh
config ``vagrant ssh-config`` prints, over one shared connection per VM.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from netns.errors import LabError

from .hosts import SshHost, close_masters, control_dir
from .layout import MACHINES

REPO = Path(__file__).resolve().parent.parent.parent


def vagrant(args: list[str], root: Path = REPO, capture: bool = True,
            timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run vagrant in `root`; LabError in one line when it is missing or fails."""
    exe = shutil.which("vagrant")
    if exe is None:
        raise LabError("vagrant is not installed (scripts/setup installs it)")
    env = {**os.environ, "VAGRANT_CHECKPOINT_DISABLE": "1"}
    try:
        proc = subprocess.run([exe, *args], cwd=root, env=env, text=True, timeout=timeout,
                              capture_output=capture)
    except subprocess.TimeoutExpired:
        raise LabError(f"vagrant {' '.join(args)}: no answer in {timeout:.0f} s") from None
    if proc.returncode != 0:
        text = (proc.stderr or "") + (proc.stdout or "")
        lines = error_exit(text) or text.strip().splitlines()
        raise LabError(f"vagrant {' '.join(args)} failed: "
                       f"{lines[-1] if lines else f'exit {proc.returncode}'}")
    return proc


def error_exit(text: str) -> list[str]:
    """The first line of the message of an ``error-exit`` in machine-readable output
    (``ts,target,error-exit,Class,message``, with escaped newlines and commas)."""
    for line in text.splitlines():
        parts = line.split(",", 4)
        if len(parts) == 5 and parts[2] == "error-exit":
            msg = parts[4].replace("%!(VAGRANT_COMMA)", ",").replace("\\n", "\n")
            return [msg.strip().splitlines()[0]] if msg.strip() else []
    return []


def parse_status(text: str) -> dict[str, str]:
    """Machine -> state from ``vagrant status --machine-readable``
    (lines ``timestamp,target,type,data``)."""
    states: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(",", 3)
        if len(parts) == 4 and parts[2] == "state" and parts[1]:
            states[parts[1]] = parts[3]
    return states


class VagrantMachines:
    """The running VMs, reached over ssh; `work` keeps the ssh config and sockets."""

    slowdown = 1.0  # Vagrant's providers (libvirt, VirtualBox) virtualise in hardware

    def __init__(self, work: Path, root: Path = REPO) -> None:
        self.work, self.root = Path(work), root
        self.hosts: dict[str, SshHost] = {}

    def up(self) -> VagrantMachines:
        states = parse_status(vagrant(["status", "--machine-readable"], self.root).stdout)
        down = {m: states.get(m, "missing") for m in MACHINES if states.get(m) != "running"}
        if down:
            raise LabError("the VMs are not all running (" + ", ".join(
                f"{m}: {s}" for m, s in down.items()) + "): run 'ptlab vm up' first")
        vagrant(["rsync"], self.root)
        self.work.mkdir(parents=True, exist_ok=True)
        cfg = self.work / "ssh_config"
        cfg.write_text(vagrant(["ssh-config", *MACHINES], self.root).stdout)
        control = control_dir(self.work / "ssh")
        self.hosts = {m: SshHost(m, cfg, control_dir=control) for m in MACHINES}
        return self

    def down(self) -> None:
        """Close the shared ssh connections; the VMs stay up for the next run."""
        close_masters(self.hosts)
        self.hosts = {}
