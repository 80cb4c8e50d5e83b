"""The ``ptlab`` command line.

Every failure a person can cause (not root, a missing system tool, a bad spec
key, an unknown lab) ends in one line on stderr and exit status 2; a run whose
declared expectations fail, or whose bulk check caught corrupted bytes, exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from datetime import datetime
from importlib import metadata
from pathlib import Path

from netns import cleanup
from netns.errors import LabError
from netns.lab import Lab
from netns.sh import require_root, require_tools
from netns.topology import default_topology

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SPEC = REPO / "experiments" / "default.toml"


def _version() -> str:
    try:
        return metadata.version("ptlab")
    except metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "unknown (not installed)"


def _die(msg: str, code: int = 2) -> int:
    print(f"ptlab: {msg}", file=sys.stderr)
    return code


def _term_to_exit() -> None:
    """SIGTERM unwinds like Ctrl-C, so finally-blocks take the lab down."""
    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


# --- ptlab run ---------------------------------------------------------------

def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from censor_sim.profile import available as profiles_available

    from . import plugins
    from .experiment.run import run_experiment
    from .experiment.spec import load_spec

    spec = load_spec(Path(args.spec), plugins.available(), profiles_available())
    if args.check:
        return _check_spec(spec)
    for warning in spec.warnings if not args.quick else []:
        print(f"ptlab: warning: {warning}", file=sys.stderr)
    if args.quick:
        spec.repetitions = 1
        spec.workloads.bulk_size = min(spec.workloads.bulk_size, 1_000_000)
        spec.workloads.latency_count = min(spec.workloads.latency_count, 3)
    require_root()
    require_tools("ip", "nft", "tc", "tcpdump")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.results) if args.results else REPO / "results" / stamp
    # A log file or CI gets a table wide enough to read, not 80 squeezed columns.
    console = Console(width=None if sys.stdout.isatty() else 132)
    _term_to_exit()
    outcome = run_experiment(spec, out, console=console, lab_id=args.lab_id)
    console.print(f"report: [bold]{outcome.report}[/]")
    if outcome.integrity_failures:
        for f in outcome.integrity_failures:
            print(f"ptlab: {f}", file=sys.stderr)
        return 1
    if outcome.failed_expectations:
        for f in outcome.failed_expectations:
            print(f"ptlab: expectation failed: {f}", file=sys.stderr)
        return 1
    return 0


def _check_spec(spec) -> int:
    """``ptlab run --check``: everything a run would refuse, found without a lab."""
    from censor_sim.profile import ProfileError, load_profile

    from . import plugins

    for name, opts in spec.transports.items():
        try:
            plugins.get(name).check_options(opts)
        except (KeyError, ValueError) as exc:
            return _die(f"{spec.path}: transports.{name}: {exc}")
    for column in spec.censors:
        profile, overrides = spec.censor_profile(column)
        try:
            load_profile(profile, overrides)
        except ProfileError as exc:
            return _die(f"{spec.path}: censors.{column}: {exc}")
    cells = len(spec.transports) * len(spec.censors)
    print(f"{spec.path}: ok: {len(spec.transports)} transports x {len(spec.censors)} censors "
          f"= {cells} cells, {spec.repetitions} repetitions each")
    for warning in spec.warnings:
        print(f"warning: {warning}")
    # Rows the tools found here cannot run: said now, not discovered mid-run.
    for name in spec.transports:
        try:
            reason = plugins.get(name).skip_reason()
        except OSError as exc:
            print(f"warning: transports.{name}: {exc}")
            continue
        if reason:
            print(f"skipped: transports.{name}: {reason}")
    return 0


# --- ptlab lab ---------------------------------------------------------------

def cmd_lab_up(args: argparse.Namespace) -> int:
    require_root()
    require_tools("ip")
    lab = Lab(default_topology(args.proxies), args.id)
    t0 = time.monotonic()
    lab.up(detached=True)
    print(f"lab {lab.id} is up ({len(lab.topology.nodes)} namespaces, "
          f"{time.monotonic() - t0:.1f} s); 'ptlab lab down {lab.id}' removes it")
    for role in lab.topology.nodes:
        print(f"  {lab.ns(role):24s} {lab.addr(role):15s} {lab.addr(role, v6=True)}")
    return 0


def cmd_lab_down(args: argparse.Namespace) -> int:
    require_root()
    require_tools("ip")
    if args.all:
        ids = cleanup.down_all()
    elif args.id:
        if args.id not in cleanup.all_lab_ids():
            return _die(f"no lab {args.id!r} ('ptlab lab status' lists them)")
        cleanup.down(args.id)
        ids = [args.id]
    else:
        ids = cleanup.down_orphans()
    print(f"removed {len(ids)} lab(s){': ' + ', '.join(ids) if ids else ''}")
    return 0


def cmd_lab_status(args: argparse.Namespace) -> int:
    require_root()
    require_tools("ip")
    ids = sorted(cleanup.all_lab_ids())
    if not ids:
        print("no labs")
    for i in ids:
        st = cleanup.status(i)
        owner = f"owner pid {st.owner_pid}" if st.owner_pid else "no owner"
        print(f"{i}: {st.state}, {st.namespaces} namespaces, {owner}")
    return 0


def cmd_lab_exec(args: argparse.Namespace) -> int:
    require_root()
    lab_id = args.id
    if lab_id is None:
        ids = sorted(cleanup.all_lab_ids())
        if len(ids) != 1:
            return _die("several labs (or none) are up: name one with --id")
        lab_id = ids[0]
    lab = Lab.attach(lab_id)
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not cmd:
        return _die("nothing to run: ptlab lab exec NODE -- CMD")
    ns = lab.ns(args.node)
    os.execvp("ip", ["ip", "netns", "exec", ns, *cmd])
    return 0  # not reached


# --- ptlab pt ----------------------------------------------------------------

def cmd_pt(args: argparse.Namespace) -> int:
    from transports.pt.managed import main as managed_main

    return managed_main([])


# --- ptlab censor ------------------------------------------------------------

def _set_overrides(args: argparse.Namespace) -> dict:
    """``ptlab censor --set``'s profile overrides; ValueError says what is wrong."""
    import json

    try:
        overrides = json.loads(args.set) if args.set else {}
    except ValueError as exc:
        raise ValueError(f"--set: not JSON: {exc}") from None
    if not isinstance(overrides, dict):
        raise ValueError("--set: expected a JSON object of profile overrides")
    return overrides


def _censor_pcap(args: argparse.Namespace) -> int:
    """``ptlab censor --profile P --pcap F``: the engine over a capture (docs/lab/censor.md)."""
    import json

    from censor_sim.offline import replay
    from censor_sim.pcapflows import PcapError
    from censor_sim.profile import ProfileError, load_profile

    try:
        profile = load_profile(args.profile, _set_overrides(args))
        out = open(args.out, "w") if args.out else sys.stdout  # noqa: SIM115
    except (ValueError, ProfileError, OSError) as exc:
        return _die(f"censor --pcap: {exc}")
    from ptcommon import gcpolicy

    gcpolicy.for_packet_loop()
    flows = flagged = midstream = 0
    try:
        live = args.pcap == "-"  # a capture still being taken: each line as it comes
        for fv in replay(profile, Path(args.pcap), args.clients, args.seed):
            out.write(json.dumps(fv.to_json()) + "\n")
            if live:
                out.flush()
            flows += 1
            flagged += fv.verdict != "pass"
            midstream += fv.midstream and fv.verdict == "pass"
    except BrokenPipeError:
        raise  # `ptlab censor --pcap F | head`: the reader left (main handles it)
    except (PcapError, ValueError, OSError) as exc:
        return _die(f"censor --pcap: {exc}")
    finally:
        if out is not sys.stdout:
            out.close()
    unjudged = (f"; {midstream} TCP flows passed unjudged, first seen mid-stream (the "
                "capture holds no SYN from their client)" if midstream else "")
    print(f"{profile.name}: {flagged} of {flows} flows acted on{unjudged}", file=sys.stderr)
    return 0


def cmd_censor(args: argparse.Namespace) -> int:
    """Run one censor profile on real interfaces, outside any lab (a VM router, say)."""
    import asyncio

    from censor_sim.datapath import DatapathError
    from censor_sim.profile import ProfileError
    from censor_sim.service import run as run_censor

    if args.pcap:
        return _censor_pcap(args)
    if not args.inside or not args.outside:
        return _die("--inside and --outside are needed (or --pcap to judge a capture)")
    require_root()
    require_tools("nft", "iptables")
    for iface in (args.inside, args.outside):
        if not Path(f"/sys/class/net/{iface}").exists():
            return _die(f"no interface {iface!r} in this network namespace")
    if args.inside == args.outside:
        return _die("--inside and --outside must be different interfaces")
    try:
        overrides = _set_overrides(args)
    except ValueError as exc:
        return _die(str(exc))
    if Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() != "1":
        print("ptlab: warning: net.ipv4.ip_forward is 0, so this host forwards nothing",
              file=sys.stderr)
    config = {"profile": args.profile, "overrides": overrides, "inside": args.inside,
              "outside": args.outside, "seed": args.seed}
    if args.prober:
        config["prober"] = args.prober
    _term_to_exit()
    try:
        asyncio.run(run_censor(config, poll=0.2))
    except (ProfileError, DatapathError, ValueError) as exc:
        return _die(f"censor: {exc}")
    except KeyboardInterrupt:
        return 0
    return 0


# --- ptlab vm ----------------------------------------------------------------

def cmd_vm_up(args: argparse.Namespace) -> int:
    if args.provider == "qemu":
        return _vm_up_qemu(args)
    from ptlab.vm.vagrant import vagrant

    vagrant(["up", *(["--provider", args.provider] if args.provider else [])], capture=False)
    print("VMs up: 'ptlab vm run SPEC' runs an experiment on them, 'ptlab vm down' removes them")
    return 0


def cmd_vm_image(args: argparse.Namespace) -> int:
    """Build (or find cached) the VMs' disk image from Debian's packages."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .vm.image import DEFAULT_CACHE, build

    require_root()
    cache = Path(args.cache) if args.cache else DEFAULT_CACHE
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task("image: inputs", total=1.0)
        image = build(cache=cache, progress=lambda what, done: bar.update(
            task, description=f"image: {what}", completed=done))
        if args.vagrant_box:
            from .vm import box

            boxed = bar.add_task("box", total=1.0)
            box.export(image, Path(args.vagrant_box), progress=lambda what, done: bar.update(
                boxed, description=what, completed=done))
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
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .vm import qemu
    from .vm.image import DEFAULT_CACHE, Image, default_inputs

    require_root()
    inputs = default_inputs()
    image = Image(DEFAULT_CACHE / inputs.digest(), inputs)
    if not image.complete():
        return _die(f"no image for this checkout at {image.dir}: run 'ptlab vm image' first")
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task("vm up: qemu", total=1.0)
        state = qemu.up(image, accel=args.accel, progress=lambda what, done: bar.update(
            task, description=f"vm up: {what}", completed=done))
    print(f"VMs up under qemu ({state['accel'].upper()}), ssh after "
          + ", ".join(f"{m} {v['ready_s']:g} s" for m, v in state["machines"].items())
          + ": 'ptlab vm run SPEC' runs an experiment on them, 'ptlab vm down' stops them")
    return 0


def cmd_vm_down(args: argparse.Namespace) -> int:
    from .vm import qemu

    if qemu.load_state() is not None or qemu.our_qemu_pids(qemu.STATE):
        stopped = qemu.down()
        print(f"stopped {len(stopped)} qemu VM(s); overlays and state removed")
        return 0
    from ptlab.vm.vagrant import vagrant

    vagrant(["destroy", "-f"], capture=False)
    return 0


def cmd_vm_run(args: argparse.Namespace) -> int:
    """An experiment across the client, censor and servers machines: the VMs, or
    (--split) three namespaces laid out like them."""
    from rich.console import Console

    from censor_sim.profile import available as profiles_available

    from . import plugins
    from .experiment.run import run_experiment
    from .experiment.spec import load_spec
    from .vm.runner import VmRunner, check_spec

    spec = load_spec(Path(args.spec), plugins.available(), profiles_available())
    if args.quick:
        spec.repetitions = 1
        spec.workloads.bulk_size = min(spec.workloads.bulk_size, 1_000_000)
        spec.workloads.latency_count = min(spec.workloads.latency_count, 3)
    check_spec(spec)
    require_root()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.results) if args.results else REPO / "results" / f"vm-{stamp}"
    console = Console(width=None if sys.stdout.isatty() else 132)
    if args.split:
        from .vm.split import SplitMachines

        require_tools("ip", "nft", "iptables", "tcpdump")
        machines = SplitMachines(sys.executable, args.lab_id)
        runner = VmRunner(spec, out, machines, log=console.print,
                          label="three namespaces laid out as the VMs")
    else:
        from .vm import qemu
        from .vm.vagrant import VagrantMachines

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
    _term_to_exit()
    outcome = run_experiment(spec, out, console=console, runner=runner)
    console.print(f"report: [bold]{outcome.report}[/]")
    for f in outcome.integrity_failures:
        print(f"ptlab: {f}", file=sys.stderr)
    for f in outcome.failed_expectations:
        print(f"ptlab: expectation failed: {f}", file=sys.stderr)
    return 1 if outcome.integrity_failures or outcome.failed_expectations else 0


# --- ptlab list ----------------------------------------------------------------

def cmd_list(args: argparse.Namespace) -> int:
    """What a spec may name: transports (lab rows), censor profiles, workloads."""
    if args.what == "transports":
        from . import plugins

        names = plugins.available()
        width = max(map(len, names))
        for name in names:
            print(f"{name:<{width}}  {plugins.get(name).description}")
    elif args.what == "profiles":
        from censor_sim.profile import available, load_profile

        for name in available():
            prof = load_profile(name)
            print(f"{name}\n    {' '.join(prof.description.split())}\n"
                  f"    source: {' '.join(prof.source.split())}")
    else:
        from .workloads import CATALOGUE

        for name, (what, keys) in CATALOGUE.items():
            print(f"{name:<10} {what}\n{'':<10} [workloads] {keys}")
    return 0


# --- ptlab compare -------------------------------------------------------------

def cmd_compare(args: argparse.Namespace) -> int:
    from .output.compare import run

    dirs = [Path(d) for d in args.runs]
    for d in dirs:
        if not (d / "results.json").exists():
            return _die(f"{d}: no results.json there")
    try:
        text, comparisons = run(dirs, Path(args.html) if args.html else None)
    except ValueError as exc:
        return _die(str(exc))
    print(text, end="")
    if args.html:
        print(f"html: {args.html}")
    changed = any(c.status_changes for c in comparisons)
    return 1 if args.fail_on_change and changed else 0


# --- ptlab report ------------------------------------------------------------

def cmd_report(args: argparse.Namespace) -> int:
    from .common.results import load_results
    from .output.report import render_report
    from .output.terminal import print_results

    d = Path(args.results_dir)
    if not (d / "results.json").exists():
        return _die(f"{d}: no results.json there")
    print_results(load_results(d))
    print(f"report: {render_report(d)}")
    return 0


# --- ptlab dataset / evaluate ----------------------------------------------------


def _evaluate_tlsintls(args: argparse.Namespace) -> int:
    """``ptlab evaluate DATASET --tlsintls``: fit Xue et al. 2024's detector on the
    benign half, measure it on the rest (docs/censors/tlsintls.md §2)."""
    from .ml import tlsintls as tt

    path = Path(args.dataset)
    seq_file = path / "sequences.jsonl.gz"
    try:
        seqs = (tt.read_sequences(seq_file) if seq_file.exists()
                else tt.sequences_from_dataset(path))
        if not seq_file.exists():
            tt.write_sequences(seq_file, seqs)
        train, test = tt.split(seqs, args.seed)
        model = tt.fit(train, fpr_target=args.fpr_target)
    except (OSError, ValueError, KeyError) as exc:
        return _die(f"evaluate --tlsintls: {exc}")
    result = tt.evaluate(model, test)
    out = Path(args.out) if args.out else path / "evaluation"
    out.mkdir(parents=True, exist_ok=True)
    (out / "tlsintls.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.save_models:
        Path(args.save_models).mkdir(parents=True, exist_ok=True)
        model.name = "tlsintls-2024"
        (Path(args.save_models) / "tlsintls-2024.json").write_text(
            json.dumps(model.to_json(), indent=1, sort_keys=True) + "\n")
    fpr = result["fpr"]
    print(f"delta {model.delta}, gamma {model.gamma}, overhead {model.overhead} bytes")
    print(f"false positives on held-out benign flows: {fpr['flagged']}/{fpr['flows']} "
          f"[{fpr['wilson95'][0]:.4f}, {fpr['wilson95'][1]:.4f}]")
    for name, c in {**result["by_class"], **result["by_setting"]}.items():
        print(f"  {name:24s} {c['flagged']:5d}/{c['flows']:<5d} "
              f"[{c['wilson95'][0]:.3f}, {c['wilson95'][1]:.3f}]")
    # The base rate, with the false-positive rate at its interval's upper bound: a
    # handful of held-out flows cannot show a rate near the paper's 0.0544 %.
    p, f = args.prevalence, fpr["wilson95"][1]
    for name, c in result["by_class"].items():
        if not name.startswith("benign:") and c["rate"]:
            share = c["rate"] * p / (c["rate"] * p + f * (1 - p))
            print(f"  at prevalence {p:g}, FPR {f:.4f}: {share:.2%} of flagged flows "
                  f"would be {name}")
    return 0


def cmd_dataset(args: argparse.Namespace) -> int:
    from .ml.dataset import collect, load_dataset_spec, scaled

    spec = load_dataset_spec(Path(args.spec))
    if args.scale != 1.0:
        if not 0 < args.scale <= 100:
            return _die("--scale must be in (0, 100]")
        spec = scaled(spec, args.scale)
    require_root()
    require_tools("ip", "nft", "tc", "tcpdump")
    _term_to_exit()
    manifest = collect(spec, Path(args.out), lab_id=args.lab_id)
    print(f"dataset: {manifest['flows']} flows in {args.out} "
          f"({', '.join(f'{k}: {sum(v.values())}' for k, v in manifest['counts'].items())})")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .ml.dataset import load_dataset
    from .ml.evaluate import EvalOptions, evaluate
    from .ml.report import render

    if args.tlsintls:
        return _evaluate_tlsintls(args)
    ds = load_dataset(Path(args.dataset))
    if not 0 < args.prevalence < 1:
        return _die("--prevalence must be in (0, 1)")
    if not 0 < args.test_size < 1:
        return _die("--test-size must be in (0, 1)")
    opts = EvalOptions(seed=args.seed, test_size=args.test_size, prevalence=args.prevalence,
                       train_setting=args.train_setting, test_setting=args.test_setting,
                       save_models=Path(args.save_models) if args.save_models else None)
    out = Path(args.out) if args.out else Path(args.dataset) / "evaluation"
    try:
        result = evaluate(ds, opts)
    except ValueError as exc:
        return _die(f"evaluate: {exc}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "evaluation.json").write_text(json.dumps(result, indent=1) + "\n")
    report = render(result, out)
    from .ml.report import summary_lines

    for line in summary_lines(result):
        print(line)
    print(f"report: {report}")
    return 0


# --- ptlab export --------------------------------------------------------------------

def cmd_export_shadow(args: argparse.Namespace) -> int:
    from .export.scalespec import load_scale_spec
    from .export.shadow import build, shadowtools_check, write

    spec = load_scale_spec(Path(args.spec))
    try:
        path = write(spec, Path(args.out), args.python)
    except ValueError as exc:
        return _die(str(exc))
    why = shadowtools_check(build(spec, Path(args.out), args.python))
    hosts = json.loads(path.read_text().split("\n", 1)[1])["hosts"]
    print(f"shadow: {path} ({len(hosts)} hosts, "
          f"{sum(len(h['processes']) for h in hosts.values())} processes); "
          f"Shadow's own types: {why or 'valid'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ptlab", description="Censorship-resistance transport lab: real transports "
        "against a simulated censor in Linux network namespaces.",
        epilog="ptlab list transports|profiles|workloads shows what a spec may name; "
               "ptlab run --check SPEC validates a spec without a lab.")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run an experiment spec (transports x censors)",
                       description="Run an experiment: bring a lab up, run every cell of "
                                   "the transports x censors matrix, write results/<ts>/.")
    r.add_argument("spec", nargs="?", default=str(DEFAULT_SPEC),
                   help=f"experiment TOML (default: {DEFAULT_SPEC.relative_to(REPO)})")
    r.add_argument("--results", help="results directory (default results/<timestamp>)")
    r.add_argument("--quick", action="store_true",
                   help="one repetition and a small bulk size (CI's quick form)")
    r.add_argument("--lab-id", help="lab id to use (1-4 of a-z0-9; default random)")
    r.add_argument("--check", action="store_true",
                   help="validate the spec, its transports' options and its censors' "
                        "overrides, then exit (no lab, no root)")
    r.set_defaults(fn=cmd_run)

    ls = sub.add_parser("list", help="list transports, censor profiles or workloads",
                        description="List what an experiment spec may name: the lab's "
                                    "transport rows, the censor profiles (each with the "
                                    "source it reproduces) or the workloads.")
    ls.add_argument("what", choices=("transports", "profiles", "workloads"))
    ls.set_defaults(fn=cmd_list)

    lab = sub.add_parser("lab", help="manage labs (namespaces)",
                         description="Bring the default topology up, down, or look inside.")
    lsub = lab.add_subparsers(dest="lab_command", required=True)
    up = lsub.add_parser("up", help="bring the default topology up and return")
    up.add_argument("--id", help="lab id (default random)")
    up.add_argument("--proxies", type=int, default=2, help="number of proxy namespaces")
    up.set_defaults(fn=cmd_lab_up)
    down = lsub.add_parser("down", help="remove orphaned labs, one lab (ID) or all (--all)")
    down.add_argument("id", nargs="?", help="lab id to remove even if its owner lives")
    down.add_argument("--all", action="store_true", help="remove every lab")
    down.set_defaults(fn=cmd_lab_down)
    st = lsub.add_parser("status", help="list labs and their owners",
                         description="List every ptl lab on this machine: its id, its "
                                     "owner process and whether that owner is alive "
                                     "(an orphan is what ptlab lab down removes).")
    st.set_defaults(fn=cmd_lab_status)
    ex = lsub.add_parser("exec", help="run a command in a lab node: lab exec NODE -- CMD")
    ex.add_argument("--id", help="lab id (needed when several labs are up)")
    ex.add_argument("node", help="node role, e.g. client, censor, bridge")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command and arguments")
    ex.set_defaults(fn=cmd_lab_exec)

    pt = sub.add_parser("pt", help="run as a Tor pluggable transport (managed mode)",
                        description="Tor PT managed mode: tor (or ptadapter) launches this "
                                    "with TOR_PT_* variables; every registered transport "
                                    "(direct, obfs4, ...) is offered.", add_help=True)
    pt.set_defaults(fn=cmd_pt)

    sub.add_parser("snowflake-proxy", help="run our Snowflake volunteer proxy (see "
                   "ptlab snowflake-proxy -h)", add_help=False,
                   description="Our Snowflake volunteer proxy, with the Go proxy's "
                               "single-dash flags; ptlab snowflake-proxy -h lists them.")

    cen = sub.add_parser("censor", help="run a censor profile on real interfaces or a pcap",
                         description="Run one censor profile on this host's interfaces "
                                     "(for example on a VM router) until SIGINT/SIGTERM; "
                                     "events go to stdout as JSON lines. With --pcap, run "
                                     "it over a capture instead: no root, no network, one "
                                     "JSON line per flow.")
    cen.add_argument("--profile", required=True, help="profile name or path to a .toml")
    cen.add_argument("--inside", help="interface toward the censored users")
    cen.add_argument("--outside", help="interface toward the rest of the world")
    cen.add_argument("--pcap", help="a capture to judge offline: pcap (tcpdump -w) or "
                     "pcapng (Wireshark, dumpcap); - reads standard input")
    cen.add_argument("--out", help="--pcap: write the verdicts here (default stdout)")
    cen.add_argument("--clients", action="append", default=[], metavar="CIDR",
                     help="--pcap: the censored users' addresses (default: whoever opened "
                          "each flow); repeatable")
    cen.add_argument("--set", help='profile overrides as JSON, e.g. \'{"actions": '
                                   '{"residual": {"seconds": [10]}}}\'')
    cen.add_argument("--seed", type=int, default=0, help="seed of the censor's RNG")
    cen.add_argument("--prober", help="HOST:PORT of a probe service (python -m "
                                      "censor_sim.prober serve)")
    cen.set_defaults(fn=cmd_censor)

    ds = sub.add_parser("dataset", help="collect a learning-censor dataset in the lab",
                        description="Run transports and benign traffic under each link "
                                    "setting of a dataset spec; write flows.csv (labelled "
                                    "per-flow features), pcaps/ and dataset.json to OUT.")
    ds.add_argument("spec", help="dataset TOML, e.g. experiments/ml-dataset.toml")
    ds.add_argument("out", help="output directory")
    ds.add_argument("--scale", type=float, default=1.0,
                    help="multiply every flow and session count (0.1 for a quick run)")
    ds.add_argument("--lab-id", help="lab id to use (default random)")
    ds.set_defaults(fn=cmd_dataset)

    ev = sub.add_parser("evaluate", help="train and test flow classifiers on a dataset",
                        description="TPR/FPR per transport with 95 %% intervals, ROC curves, "
                                    "the cross-setting (portability) drop and the base-rate "
                                    "arithmetic; writes evaluation.json and report.html.")
    ev.add_argument("dataset", help="dataset directory (from ptlab dataset)")
    ev.add_argument("--out", help="output directory (default DATASET/evaluation)")
    ev.add_argument("--seed", type=int, default=1, help="seed of the split and the learners")
    ev.add_argument("--test-size", type=float, default=0.3, help="held-out share per label")
    ev.add_argument("--prevalence", type=float, default=1e-6,
                    help="share of flows that are the transport, for the base-rate arithmetic")
    ev.add_argument("--train-setting", help="portability: train on this link setting ...")
    ev.add_argument("--test-setting", help="... and test on this one (default: every pair)")
    ev.add_argument("--save-models", help="directory for the trained models (JSON)")
    ev.add_argument("--tlsintls", action="store_true",
                    help="train and test the TLS-in-TLS detector (Xue et al. 2024) instead")
    ev.add_argument("--fpr-target", type=float, default=0.01,
                    help="--tlsintls: false-positive rate the thresholds may reach in training")
    ev.set_defaults(fn=cmd_evaluate)

    exp = sub.add_parser("export", help="write an experiment for another engine",
                         description="Export a scale spec to another engine (Shadow).")
    esub = exp.add_subparsers(dest="export_command", required=True)
    sh = esub.add_parser("shadow", help="write OUT/shadow.yaml for the Shadow simulator")
    sh.add_argument("spec", help="scale spec, e.g. experiments/snowflake-scale.toml")
    sh.add_argument("out", help="output directory")
    sh.add_argument("--python", help="the Python that Shadow hosts run (default: this one)")
    sh.set_defaults(fn=cmd_export_shadow)

    vm = sub.add_parser("vm", help="run experiments across three VMs (Vagrantfile)",
                        description="A client, a censor router and the servers on machines "
                                    "of their own: the Vagrant VMs, or three namespaces "
                                    "laid out like them (run --split).")
    vsub = vm.add_subparsers(dest="vm_command", required=True)
    vup = vsub.add_parser("up", help="vagrant up: boot and provision the three VMs")
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
    vrun = vsub.add_parser("run", help="run an experiment spec across the three machines")
    vrun.add_argument("spec", help="experiment TOML, e.g. experiments/vm.toml")
    vrun.add_argument("--split", action="store_true",
                      help="no VMs: the same commands in three namespaces on this machine")
    vrun.add_argument("--results", help="results directory (default results/vm-<timestamp>)")
    vrun.add_argument("--quick", action="store_true", help="one repetition, small bulk size")
    vrun.add_argument("--lab-id", help="lab id of the --split namespaces (default random)")
    vrun.set_defaults(fn=cmd_vm_run)
    vdown = vsub.add_parser("down", help="vagrant destroy -f: remove the three VMs",
                            description="Destroy the three VMs of the Vagrantfile "
                                        "(vagrant destroy -f); their disks go with them.")
    vdown.set_defaults(fn=cmd_vm_down)

    cmp = sub.add_parser("compare", help="compare runs cell by cell",
                         description="Compare each later run with the first: status and "
                                     "goodput cell by cell (goodput as a ratio with a "
                                     "95 % interval), then the spec and provenance "
                                     "differences.")
    cmp.add_argument("runs", nargs="+", metavar="RUN", help="results directories (2 or more)")
    cmp.add_argument("--html", help="also write the comparison as an HTML page here")
    cmp.add_argument("--fail-on-change", action="store_true",
                     help="exit 1 if any cell changed status (for CI)")
    cmp.set_defaults(fn=cmd_compare)

    rep = sub.add_parser("report", help="render report.html for a results directory",
                         description="Print a run's results table and (re)write its "
                                     "report.html from results.json, e.g. after upgrading "
                                     "ptlab or to render a run copied from elsewhere.")
    rep.add_argument("results_dir", help="a directory ptlab run wrote (holds results.json)")
    rep.set_defaults(fn=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    from .experiment.spec import SpecError

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["snowflake-proxy"]:  # Go-style single-dash flags: its own parser
        from transports.snowflake.proxy_cli import main as proxy_main

        return proxy_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "compare" and len(args.runs) < 2:
        parser.error("compare needs at least two results directories")
    try:
        return args.fn(args)
    except (LabError, SpecError) as exc:
        return _die(str(exc))
    except KeyboardInterrupt:
        return _die("interrupted", 130)
    except BrokenPipeError:  # `ptlab list profiles | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
