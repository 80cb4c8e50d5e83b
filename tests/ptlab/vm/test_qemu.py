"""The qemu provider: each machine's command line and qemu arguments from the layout,
and ``down`` finding every qemu of ours (by name) even when ``up`` died half-way."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptlab.vm import qemu
from ptlab.vm.image import Image, ImageInputs
from ptlab.vm.layout import MACHINES


def test_each_machines_command_line_carries_its_addresses_route_and_forwarding():
    client = qemu.kernel_cmdline("client").split()
    assert "ptl.net=eth0:10.0.2.15/24,eth1:198.18.100.10/24" in client
    assert "ptl.route=198.18.101.0/24:198.18.100.2" in client
    assert "ptl.host=ptl-client" in client and "ptl.forward=1" not in client
    censor = qemu.kernel_cmdline("censor").split()
    assert "ptl.net=eth0:10.0.2.15/24,eth1:198.18.100.2/24,eth2:198.18.101.2/24" in censor
    assert "ptl.forward=1" in censor and not any(w.startswith("ptl.route=") for w in censor)
    servers = qemu.kernel_cmdline("servers").split()
    assert "ptl.route=198.18.100.0/24:198.18.101.2" in servers


def test_the_censor_listens_on_both_links_and_the_others_connect(tmp_path):
    img = Image(tmp_path, ImageInputs("bookworm", "m", (), ()))
    links = {"ptl-inside": 40001, "ptl-outside": 40002}
    argvs = {m: qemu.qemu_argv(m, img, tmp_path / f"{m}.qcow2", 2222, links, "tcg",
                               tmp_path / "pid", tmp_path / "serial") for m in MACHINES}
    joined = {m: " ".join(a) for m, a in argvs.items()}
    assert "socket,id=lab0,listen=127.0.0.1:40001" in joined["censor"]
    assert "socket,id=lab1,listen=127.0.0.1:40002" in joined["censor"]
    assert "socket,id=lab0,connect=127.0.0.1:40001" in joined["client"]
    assert "socket,id=lab0,connect=127.0.0.1:40002" in joined["servers"]
    for m, a in argvs.items():
        assert a[a.index("-name") + 1] == f"ptl-vm-{m}"
        assert a[a.index("-smp") + 1] == "1" and "tcg,thread=multi" in a
        assert "hostfwd=tcp:127.0.0.1:2222-:22" in joined[m]  # ssh on the loopback only
    kvm = qemu.qemu_argv("client", img, tmp_path / "c.qcow2", 2222, links, "kvm",
                         tmp_path / "pid", tmp_path / "serial")
    assert kvm[kvm.index("-accel") + 1] == "kvm" and kvm[kvm.index("-cpu") + 1] == "host"


def test_down_stops_every_qemu_of_ours_by_name_and_removes_the_state(tmp_path):
    # A stand-in for a qemu that 'vm up' started before it was killed: its argv
    # names it as ours; nothing else records it.
    sleep = ["-c", "import time; time.sleep(60)", "-drive"]
    fake = subprocess.Popen(["qemu-system-x86_64", *sleep,
                             f"file={tmp_path}/ptl-vm-client.qcow2"], executable=sys.executable)
    # Another lab's qemu (another state directory): never touched.
    other = subprocess.Popen(["qemu-system-x86_64", *sleep,
                              f"file={tmp_path}-other/ptl-vm-client.qcow2"],
                             executable=sys.executable)
    try:
        deadline = time.monotonic() + 5
        while fake.pid not in qemu.our_qemu_pids(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.02)
        ours = qemu.our_qemu_pids(tmp_path)
        assert fake.pid in ours and other.pid not in ours
        (tmp_path / "ptl-vm-client.qcow2").write_text("overlay")
        (tmp_path / "state.json").write_text(json.dumps({"machines": {}}))
        (tmp_path / "unrelated").write_text("kept")
        assert fake.pid in qemu.down(tmp_path)
        assert fake.wait(5) == -signal.SIGKILL
        assert other.poll() is None  # not ours: left alone
        assert sorted(p.name for p in tmp_path.iterdir()) == ["unrelated"]
        assert qemu.load_state(tmp_path) is None
    finally:
        for p in (fake, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_up_refuses_when_the_vms_are_already_up(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps({"machines": {"client": {}}}))
    img = Image(tmp_path, ImageInputs("bookworm", "m", (), ()))
    with pytest.raises(Exception, match="already up"):
        qemu.up(img, tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
@pytest.mark.lab
def test_a_killed_up_leaves_nothing_once_down_has_run(tmp_path):
    """The real thing, when the image is cached: 'vm up' SIGKILLed while the VMs boot,
    then 'vm down': no qemu process, overlay or state is left."""
    from tests.support.vmimage import cached_image

    img = cached_image()
    state = tmp_path / "state"
    code = ("from pathlib import Path; from ptlab.vm import qemu, image; "
            f"qemu.up(image.Image(Path({str(img.dir)!r}), image.default_inputs()), "
            f"Path({str(state)!r}), accel='tcg')")
    up = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        # qemu -daemonize forks: for a moment a machine's qemu is two processes (the
        # parent waits for its child to start), so wait for exactly three.
        deadline = time.monotonic() + 60
        while len(qemu.our_qemu_pids(state)) != 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(qemu.our_qemu_pids(state)) >= 3
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGKILL)  # 'vm up' killed while the VMs boot
        up.wait()
        qemu.down(state)  # what is tested; and no VM outlives a failed assertion
    assert qemu.our_qemu_pids(state) == []
    assert [p.name for p in Path(state).iterdir() if p.name != "ssh"] == []


def test_under_tcg_every_wait_for_a_guest_process_is_longer():
    assert qemu.slowdown("kvm") == 1.0
    assert qemu.slowdown("tcg") == qemu.TCG_SLOWDOWN >= 8.0  # measured: ~8x per start


class _Waits:
    """A process on a host that records how long the backend waits for it."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    def wait_log(self, pattern: str, timeout: float, what: str | None = None,
                 hint: str = "") -> None:
        self.timeouts.append(timeout)


class _Host:
    def __init__(self) -> None:
        self.proc = _Waits()

    def spawn(self, argv, name, log, env=None):
        return self.proc


def test_the_backend_scales_its_waits_by_the_machines_slowdown(tmp_path):
    from ptlab.experiment.backend import CellRun
    from ptlab.plugins.base import Service
    from ptlab.vm.runner import VmBackend
    from tests.support.vmspec import quick_spec

    class Machines:
        hosts = {m: _Host() for m in MACHINES}
        slowdown = qemu.slowdown("tcg")

    backend = VmBackend(quick_spec(), tmp_path, Machines())
    backend.hosts = Machines.hosts
    run = CellRun("obfs4__none")
    backend.start_process(run, Service("obfs4-server", "bridge", ["x"], ready_timeout_s=15.0),
                          tmp_path)
    assert Machines.hosts["servers"].proc.timeouts == [15.0 * qemu.TCG_SLOWDOWN]
    assert run.procs == [Machines.hosts["servers"].proc]
