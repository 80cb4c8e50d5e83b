"""The whole qemu path, timed: image, boot, provisioning, experiment (issue 26).

Builds the VM image (or finds it cached), boots the three machines with
``ptlab vm up --provider qemu``'s code, pushes the checkout to them, runs the
quick form of ``experiments/vm.toml`` (direct and obfs4 under no censor and
the IP blocklist) across them, stops them, and runs the same spec in the
namespace lab. Printed: each phase's seconds, the accelerator, and each
cell's status, detector and action from both, with whether they agree. Under
TCG goodput measures the emulator, so it is printed but not compared.

Run as root: ``.venv/bin/python benchmarks/vm_qemu.py [--accel auto|kvm|tcg]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    from ptlab.experiment.runner import LabRunner
    from ptlab.vm import image as vmimage
    from ptlab.vm import qemu
    from ptlab.vm.runner import VmRunner
    from tests.support.vmspec import by_cell, quick_spec

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto")
    args = p.parse_args(argv)
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    img = vmimage.build()
    seconds["image"] = time.monotonic() - t0
    with tempfile.TemporaryDirectory(prefix="ptl-vmbench-") as tmp:
        base = Path(tmp)
        state_dir = base / "state"
        try:
            t0 = time.monotonic()
            state = qemu.up(img, state_dir, accel=args.accel)
            seconds["boot (all three answer ssh)"] = time.monotonic() - t0
            work = base / "work"
            machines = qemu.QemuMachines(work, state_dir)
            t0 = time.monotonic()
            machines.up()  # the checkout pushed to each machine
            seconds["provision (checkout pushed)"] = time.monotonic() - t0
            machines.down()
            t0 = time.monotonic()
            with VmRunner(quick_spec(), base / "qemu", qemu.QemuMachines(work, state_dir),
                          work=work) as r:
                vm_rows = r.run_matrix()
            seconds["experiment (4 cells)"] = time.monotonic() - t0
        finally:
            t0 = time.monotonic()
            qemu.down(state_dir)
            seconds["down"] = time.monotonic() - t0
        t0 = time.monotonic()
        with LabRunner(quick_spec(), base / "lab") as r:
            lab_rows = r.run_matrix()
        seconds["namespace lab (4 cells)"] = time.monotonic() - t0
    print(f"image {img.dir.name}; accelerator {state['accel']}")
    for phase, s in seconds.items():
        print(f"  {phase:<30} {s:7.1f} s")
    vms, lab = by_cell(vm_rows), by_cell(lab_rows)
    agree = True
    print(f"{'cell':<24} {'qemu: status/detector/action':<44} {'namespaces':<44} same")
    for cell in sorted(lab):
        a, b = vms.get(cell), lab[cell]
        got = (a.status, a.detector, a.action) if a else ("missing", None, None)
        want = (b.status, b.detector, b.action)
        same = got == want
        agree &= same
        print(f"{'/'.join(cell):<24} {'/'.join(map(str, got)):<44} "
              f"{'/'.join(map(str, want)):<44} {'yes' if same else 'NO'}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
