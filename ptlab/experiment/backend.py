"""Where a runner's cells run: the interface every lab backend implements.

:class:`ptlab.experiment.runner.LabRunner` decides what a cell does (baseline first, censor,
servers, clients, workloads, scoring) and never how. The how is a backend's:
the namespace lab (:class:`ptlab.experiment.nsbackend.NamespaceBackend`) starts processes in
network namespaces on this machine; the three-machine lab
(:class:`ptlab.vm.runner.VmBackend`) starts them on VMs or split namespaces over
a :class:`~ptlab.vm.hosts.Host`. Both implement :class:`LabBackend`, so the
rows they produce go through the same lines of code (docs/architecture.md §7).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..common.labview import Process, Stoppable

if TYPE_CHECKING:
    from censor_sim.profile import Profile

    from ..common.flowroles import FlowRoles
    from ..plugins.base import CellContext, Endpoint, Service
    from ..workloads.cell import CellPlan, Measurement
    from .labservices import LabServices


@dataclass
class CellRun:
    """Everything started for one cell, so it can be stopped and read back."""

    name: str
    procs: list[Process] = field(default_factory=list)
    captures: list[Stoppable] = field(default_factory=list)
    pcaps: list[Path] = field(default_factory=list)  # where each capture writes, in turn
    censor: Process | None = None
    # Interfaces whose GSO was limited for this cell, restored when it stops.
    gso_limited: list[tuple[str, str]] = field(default_factory=list)
    # Whose flow each censor event is about, and the runner's own events for the
    # cell (its start and end, each repetition, each benign flow).
    roles: FlowRoles | None = None
    markers: list[dict[str, Any]] = field(default_factory=list)


class LabBackend(ABC):
    """The hands of a runner: machines or namespaces, processes, captures, commands.

    A backend is started once per run (:meth:`start`) and stopped once
    (:meth:`stop`); between the two it serves any number of cells. ``work`` is
    where cells keep their files, the same path wherever the cell's processes run.
    """

    services: LabServices | None
    work: Path
    rtt_ms: float | None

    @abstractmethod
    def start(self) -> None:
        """Bring up the network and the lab services (and measure the RTT)."""

    @abstractmethod
    def stop(self) -> list[tuple[str, list[Process]]]:
        """Take everything down; return lab-wide processes whose events to keep,
        as (cell label, processes)."""

    @abstractmethod
    def describe(self) -> str:
        """What the cells run on, for progress lines."""

    @property
    def machines_label(self) -> str:
        """What the cells run on, for provenance: no lab id or other name that differs
        from one run to the next (``ptlab compare`` would list it as a difference)."""
        return self.describe()

    @property
    def timeout_scale(self) -> float:
        """How many times longer a process takes here than on this machine's own
        namespaces: the workloads' timeouts (bootstrap, bulk, idle, benign) are
        multiplied by it, so an emulated CPU (qemu's TCG) does not turn slowness
        into failures no censor caused."""
        return 1.0

    @abstractmethod
    def context(self, options: dict[str, Any], seed: int, cell_dir: Path) -> CellContext:
        """What a plugin may use to build its processes for one cell."""

    @abstractmethod
    def start_process(self, run: CellRun, svc: Service, cell_dir: Path) -> Process:
        """Start `svc` where its role runs, log into `cell_dir`, wait until ready;
        the process is added to `run` before the wait, so a failed wait still stops it."""

    @abstractmethod
    def start_captures(self, run: CellRun) -> None:
        """Capture the censor's two interfaces for the cell (into ``work/pcaps``)."""

    @abstractmethod
    def start_censor(self, run: CellRun, profile: Profile, overrides: dict[str, Any],
                     seed: int, cell_dir: Path) -> Process:
        """The censor (and its prober, where the backend has one) for the cell."""

    @abstractmethod
    def exec(self, role: str, argv: list[str], check: bool = True) -> Any:
        """Run a short command where `role` runs."""

    @abstractmethod
    def addr(self, role: str) -> str:
        """The address of lab role `role`."""

    def measure_rtt(self) -> float | None:
        """The client's mean ping RTT to the web server in ms (None if ping fails):
        every report states the RTT it ran with."""
        for _ in range(3):  # a fresh link may lose the first ARP round
            out = self.exec("client", ["ping", "-n", "-q", "-c", "5", "-i", "0.05", "-W", "1",
                                       self.addr("web")], check=False).stdout
            for line in out.splitlines():
                if "min/avg/max" in line:
                    return float(line.split("=")[1].split("/")[1])
        return None

    def prober_networks(self) -> list[str]:
        """Where the censor's prober connects from (its node and source pool): its
        flows are told apart from the client's."""
        try:
            return self.role_addresses("prober")
        except ValueError:  # no prober node in this lab
            return []

    @abstractmethod
    def role_addresses(self, role: str) -> list[str]:
        """Every address of a role, for "role:NAME" in censor profiles."""

    @abstractmethod
    def wire_sized_segments(self, run: CellRun) -> None:
        """Make the hosts send MTU-sized packets while the cell runs (recorded in
        ``run.gso_limited`` and undone when it stops)."""

    @abstractmethod
    async def measure(self, endpoint: Endpoint, plan: CellPlan,
                      cell_dir: Path) -> Measurement:
        """Run the client's workloads from where the client runs."""

    @abstractmethod
    def share(self, path: Path) -> None:
        """Hand the files written here to where the cell's processes run."""

    @abstractmethod
    def gather(self, path: Path) -> None:
        """Fetch what the cell's processes wrote under `path`."""

    @abstractmethod
    def gather_cell(self, run: CellRun, cell_dir: Path) -> None:
        """Bring a finished cell's logs and captures into the results."""
