"""``ptlab vm``: the three-machine lab (client, censor router, servers): qemu VMs
built here, Vagrant's, or three namespaces laid out like them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from netns.sh import require_root, require_tools

from .common import (
    EXIT_HELP,
    Subparsers,
    die,
    load_run_spec,
    make_quick,
    new_run_dir,
    no_empty_run_dir,
    run_exit_status,
    term_to_exit,
    wide_console,
    write_junit,
)


def _progress() -> Any:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())


def _reporter(bar: Any, task: Any, prefix: str = "") -> Callable[[str, float], None]:
    """A progress callback (what, fraction done) that updates `task` on `bar`."""
    return lambda what, done: bar.update(task, description=f"{prefix}{what}", completed=done)


def cmd_vm_up(args: argparse.Namespace) -> int:
    if args.provider == "qemu":
        return _vm_up_qemu(args)
    from ..vm.vagrant import vagrant

    vagrant(["up", *(["--provider", args.provider] if args.provider else [])], capture=False)
    print("VMs up: 'ptlab vm run SPEC' runs an experiment on them, 'ptlab vm down' removes them")
    return 0


def cmd_vm_image(args: argparse.Namespace) -> int:
    """Build (or find cached) the VMs' disk image from Debian's packages."""
    from ..vm import box
    from ..vm.image import DEFAULT_CACHE, build

    require_root()
    cache = Path(args.cache) if args.cache else DEFAULT_CACHE
    with _progress() as bar:
        task = bar.add_task("image: inputs", total=1.0)
        image = build(cache=cache, progress=_reporter(bar, task, "image: "))
        if args.vagrant_box:
            boxed = bar.add_task("box", total=1.0)
            box.export(image, Path(args.vagrant_box), progress=_reporter(bar, boxed))
    print(f"image {image.dir.name}: {image.disk} ({image.disk.stat().st_size >> 20} MiB), "
          f"kernel {image.kernel.name}, ssh key {image.ssh_key}")
    if image.seconds:
        print("built in " + ", ".join(f"{k} {v:g} s" for k, v in image.seconds.items()))
    if args.vagrant_box:
        size = Path(args.vagrant_box).stat().st_size >> 20
        print(f"Vagrant box (libvirt): {args.vagrant_box} ({size} MiB); 'vagrant box add "
              f"--name ptlab {args.vagrant_box}', then 'PTLAB_VM_BOX=ptlab vagrant up "
              f"--provider libvirt'")
    return 0


def _vm_up_qemu(args: argparse.Namespace) -> int:
    from ..vm import qemu
    from ..vm.image import DEFAULT_CACHE, Image, default_inputs

    require_root()
    inputs = default_inputs()
    image = Image(DEFAULT_CACHE / inputs.digest(), inputs)
    if not image.complete():
        return die(f"no image for this checkout at {image.dir}: run 'ptlab vm image' first")
    with _progress() as bar:
        task = bar.add_task("vm up: qemu", total=1.0)
        state = qemu.up(image, accel=args.accel, progress=_reporter(bar, task, "vm up: "))
    print(f"VMs up under qemu ({state['accel'].upper()}), ssh after "
          + ", ".join(f"{m} {v['ready_s']:g} s" for m, v in state["machines"].items())
          + ": 'ptlab vm run SPEC' runs an experiment on them, 'ptlab vm down' stops them")
    return 0


def cmd_vm_down(args: argparse.Namespace) -> int:
    from ..vm import qemu
    from ..vm.vagrant import vagrant

    if qemu.load_state() is not None or qemu.our_qemu_pids(qemu.STATE):
        stopped = qemu.down()
        print(f"stopped {len(stopped)} qemu VM(s); overlays and state removed")
        return 0
    vagrant(["destroy", "-f"], capture=False)
    return 0


def cmd_vm_run(args: argparse.Namespace) -> int:
    """An experiment across the client, censor and servers machines: the VMs, or
    (--split) three namespaces laid out like them."""
    from ..experiment.run import run_experiment
    from ..vm import qemu
    from ..vm.runner import VmRunner, check_spec
    from ..vm.split import SplitMachines
    from ..vm.vagrant import VagrantMachines

    spec = load_run_spec(args.spec)
    if args.quick:
        make_quick(spec)
    check_spec(spec)
    require_root()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.results) if args.results else new_run_dir("vm-")
    console = wide_console()
    if args.split:
        require_tools("ip", "nft", "iptables", "tcpdump")
        machines = SplitMachines(sys.executable, args.lab_id)
        runner = VmRunner(spec, out, machines, log=console.print,
                          label="three namespaces laid out as the VMs")
    else:
        work = Path("/var/tmp/ptlab-vm") / stamp  # the same path on every VM
        state = qemu.load_state()
        if state is not None:
            # Under TCG the CPU is emulated: goodput measures the emulator, not the
            # transport; compare status and detections.
            vms: qemu.QemuMachines | VagrantMachines = qemu.QemuMachines(work)
            label = f"the three qemu VMs ({state['accel'].upper()})"
        else:
            vms, label = VagrantMachines(work), "the three VMs"
        runner = VmRunner(spec, out, vms, work=work, log=console.print, label=label)
    term_to_exit()
    with no_empty_run_dir(out):
        outcome = run_experiment(spec, out, console=console, runner=runner)
    console.print(f"report: [bold]{outcome.report}[/]")
    write_junit(outcome, spec, args.junit)
    return run_exit_status(outcome)


def add_parser(sub: Subparsers) -> None:
    vm = sub.add_parser("vm", help="run experiments across three VMs (Vagrantfile)",
                        description="A client, a censor router and the servers on machines "
                                    "of their own: the Vagrant VMs, or three namespaces "
                                    "laid out like them (run --split).")
    vsub = vm.add_subparsers(dest="vm_command", required=True)
    vup = vsub.add_parser("up", help="vagrant up: boot and provision the three VMs",
                          description="Boot the three machines: under qemu here, from the "
                                      "image of 'ptlab vm image' (--provider qemu), or "
                                      "with Vagrant and its provider, provisioned by "
                                      "scripts/setup.")
    vup.add_argument("--provider", choices=("qemu", "libvirt", "virtualbox"),
                     help="qemu: boot the image of 'ptlab vm image' here; otherwise a "
                          "Vagrant provider (default: Vagrant's choice)")
    vup.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                     help="qemu's accelerator (auto: KVM if a probe boots with it, else TCG)")
    vup.set_defaults(fn=cmd_vm_up)
    vimg = vsub.add_parser("image", help="build the VMs' disk image from Debian's packages",
                           description="debootstrap this machine's Debian release, install "
                                       "the lab's packages and Python environment, and "
                                       "write a disk image, kernel and initrd; cached by a "
                                       "hash of its inputs.")
    vimg.add_argument("--cache", help="where images are kept (default /var/cache/ptlab/vm, "
                                      "or PTLAB_VM_CACHE)")
    vimg.add_argument("--vagrant-box", metavar="FILE",
                      help="also write the image as a Vagrant box for libvirt (a .box tar)")
    vimg.set_defaults(fn=cmd_vm_image)
    vrun = vsub.add_parser("run", help="run an experiment spec across the three machines",
                           description="Run an experiment with its client, censor and "
                                       "servers on machines of their own (the VMs up now, "
                                       "or with --split three namespaces laid out as "
                                       "them); same results, report and exit statuses as "
                                       "ptlab run.",
                           epilog=EXIT_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    vrun.add_argument("spec", help="experiment TOML, e.g. experiments/vm.toml")
    vrun.add_argument("--split", action="store_true",
                      help="no VMs: the same commands in three namespaces on this machine")
    vrun.add_argument("--results", help="results directory (default: results/vm-<timestamp> "
                                        "under the current directory)")
    vrun.add_argument("--quick", action="store_true", help="one repetition, small bulk size")
    vrun.add_argument("--lab-id", help="lab id of the --split namespaces (default random)")
    vrun.add_argument("--junit", metavar="FILE",
                      help="also write the cells as JUnit XML, one test case each (for CI)")
    vrun.set_defaults(fn=cmd_vm_run)
    vdown = vsub.add_parser("down", help="vagrant destroy -f: remove the three VMs",
                            description="Destroy the three VMs of the Vagrantfile "
                                        "(vagrant destroy -f); their disks go with them.")
    vdown.set_defaults(fn=cmd_vm_down)
