"""experiments/vm.toml on three qemu VMs booted from the cached image gives the namespace
lab's rows: the same status, detector and action for direct and obfs4 under no censor
and an IP blocklist. Under TCG the CPU is emulated, so figures are not compared.

Runs where ``ptlab vm image`` has built the image for this checkout and
PTLAB_VM_TESTS=1 asks for it (the whole run, boot included, takes about six
minutes on an idle machine); skips with the reason otherwise."""

from __future__ import annotations

import shutil

import pytest

from ptlab.experiment.runner import LabRunner
from ptlab.vm import qemu
from ptlab.vm.runner import VmRunner
from tests.support.vmimage import cached_image
from tests.support.vmspec import by_cell, quick_spec

pytestmark = [pytest.mark.lab,
              pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None,
                                 reason="needs qemu-system-x86 (scripts/setup installs it)")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    image = cached_image()
    base = tmp_path_factory.mktemp("vmqemu")
    state_dir = base / "state"
    try:
        state = qemu.up(image, state_dir, accel="tcg")
        work = base / "work"
        with VmRunner(quick_spec(), base / "qemu", qemu.QemuMachines(work, state_dir),
                      work=work) as r:
            vm_rows = r.run_matrix()
    finally:
        stopped = qemu.down(state_dir)
    with LabRunner(quick_spec(), base / "lab") as r:
        lab_rows = r.run_matrix()
    return {"qemu": vm_rows, "lab": lab_rows, "state": state, "stopped": stopped,
            "state_dir": state_dir}


def test_three_qemu_vms_give_the_namespace_labs_status_detector_and_action(runs):
    vms, lab = by_cell(runs["qemu"]), by_cell(runs["lab"])
    assert set(vms) == set(lab) == {(t, c) for t in ("direct", "obfs4")
                                    for c in ("none", "ip-blocklist")}
    for cell, row in lab.items():
        assert row.expectation_met, (cell, row.status, row.error)  # no vacuous match
        got = vms[cell]
        assert (got.status, got.detector, got.action) == (row.status, row.detector,
                                                          row.action), (cell, got.error)
    assert vms[("obfs4", "ip-blocklist")].detector == "ip_blocklist"
    assert runs["state"]["accel"] == "tcg"
    assert all(m["ready_s"] < 300 for m in runs["state"]["machines"].values())


def test_down_left_no_qemu_overlay_or_state(runs):
    assert len(runs["stopped"]) == 3
    assert qemu.our_qemu_pids(runs["state_dir"]) == []
    assert [p.name for p in runs["state_dir"].iterdir() if p.name != "ssh"] == []
