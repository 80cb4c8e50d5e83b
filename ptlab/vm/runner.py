"""An experiment across the three machines: the namespace lab's runner, other hands.

:class:`VmRunner` is :class:`ptlab.experiment.runner.LabRunner` with its hands swapped:
every process starts on the machine its role belongs to (:mod:`ptlab.vm.layout`)
through a :class:`~ptlab.vm.hosts.Host`, the censor is ``ptlab censor`` on the
censor machine's real interfaces (found by address), and the client's
measurement runs on the client machine (``python -m ptlab.workloads.cell``).
:class:`VmBackend` implements the same :class:`~ptlab.experiment.backend.LabBackend` as the
namespace lab; the matrix, baselines, expectations and every line that turns
what was seen into a row (:mod:`ptlab.experiment.scoring`) are shared, so rows from the two
are comparable.

What the layout cannot carry yet is refused before anything starts: plugins
that need nodes other than client and bridge (meek's edge origin, Snowflake's
broker and proxies, Conjure's station, tor), censors that probe (no prober
machine), and link shaping.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from censor_sim import profile as profiles
from netns.capture import BUFFER_KIB as CAPTURE_BUFFER_KIB
from netns.errors import LabError

from ..common.labview import Process
from ..experiment.backend import CellRun, LabBackend
from ..experiment.labservices import LabServices
from ..experiment.runner import LabRunner
from ..experiment.spec import Spec, SpecError
from ..plugins.base import CellContext, Endpoint, Service
from ..workloads.cell import CellPlan, Measurement, config_dict
from .hosts import Host
from .layout import MACHINES, PREFIXLEN, SERVER_ROLE_ADDRESSES, VmLab, machine_of


class Machines(Protocol):
    """The three machines: VMs (vagrant) or namespaces (split)."""

    @property
    def hosts(self) -> Mapping[str, Host]:
        """The client, censor and servers machines, by name (once up)."""
    # How many times longer than on the host a process takes to start there (1 on
    # namespaces and hardware-virtualised VMs; more under qemu's TCG, which emulates
    # the CPU). Every wait for a process is multiplied by it, never the experiment's
    # own timeouts, which are the spec's.
    slowdown: float

    def up(self) -> Any: ...
    def down(self) -> None: ...


def check_spec(spec: Spec) -> None:
    """Refuse, in one line, what the three-machine layout cannot run."""
    for row in spec.rows():
        if not row.plugin.vm_ready:
            raise SpecError(f"transports.{row.name}: not available on the three-machine layout "
                            f"(it needs lab nodes beyond client and bridge)")
    t = spec.topology
    if t.rate_mbit or t.loss_pct or t.delay_ms:
        raise SpecError("topology: link shaping is not available on the three-machine layout")
    for column in spec.censors:
        name, over = spec.censor_profile(column)
        try:
            prof = profiles.load_profile(name, over)
        except profiles.ProfileError as exc:
            raise SpecError(f"censors.{column}: {exc}") from None
        if prof.probes:
            raise SpecError(f"censors.{column}: {name} probes actively, and the "
                            f"three-machine layout has no prober machine")


def device_of(host: Host, address: str) -> str:
    """The interface of `host` that holds `address` (VM NICs are named by the provider)."""
    out = host.run(["ip", "-o", "-4", "addr", "show"]).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == address:
            return fields[1].split("@")[0]
    raise LabError(f"{host.name} has no interface with {address} (is it the layout's "
                   f"{host.name} machine?)")


class VmServices(LabServices):
    """The lab services on the servers machine, one address per role.

    The benign sshd listens on 2222: a VM's own sshd (Vagrant's way in) holds
    port 22 on every address, so the lab's could not bind it there.
    """

    ssh_port = 2222

    def __init__(self, vlab: VmLab, workdir: Path, hosts: Mapping[str, Host],
                 ready_timeout_s: float = 20.0) -> None:
        super().__init__(vlab, workdir, ready_timeout_s)
        self.hosts = hosts

    def roles(self) -> list[str]:
        return ["client", *SERVER_ROLE_ADDRESSES]

    def addresses(self, role: str) -> list[str]:
        return [self.lab.addr(role)]

    def has_role(self, role: str) -> bool:
        return role == "client" or role in SERVER_ROLE_ADDRESSES

    def bind_hosts(self, role: str) -> list[str]:
        return [self.lab.addr(role)]

    @property
    def python(self) -> list[str]:
        return [self.hosts["servers"].python, "-m"]

    @property
    def isp_servers(self) -> bool:
        return False

    def prepare(self) -> list[tuple[str, str, list[str], str]]:
        specs = super().prepare()
        for host in self.hosts.values():  # certificates, CA, zone, sshd keys
            host.push(self.dir)
        return specs

    def launch(self, name: str, role: str, argv: list[str]) -> Process:
        return self.hosts[machine_of(role)].spawn(argv, name, self.dir / f"{name}.log")


class VmBackend(LabBackend):
    """Cells across three machines. `work` is the run's directory, the same absolute
    path on every machine (the results directory, for namespaces)."""

    def __init__(self, spec: Spec, out_dir: Path, machines: Machines, work: Path | None = None,
                 label: str = "three machines") -> None:
        self.spec = spec
        self.out = Path(out_dir)
        self.machines = machines
        self.vlab = VmLab()
        self.work = Path(work) if work else self.out
        self.hosts: Mapping[str, Host] = {}
        self.services: VmServices | None = None
        self.rtt_ms: float | None = None
        self.censor_ifaces: tuple[str, str] | None = None
        self.gso: dict[str, str] = {}  # machine -> its lab interface
        self.label = label

    def describe(self) -> str:
        return self.label

    @property
    def timeout_scale(self) -> float:
        return self.machines.slowdown

    # --- machines ---------------------------------------------------------------

    def start(self) -> None:
        check_spec(self.spec)
        self.work.mkdir(parents=True, exist_ok=True)
        self.machines.up()
        self.hosts = self.machines.hosts
        servers = self.hosts["servers"]
        dev = device_of(servers, MACHINES["servers"].nets[0][1])
        for a in SERVER_ROLE_ADDRESSES.values():
            servers.run(["ip", "addr", "replace", f"{a}/{PREFIXLEN}", "dev", dev])
        censor = self.hosts["censor"]
        self.censor_ifaces = (device_of(censor, self.vlab.inside),
                              device_of(censor, self.vlab.outside))
        self.gso = {"client": device_of(self.hosts["client"], self.vlab.addr("client")),
                    "servers": dev}
        self.services = VmServices(self.vlab, self.work / "lab", self.hosts,
                                   20.0 * self.machines.slowdown).start()
        self.rtt_ms = self.measure_rtt()

    def stop(self) -> list[tuple[str, list[Process]]]:
        keep: list[tuple[str, list[Process]]] = []
        if self.services:
            self.services.stop()
            keep.append(("lab", list(self.services.procs)))
            self._bring_home(self.services.dir)
            self.services = None
        servers = self.hosts.get("servers")
        if servers is not None and "servers" in self.gso:
            for a in SERVER_ROLE_ADDRESSES.values():
                servers.run(["ip", "addr", "del", f"{a}/{PREFIXLEN}", "dev", self.gso["servers"]],
                            check=False)
        if self.work != self.out:  # everything worth keeping is in the results now
            for host in self.hosts.values():
                host.run(["rm", "-rf", "--one-file-system", str(self.work)], check=False)
        self.hosts = {}
        self.machines.down()
        if self.work != self.out:
            shutil.rmtree(self.work, ignore_errors=True)
        return keep

    def _bring_home(self, path: Path) -> None:
        """Pull a directory from every machine, and copy it into the results."""
        self.gather(path)
        if self.work != self.out and path.is_dir():
            dest = self.out / path.relative_to(self.work)
            shutil.copytree(path, dest, dirs_exist_ok=True)

    # --- cells ------------------------------------------------------------------

    def context(self, options: dict[str, Any], seed: int, cell_dir: Path) -> CellContext:
        assert self.services
        return CellContext(self.vlab, cell_dir, options, seed, self.services.upstream,
                           lab_ca=self.services.ca.ca_path if self.services.ca else None,
                           lab_dir=self.services.dir, python=self.hosts["servers"].python,
                           timeout_scale=self.machines.slowdown)

    def share(self, path: Path) -> None:
        for host in self.hosts.values():
            host.push(path)

    def gather(self, path: Path) -> None:
        for host in self.hosts.values():
            host.pull(path)

    def gather_cell(self, run: CellRun, cell_dir: Path) -> None:
        self._bring_home(cell_dir)
        if run.captures:
            self._bring_home(self.work / "pcaps")

    def start_process(self, run: CellRun, svc: Service, cell_dir: Path) -> Process:
        host = self.hosts[machine_of(svc.role)]
        p = host.spawn(svc.argv, svc.name, cell_dir / f"{svc.name}.log", env=svc.env)
        run.procs.append(p)
        p.wait_log(svc.ready, svc.ready_timeout_s * self.machines.slowdown, svc.ready_what,
                   svc.ready_hint)
        return p

    def start_captures(self, run: CellRun) -> None:
        assert self.censor_ifaces
        pdir = self.work / "pcaps"
        pdir.mkdir(exist_ok=True)
        self.share(pdir)
        for peer, dev in zip(("client", "inet"), self.censor_ifaces, strict=True):
            pcap = pdir / f"{run.name}__censor-{peer}.pcap"
            p = self.hosts["censor"].spawn(
                ["tcpdump", "-n", "--immediate-mode", "-i", dev, "-B", str(CAPTURE_BUFFER_KIB),
                 "-s", str(self.spec.capture_snaplen), "-U", "-w", str(pcap)],
                f"tcpdump-{peer}", pcap.with_suffix(".log"))
            run.captures.append(p)
            run.pcaps.append(pcap)
            p.wait_log(r"listening on", 5.0 * self.machines.slowdown)

    def start_censor(self, run: CellRun, profile: profiles.Profile, overrides: dict[str, Any],
                     seed: int, cell_dir: Path) -> Process:
        """``ptlab censor`` on the censor machine's two lab interfaces (no prober:
        check_spec refused probing profiles)."""
        assert self.censor_ifaces
        inside, outside = self.censor_ifaces
        argv = [self.hosts["censor"].python, "-m", "ptlab", "censor", "--profile", profile.name,
                "--inside", inside, "--outside", outside, "--seed", str(seed),
                "--set", json.dumps(overrides)]
        return self.start_process(run, Service("censor", "censor", argv), cell_dir)

    def role_addresses(self, role: str) -> list[str]:
        try:
            return self.vlab.addresses(role)
        except LabError as exc:
            raise profiles.ProfileError(f"role:{role}: {exc}") from None

    def wire_sized_segments(self, run: CellRun) -> None:
        for machine, dev in self.gso.items():
            self.exec(machine, ["ip", "link", "set", "dev", dev, "gso_max_segs", "1"])
            run.gso_limited.append((machine, dev))

    def exec(self, role: str, argv: list[str], check: bool = True) -> Any:
        """Run a short command on the machine of `role` (or on the machine so named)."""
        host = self.hosts[role] if role in self.hosts else self.hosts[machine_of(role)]
        return host.run(argv, check=check)

    def addr(self, role: str) -> str:
        return self.vlab.addr(role)

    async def measure(self, endpoint: Endpoint, plan: CellPlan,
                      cell_dir: Path) -> Measurement:
        """Measure on the client machine: ``python -m ptlab.workloads.cell``."""
        assert self.services and self.services.sshd
        cfg = cell_dir / "workload.json"
        cfg.write_text(json.dumps(config_dict(endpoint, plan, self.services.benign_targets(),
                                              self.services.sshd.directory)))
        client = self.hosts["client"]
        client.push(cell_dir)
        budget = (plan.bootstrap_s + plan.repetitions * plan.bulk_timeout_s
                  + plan.benign_timeout_s + 4.0 * plan.latency_count
                  + 60.0 * self.machines.slowdown)
        proc = await asyncio.to_thread(client.run, [client.python, "-m", "ptlab.workloads.cell",
                                                    str(cfg)], False, budget)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise LabError(f"the client machine's measurement failed "
                           f"(exit {proc.returncode}): {err}")
        try:
            return Measurement.from_dict(json.loads(lines[-1]))
        except ValueError as exc:
            raise LabError(f"the client machine's measurement: {exc}") from None


class VmRunner(LabRunner):
    """The runner on three machines: :class:`LabRunner` with a :class:`VmBackend`."""

    def __init__(self, spec: Spec, out_dir: Path, machines: Machines, work: Path | None = None,
                 capture: bool = True, log=print, label: str = "three machines") -> None:
        super().__init__(spec, out_dir, capture=capture, log=log,
                         backend=VmBackend(spec, out_dir, machines, work, label))
