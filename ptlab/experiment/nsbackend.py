"""The namespace lab: every role a network namespace on this machine.

One :class:`netns.lab.Lab` (client, censor router, core router, web, bridge,
cdn, svc, prober and what plugins add) is brought up once per run and serves
every cell; cells start and stop only their own processes. Shaping is applied
to the censor-inet link, which stands for the path between the user's ISP and
the world (docs/architecture.md §4.2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from censor_sim import profile as profiles
from netns import shaping
from netns.capture import Capture
from netns.lab import Lab
from netns.process import LabProcess
from netns.sh import require_root, require_tools
from netns.topology import default_topology

from .. import plugins
from ..common.labview import Process
from ..plugins.base import CellContext, Endpoint, Service
from ..workloads.cell import CellPlan, Measurement, measure
from .backend import CellRun, LabBackend
from .labservices import LabServices
from .spec import Spec

#: The port the censor's prober listens on, on its own node.
PROBER_PORT = 9100


class NamespaceBackend(LabBackend):
    """Cells in the network namespaces of one lab on this machine."""

    def __init__(self, spec: Spec, out_dir: Path, lab_id: str | None = None,
                 extend_for_all: bool = False) -> None:
        self.spec = spec
        self.out = Path(out_dir)
        self.work = self.out
        self.lab_id = lab_id
        self.extend_for_all = extend_for_all
        self.lab: Lab | None = None
        self.services: LabServices | None = None
        self.rtt_ms: float | None = None
        self.delay_line: shaping.DelayLineHandle | None = None

    # --- the lab --------------------------------------------------------------

    def start(self) -> None:
        require_root()
        require_tools("ip", "nft", "tc", "tcpdump")
        topo = default_topology(proxies=self.spec.topology.proxies)
        # A lab shared by many cells (the pytest fixture) extends for every plugin.
        extend: dict[str, dict[str, Any]] = (
            {n: {} for n in plugins.available()} if self.extend_for_all else {})
        extend.update(self.spec.transports)
        for name, opts in extend.items():
            plugins.get(name).extend_topology(topo, opts)
        self.lab = Lab(topo, self.lab_id).up()
        self._shape()
        self.services = LabServices(self.lab, self.out / "lab").start()
        self.rtt_ms = self.measure_rtt()

    def stop(self) -> list[tuple[str, list[Process]]]:
        keep: list[tuple[str, list[Process]]] = []
        if self.lab:
            from ..tor.network import stop_shared

            stop_shared(self.lab)  # the private Tor network, if a cell started one
        if self.delay_line:
            self.delay_line.stop()
            keep.append(("lab", [self.delay_line.proc]))
            self.delay_line = None
        if self.services:
            self.services.stop()
            keep.append(("lab", list(self.services.procs)))
            self.services = None
        if self.lab:
            self.lab.down()
            self.lab = None
        return keep

    def describe(self) -> str:
        return f"lab {self.lab.id}" if self.lab else "lab"

    @property
    def machines_label(self) -> str:
        return "network namespaces on this machine"

    def _shape(self) -> None:
        t = self.spec.topology
        shape = shaping.Shape(t.rate_mbit, t.loss_pct, t.delay_ms)
        if shape.is_null():
            return
        assert self.lab
        # The censor-to-core link: one-way delay delay_ms in each direction (the
        # delay line, where there is no netem, runs in the core router).
        self.delay_line = shaping.shape_link(self.lab, "inet", "censor", shape,
                                             self.out / "lab" / "delayline.log")

    # --- cells ----------------------------------------------------------------

    def context(self, options: dict[str, Any], seed: int, cell_dir: Path) -> CellContext:
        assert self.lab and self.services
        return CellContext(self.lab, cell_dir, options, seed, self.services.upstream,
                           lab_ca=self.services.ca.ca_path if self.services.ca else None,
                           lab_dir=self.services.dir)

    def start_process(self, run: CellRun, svc: Service, cell_dir: Path) -> Process:
        assert self.lab
        p = LabProcess(self.lab.ns(svc.role), svc.argv, svc.name,
                       cell_dir / f"{svc.name}.log", env=svc.env).start()
        run.procs.append(p)
        p.wait_log(svc.ready, svc.ready_timeout_s, svc.ready_what, svc.ready_hint)
        return p

    def start_captures(self, run: CellRun) -> None:
        assert self.lab
        pdir = self.out / "pcaps"
        pdir.mkdir(exist_ok=True)
        for peer in ("client", "inet"):
            cap = Capture(self.lab.ns("censor"), self.lab.iface("censor", peer),
                          pdir / f"{run.name}__censor-{peer}.pcap",
                          snaplen=self.spec.capture_snaplen)
            run.captures.append(cap.start())
            run.pcaps.append(cap.pcap)

    def capture_client_side(self, run: CellRun, pcap: Path, snaplen: int) -> None:
        """Capture the censor's client-side interface into `pcap` (datasets)."""
        assert self.lab
        run.captures.append(Capture(self.lab.ns("censor"), self.lab.iface("censor", "client"),
                                    pcap, snaplen=snaplen).start())
        run.pcaps.append(pcap)

    def start_censor(self, run: CellRun, profile: profiles.Profile, overrides: dict[str, Any],
                     seed: int, cell_dir: Path) -> Process:
        assert self.lab
        cfg: dict[str, Any] = {"profile": profile.name, "overrides": overrides,
                               "inside": self.lab.iface("censor", "client"),
                               "outside": self.lab.iface("censor", "inet"), "seed": seed}
        if profile.probes:  # the censor's prober, on its own node (docs/architecture.md §1.1)
            listen = f"{self.lab.addr('prober')}:{PROBER_PORT}"
            pool = self.lab.topology.nodes["prober"].extra_prefixes
            self.start_process(run, Service("prober", "prober", [
                sys.executable, "-m", "censor_sim.prober", "serve", "--listen", listen,
                "--sources", ",".join(pool), "--seed", str(seed)]), cell_dir)
            cfg["prober"] = listen
        cfg_path = cell_dir / "censor.json"
        cfg_path.write_text(json.dumps(cfg, indent=2))
        return self.start_process(run, Service("censor", "censor", [
            sys.executable, "-m", "censor_sim", "--config", str(cfg_path)]), cell_dir)

    def exec(self, role: str, argv: list[str], check: bool = True) -> Any:
        assert self.lab
        return self.lab.exec(role, argv, check=check)

    def addr(self, role: str) -> str:
        assert self.lab
        return self.lab.addr(role)

    def prober_networks(self) -> list[str]:
        assert self.lab
        node = self.lab.topology.nodes.get("prober")
        if node is None:
            return []
        return self.lab.topology.addresses("prober") + list(node.extra_prefixes)

    def role_addresses(self, role: str) -> list[str]:
        assert self.lab
        if role not in self.lab.topology.nodes:
            raise profiles.ProfileError(f"role:{role}: no lab node {role!r}")
        return self.lab.topology.addresses(role)

    def wire_sized_segments(self, run: CellRun) -> None:
        """With TSO a veth hands the censor 64 KB super-packets; a kernel policer
        then drops up to 44 segments at a time and a 2 Mbit/s throttle lands 10-15 %
        low. Real links carry wire-sized packets, so every host's GSO is limited to
        one segment (``gso_max_segs 1``) while the cell runs."""
        assert self.lab
        topo = self.lab.topology
        for role, node in topo.nodes.items():
            if node.router:
                continue
            for lk in topo.links_of(role):
                dev = self.lab.iface(role, lk.other(role))
                self.lab.exec(role, ["ip", "link", "set", "dev", dev, "gso_max_segs", "1"])
                run.gso_limited.append((role, dev))

    def share(self, path: Path) -> None:
        """Nothing to hand over: every namespace sees this machine's files."""

    def gather(self, path: Path) -> None:
        """Nothing to fetch: the processes wrote here."""

    def gather_cell(self, run: CellRun, cell_dir: Path) -> None:
        """Nothing to bring home: logs and captures are in the results already."""

    async def measure(self, endpoint: Endpoint, plan: CellPlan,
                      cell_dir: Path) -> Measurement:
        """Measure from the client namespace, in this process."""
        assert self.lab and self.services
        return await measure(self.lab.ns("client"), endpoint, plan,
                             self.services.benign_targets(), self.services.sshd)
