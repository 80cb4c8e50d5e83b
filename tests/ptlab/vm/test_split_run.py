"""A VM run's commands, executed in three namespaces laid out like the VMs, give the
namespace lab's rows (issue 11): direct and obfs4 under none and ip-blocklist.

The same spec (experiments/vm.toml, quick) runs three ways:
- the ordinary namespace lab (``ptlab run``);
- ``ptlab vm run --split``: three namespaces, commands through ``ip netns exec``;
- the same three namespaces reached over ssh, as the VMs are (``vagrant ssh-config``
  style config, one ControlMaster per machine). Each machine's sshd runs in inetd
  mode (``sshd -i``) inside its namespace as the ssh ProxyCommand, so the runner
  goes through ssh, sudo-less root and tar copies exactly as on VMs; only the
  boot is missing.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from scapy.layers.inet import IP
from scapy.utils import rdpcap

from netns import ownership
from netns.sh import which
from ptcommon.events import count_events
from ptlab.experiment.runner import LabRunner
from ptlab.services.sshd import SSHD, prepare_sshd
from ptlab.vm.hosts import SshHost, close_masters, control_dir
from ptlab.vm.layout import SERVER_ROLE_ADDRESSES, VmLab
from ptlab.vm.runner import VmRunner
from ptlab.vm.split import SplitMachines
from tests.support.vmspec import by_cell, quick_spec

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.lab
# Fields that must agree; figures (goodput, latency, counters) are measurements.
SAME = ("status", "error", "detector", "action", "detections", "repetitions", "repetitions_ok",
        "collateral_detections", "benign_total",
        "benign_blocked", "benign_detail", "collateral", "expectation", "expectation_met",
        "probes_sent", "probe_verdicts")
PRESENT = ("bootstrap_s", "goodput_mbit_s", "goodput_ci95", "latency_ms", "bytes_before_block",
           "time_to_detection_s", "censor_cpu_per_flow_ms", "rtt_ms")


class SshSplit(SplitMachines):
    """The split namespaces, reached over ssh like the VMs. Each machine's sshd
    (and all it starts) sees a private, empty tmpfs on `private`, the run's work
    directory: machines share no files, and everything moves by ssh and tar."""

    def __init__(self, python: str, private: Path) -> None:
        super().__init__(python)
        self.private = private

    def up(self) -> SshSplit:
        super().up()
        files = prepare_sshd(self.state_dir / "sshd")
        ip = which("ip")
        lines = []
        # SHLVL=1: bash, started by sshd for each command, reads root's ~/.bashrc
        # unless it is a nested shell. This machine's (a pyenv init) takes 0.6 s,
        # and the run makes about 230 ssh calls; a VM's stock .bashrc is quick.
        for m, h in self.hosts.items():
            lines += [f"Host {m}", "  User root", f"  IdentityFile {files.client_key}",
                      "  IdentitiesOnly yes", "  StrictHostKeyChecking no",
                      "  UserKnownHostsFile /dev/null",
                      f"  ProxyCommand {ip} netns exec {h.ns} unshare --mount --propagation "
                      f"private sh -c 'mkdir -p {self.private} && mount -t tmpfs ptlvm "
                      f"{self.private} && exec {SSHD} -i -o SetEnv=SHLVL=1 -f {files.config}'"]
        cfg = self.state_dir / "ssh_config"
        cfg.write_text("\n".join(lines) + "\n")
        control = control_dir(self.state_dir / "ssh")
        self.ssh = {m: SshHost(m, cfg, python=sys.executable, cwd=str(REPO), sudo=False,
                               control_dir=control) for m in self.hosts}
        self.hosts = self.ssh  # type: ignore[assignment]
        marker = self.private / "orchestrator-only"
        self.shares_files = self.hosts["client"].run(["test", "-e", str(marker)],
                                                     check=False).returncode == 0
        return self

    def down(self) -> None:
        close_masters(getattr(self, "ssh", {}))
        super().down()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if shutil.which(SSHD) is None and not Path(SSHD).exists():
        pytest.skip("no sshd (scripts/setup installs openssh-server)")
    base = tmp_path_factory.mktemp("vmsplit")
    (base / "ssh-work").mkdir()
    (base / "ssh-work" / "orchestrator-only").touch()
    split = SplitMachines(sys.executable)
    ssh = SshSplit(sys.executable, base / "ssh-work")

    def split_run():
        with VmRunner(quick_spec(), base / "split", split) as r:
            return r.run_matrix()

    def lab_run():
        with LabRunner(quick_spec(), base / "lab") as r:
            return r.run_matrix()

    def ssh_run():
        with VmRunner(quick_spec(("direct",)), base / "ssh", ssh, work=base / "ssh-work") as r:
            return r.run_matrix()

    # The three runs are independent labs with ids of their own, and each spends
    # most of its time waiting on its clients: side by side, they take about as
    # long as the longest.
    with ThreadPoolExecutor(3) as pool:
        futures = {name: pool.submit(run) for name, run in
                   (("split", split_run), ("lab", lab_run), ("ssh", ssh_run))}
        out = {name: f.result() for name, f in futures.items()}
    out["split_id"] = split.id
    out["ssh_id"] = ssh.id
    out["ssh_shares_files"] = ssh.shares_files
    out["base"] = base
    return out


def compare(a, b) -> list[str]:
    diffs = [f"{f}: {getattr(a, f)!r} != {getattr(b, f)!r}" for f in SAME
             if getattr(a, f) != getattr(b, f)]
    diffs += [f"{f} present: {getattr(a, f) is not None} != {getattr(b, f) is not None}"
              for f in PRESENT if (getattr(a, f) is None) != (getattr(b, f) is None)]
    return diffs


def test_the_split_gives_the_namespace_labs_rows(runs):
    split, lab = by_cell(runs["split"]), by_cell(runs["lab"])
    assert set(split) == set(lab) == {(t, c) for t in ("direct", "obfs4")
                                      for c in ("none", "ip-blocklist")}
    for cell, row in lab.items():
        assert row.expectation_met, (cell, row.status, row.error)  # no vacuous match
        assert compare(split[cell], row) == [], cell
        assert dataclasses.asdict(split[cell]).keys() == dataclasses.asdict(row).keys()
    assert lab[("obfs4", "ip-blocklist")].detector == "ip_blocklist"
    assert lab[("direct", "none")].benign_total == 10 and lab[("direct", "none")].collateral == 0


def test_traffic_crossed_the_censor_machine_between_client_and_servers(runs):
    rows = by_cell(runs["split"])
    r = rows[("direct", "none")]
    assert r.censor_counters["forwarded"] > 100
    client_side = rdpcap(str(runs["base"] / "split" / r.pcaps[0]))
    bridge = SERVER_ROLE_ADDRESSES["bridge"]
    flows = {(p[IP].src, p[IP].dst) for p in client_side if p.haslayer(IP)}
    assert (VmLab().addr("client"), bridge) in flows and (bridge, VmLab().addr("client")) in flows
    blocked = rows[("direct", "ip-blocklist")]
    assert blocked.censor_counters["blocklist_drop"] > 0


def test_over_ssh_the_same_commands_give_the_same_rows(runs):
    ssh, split = by_cell(runs["ssh"]), by_cell(runs["split"])
    assert set(ssh) == {("direct", "none"), ("direct", "ip-blocklist")}
    assert runs["ssh_shares_files"] is False  # the machines saw only what ssh carried
    for cell, row in ssh.items():
        assert compare(row, split[cell]) == [], cell
    # The cells' logs came back from the machines into the results.
    cells = runs["base"] / "ssh" / "cells"
    assert (cells / "direct__none" / "direct-server.log").stat().st_size > 0
    assert count_events((cells / "direct__none" / "censor.log").read_text(), "counters") == 1


def test_nothing_is_left_behind(runs):
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for key in ("split_id", "ssh_id"):
        lab_id = runs[key]
        assert not [n for n in namespaces.splitlines() if n.startswith(f"ptl{lab_id}-")]
        assert not ownership.state_dir(lab_id).exists()
        assert not list(Path("/etc/netns").glob(f"ptl{lab_id}-*"))
