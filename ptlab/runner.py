"""The experiment runner: one lab, a matrix of cells, one result row per cell.

For each transport it runs the ``none`` censor first, as the baseline: a cell
whose baseline fails is ERROR, never "blocked". For each cell it starts the
censor with its profile, the transport's server and client processes, waits
for readiness, runs the workloads from the client namespace, reads the
censor's counters and events, and stops the cell's processes. The lab itself
(namespaces and lab services) is brought up once and reused across cells:
every cell starts and stops its own processes and censor table, so cells do
not share state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from censor_sim import profile as profiles
from netns import shaping
from netns.capture import Capture
from netns.errors import LabError
from netns.lab import Lab
from netns.process import LabProcess
from netns.sh import require_root, require_tools
from netns.topology import default_topology
from ptcommon.events import parse_event_line

from . import plugins
from .labservices import LabServices
from .plugins.base import CellContext, Service
from .results import Row, mean_ci95
from .spec import Spec, SpecError
from .workloads.cell import CellPlan, Measurement, measure

BASELINE = "none"


@dataclass
class CellRun:
    """Everything started for one cell, so it can be stopped and read back."""

    name: str
    procs: list[LabProcess] = field(default_factory=list)
    captures: list[Capture] = field(default_factory=list)
    pcaps: list[Path] = field(default_factory=list)  # where the captures write
    censor: LabProcess | None = None
    # Interfaces whose GSO was limited for this cell, restored when it stops.
    gso_limited: list[tuple[str, str]] = field(default_factory=list)


class LabRunner:
    """Runs cells in one lab. Use as a context manager, or start()/stop()."""

    def __init__(self, spec: Spec, out_dir: Path, lab_id: str | None = None,
                 capture: bool = True, log=print, extend_for_all: bool = False) -> None:
        self.spec = spec
        self.extend_for_all = extend_for_all
        self.out = Path(out_dir)
        # Where cells keep their files; the same path on every machine of a ptlab vm run.
        self.work = self.out
        self.cell_dir: Path | None = None  # the cell in progress
        self.lab_id = lab_id
        self.capture = capture
        self.log = log
        self.lab: Lab | None = None
        self.services: LabServices | None = None
        self.rtt_ms: float | None = None
        self.baselines: dict[str, Row] = {}
        # Benign flows that fail with no censor, per transport: not the censor's doing.
        self.baseline_benign_failures: dict[str, set[tuple[str, str]]] = {}
        self.events_path = self.out / "events.jsonl"
        self.integrity_failures: list[str] = []
        self._runs: dict[str, int] = {}
        self.delay_line: shaping.DelayLineHandle | None = None
        # The processes of the traffic_session in progress (benchmarks read them).
        self.session: CellRun | None = None

    # --- lab lifecycle --------------------------------------------------------

    def start(self) -> LabRunner:
        require_root()
        require_tools("ip", "nft", "tc", "tcpdump")
        for name, opts in self.spec.transports.items():
            try:
                plugins.get(name).check_options(opts)
            except (KeyError, ValueError) as exc:
                raise SpecError(f"transports.{name}: {exc}") from None
        self.out.mkdir(parents=True, exist_ok=True)
        topo = default_topology(proxies=self.spec.topology.proxies)
        # A lab shared by many cells (the pytest fixture) extends for every plugin.
        extend = {n: {} for n in plugins.available()} if self.extend_for_all else {}
        extend.update(self.spec.transports)
        for name, opts in extend.items():
            plugins.get(name).extend_topology(topo, opts)
        self.lab = Lab(topo, self.lab_id).up()
        try:
            self._shape()
            self.services = LabServices(self.lab, self.out / "lab").start()
            self.rtt_ms = self._measure_rtt()
        except BaseException:
            self.stop()
            raise
        return self

    def describe(self) -> str:
        """What the cells run on, for progress lines."""
        return f"lab {self.lab.id}" if self.lab else "lab"

    def stop(self) -> None:
        if self.lab:
            from .tor.network import stop_shared

            stop_shared(self.lab)  # the private Tor network, if a cell started one
        if self.delay_line:
            self.delay_line.stop()
            self._collect_events("lab", [self.delay_line.proc])
            self.delay_line = None
        if self.services:
            self.services.stop()
            self._collect_events("lab", self.services.procs)
            self.services = None
        if self.lab:
            self.lab.down()
            self.lab = None

    def __enter__(self) -> LabRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _shape(self) -> None:
        t = self.spec.topology
        shape = shaping.Shape(t.rate_mbit, t.loss_pct, t.delay_ms)
        if shape.is_null():
            return
        assert self.lab
        # The censor-inet link stands for the path between the user's ISP and the world.
        ends = (("censor", "inet"), ("inet", "censor"))
        netem = shape.delay_ms and shaping.netem_available(self.lab.ns("inet"),
                                                          self.lab.iface("inet", "censor"))
        if shape.delay_ms and not netem:
            # No netem: the userspace delay line in the core router, one-way delay
            # delay_ms in each direction.
            self.delay_line = shaping.start_delay_line(
                self.lab.ns("inet"), shape.delay_ms, self.out / "lab" / "delayline.log",
                dev=self.lab.iface("inet", "censor"))
            shape = shaping.Shape(shape.rate_mbit, shape.loss_pct, 0.0)
        for a, b in ends:
            shaping.apply_egress(self.lab.ns(a), self.lab.iface(a, b), shape)

    def _measure_rtt(self) -> float | None:
        for _ in range(3):  # a fresh link may lose the first ARP round
            out = self._exec("client", ["ping", "-n", "-q", "-c", "5", "-i", "0.05", "-W", "1",
                                        self._addr("web")], check=False).stdout
            for line in out.splitlines():
                if "min/avg/max" in line:
                    return float(line.split("=")[1].split("/")[1])
        return None

    # --- cells ----------------------------------------------------------------

    def run_matrix(self, on_row=None) -> list[Row]:
        rows: list[Row] = []
        t0 = time.monotonic()
        for transport in self.spec.transports:
            columns = list(self.spec.censors)
            if BASELINE in columns:
                columns.remove(BASELINE)
                columns.insert(0, BASELINE)
            for censor in columns:
                if time.monotonic() - t0 > self.spec.budget_s:
                    row = Row(transport, censor, "ERROR",
                              error=f"over the wall-time budget ({self.spec.budget_s:.0f} s)")
                else:
                    row = self.run_cell(transport, censor)
                self._expect(row)
                rows.append(row)
                if on_row:
                    on_row(row)
        return rows

    def _expect(self, row: Row) -> None:
        for e in self.spec.expect:
            if (e.transport, e.censor) == (row.transport, row.censor):
                row.expectation = e.status
                row.expectation_met = row.status == e.status

    def baseline(self, transport: str) -> Row:
        """`transport` with no censor, measured once per transport."""
        if transport not in self.baselines:
            self._record_baseline(transport, self._cell(transport, BASELINE, {},
                                                        baseline_only=True))
        return self.baselines[transport]

    def _record_baseline(self, transport: str, row: Row) -> None:
        if row.status == "blocked":  # nothing blocks without a censor
            row.status, row.error = "ERROR", f"fails with no censor: {row.error}"
        self.baselines[transport] = row

    def run_cell(self, transport: str, censor: str,
                 overrides: dict[str, Any] | None = None) -> Row:
        """Run one cell; `censor` is a column of the spec (or a profile name)."""
        if censor in self.spec.censors:
            profile_name, spec_over = self.spec.censor_profile(censor)
        else:
            profile_name, spec_over = censor, {}
        merged = {**spec_over, **(overrides or {})}
        is_baseline = profile_name == BASELINE and not merged
        if not is_baseline:
            self.baseline(transport)  # so collateral can discount baseline failures
        row = self._cell(transport, censor, merged, profile_name=profile_name)
        if is_baseline:
            self._record_baseline(transport, row)
        elif row.status == "blocked" and self.baselines[transport].status != "reachable":
            row.notes.append(f"blocked-looking failure, but {transport} fails with no censor too")
            row.status = "ERROR"
            row.error = f"baseline (none censor) failed: {self.baselines[transport].error}"
        return row

    def _cell(self, transport: str, censor: str, overrides: dict[str, Any],
              profile_name: str | None = None, baseline_only: bool = False) -> Row:
        assert self.services
        profile_name = profile_name or censor
        name = f"{transport}__{censor}" + ("__baseline" if baseline_only else "")
        # The same cell may run again (pytest plugin): never overwrite its files.
        self._runs[name] = self._runs.get(name, 0) + 1
        if self._runs[name] > 1:
            name += f"__{self._runs[name]}"
        cell_dir = self.cell_dir = self.work / "cells" / name
        cell_dir.mkdir(parents=True, exist_ok=True)
        plugin = plugins.get(transport)
        ctx = self._context(transport, cell_dir)
        run = CellRun(name)
        row = Row(transport, censor, "ERROR", rtt_ms=self.rtt_ms)
        restarted = self.services.restart_dead()
        if restarted:
            row.notes.append(f"restarted lab services that had died: {', '.join(restarted)}")
        try:
            if self.capture and not baseline_only:
                self._start_captures(run)
                row.pcaps = [str(p.relative_to(self.work)) for p in run.pcaps]
            run.censor = self._start_censor(run, profile_name, overrides, cell_dir)
            if run.gso_limited:
                row.notes.append("policing cell: hosts sent wire-sized packets (gso_max_segs 1)")
            servers = plugin.servers(ctx)  # may write state files into the cell directory
            self._share(cell_dir)
            for svc in servers:
                self._start(run, svc, cell_dir)
            t_client = time.time()
            for svc in plugin.clients(ctx):
                self._start(run, svc, cell_dir)
            self._gather(cell_dir)  # what the processes wrote: bridge lines, SOCKS ports
            endpoint = plugin.endpoint(ctx)
            asyncio.run(self._workloads(row, endpoint, baseline_only))
            row.notes += plugin.notes(ctx)
            self._check_alive(row, run)
            self._finish_censor(row, run, t_client)
        except (LabError, profiles.ProfileError, OSError) as exc:
            row.status, row.error = "ERROR", str(exc)
        except Exception as exc:  # a bug must cost one cell, not the run
            (cell_dir / "traceback.txt").write_text(traceback.format_exc())
            row.status = "ERROR"
            row.error = f"internal error: {type(exc).__name__}: {exc} (see {name}/traceback.txt)"
        finally:
            self._stop_cell(run)
            self._gather_cell(run, cell_dir)
        return row

    # --- hooks: one lab here; ptlab.vm.runner spreads a cell over three machines ---

    def _context(self, transport: str, cell_dir: Path) -> CellContext:
        assert self.lab and self.services
        return CellContext(self.lab, cell_dir, self.spec.transports.get(transport, {}),
                           self.spec.seed, self.services.upstream,
                           lab_ca=self.services.ca.ca_path if self.services.ca else None,
                           lab_dir=self.services.dir)

    def _exec(self, role: str, argv: list[str], check: bool = True):
        """Run a short command where `role` runs."""
        assert self.lab
        return self.lab.exec(role, argv, check=check)

    def _addr(self, role: str) -> str:
        assert self.lab
        return self.lab.addr(role)

    def _share(self, cell_dir: Path) -> None:
        """Hand the files written here to where the cell's processes run (here)."""

    def _gather(self, cell_dir: Path) -> None:
        """Fetch what the cell's processes wrote (they wrote it here)."""

    def _gather_cell(self, run: CellRun, cell_dir: Path) -> None:
        """Bring a finished cell's logs and captures into the results (they are there)."""

    @contextlib.contextmanager
    def traffic_session(self, transport: str | None, name: str, pcap: Path,
                        snaplen: int = 2200) -> Iterator[Any]:
        """Run a transport's processes (or none, for benign traffic) with no censor,
        capturing the censor's client-side interface into `pcap`, and yield the
        transport's endpoint (None without a transport). Hosts send wire-sized
        packets meanwhile, as on a real link, so the capture holds the packets a
        censor on NFQUEUE sees. The learning censor's datasets come from here.
        """
        assert self.lab and self.services
        cell_dir = self.out / "cells" / name
        cell_dir.mkdir(parents=True, exist_ok=True)
        run = self.session = CellRun(name)
        try:
            self._wire_sized_segments(run)
            pcap.parent.mkdir(parents=True, exist_ok=True)
            run.captures.append(Capture(self.lab.ns("censor"), self.lab.iface("censor", "client"),
                                        pcap, snaplen=snaplen).start())
            endpoint = None
            if transport is not None:
                plugin = plugins.get(transport)
                ctx = CellContext(self.lab, cell_dir, self.spec.transports.get(transport, {}),
                                  self.spec.seed, self.services.upstream,
                                  lab_ca=self.services.ca.ca_path if self.services.ca else None,
                                  lab_dir=self.services.dir)
                for svc in plugin.servers(ctx):
                    self._start(run, svc, cell_dir)
                for svc in plugin.clients(ctx):
                    self._start(run, svc, cell_dir)
                endpoint = plugin.endpoint(ctx)
            yield endpoint
        finally:
            self._stop_cell(run)
            self.session = None

    def _check_alive(self, row: Row, run: CellRun) -> None:
        """A result measured while part of the lab was dead is no result."""
        assert self.services
        dead = [p.name for p in run.procs if not p.running()]
        dead += [f"lab service {n}" for n in self.services.dead()]
        if dead:
            row.status = "ERROR"
            row.error = f"died during the cell: {', '.join(dead)}"

    def _start(self, run: CellRun, svc: Service, cell_dir: Path) -> LabProcess:
        assert self.lab
        p = LabProcess(self.lab.ns(svc.role), svc.argv, svc.name,
                       cell_dir / f"{svc.name}.log", env=svc.env).start()
        run.procs.append(p)
        p.wait_log(svc.ready, svc.ready_timeout_s)
        return p

    def _start_captures(self, run: CellRun) -> None:
        assert self.lab
        pdir = self.out / "pcaps"
        pdir.mkdir(exist_ok=True)
        for peer in ("client", "inet"):
            cap = Capture(self.lab.ns("censor"), self.lab.iface("censor", peer),
                          pdir / f"{run.name}__censor-{peer}.pcap")
            run.captures.append(cap.start())
            run.pcaps.append(cap.pcap)

    def _censor_overrides(self, run: CellRun, profile_name: str,
                          overrides: dict[str, Any]) -> tuple[profiles.Profile, dict[str, Any]]:
        """The cell's profile, and its overrides with "role:" addresses resolved. Hosts
        send wire-sized packets from here on when the profile polices or learned."""
        prof = profiles.load_profile(profile_name, overrides)
        detectors = self._resolve_roles(prof.detectors)
        learning = any(d.get("kind") == "ml" for d in prof.detectors.values())
        if "throttle" in prof.actions or learning:
            # Policers, and models trained on wire-sized packets (ptlab dataset), need
            # the packets a real link carries.
            self._wire_sized_segments(run)
        return prof, {**overrides, "detectors": detectors} if detectors else overrides

    def _start_censor(self, run: CellRun, profile_name: str, overrides: dict[str, Any],
                      cell_dir: Path) -> LabProcess:
        assert self.lab
        prof, over = self._censor_overrides(run, profile_name, overrides)
        cfg = {"profile": profile_name, "overrides": over,
               "inside": self.lab.iface("censor", "client"),
               "outside": self.lab.iface("censor", "inet"), "seed": self.spec.seed}
        if prof.probes:  # the censor's prober, on its own node (ARCHITECTURE.md §1)
            listen = f"{self.lab.addr('prober')}:9100"
            pool = self.lab.topology.nodes["prober"].extra_prefixes
            self._start(run, Service("prober", "prober", [
                _python(), "-m", "censor_sim.prober", "serve", "--listen", listen,
                "--sources", ",".join(pool), "--seed", str(self.spec.seed)]), cell_dir)
            cfg["prober"] = listen
        cfg_path = cell_dir / "censor.json"
        cfg_path.write_text(json.dumps(cfg, indent=2))
        return self._start(run, Service("censor", "censor",
                                        [_python(), "-m", "censor_sim", "--config",
                                         str(cfg_path)]), cell_dir)

    def _wire_sized_segments(self, run: CellRun) -> None:
        """Make every lab host send MTU-sized packets for a policing cell.

        With TSO a veth hands the censor 64 KB super-packets; the kernel policer
        then drops up to 44 segments at a time and a 2 Mbit/s throttle lands
        10-15 % low. Real links carry wire-sized packets, so the hosts' GSO is
        limited to one segment (`gso_max_segs 1`) while the cell runs.
        """
        assert self.lab
        topo = self.lab.topology
        for role, node in topo.nodes.items():
            if node.router:
                continue
            for lk in topo.links_of(role):
                dev = self.lab.iface(role, lk.other(role))
                self.lab.exec(role, ["ip", "link", "set", "dev", dev, "gso_max_segs", "1"])
                run.gso_limited.append((role, dev))

    def _resolve_roles(self, value: Any) -> Any:
        """Replace "role:NAME" with every address of lab node NAME."""
        if isinstance(value, dict):
            return {k: self._resolve_roles(v) for k, v in value.items()}
        if isinstance(value, list):
            out: list[Any] = []
            for v in value:
                if isinstance(v, str) and v.startswith("role:"):
                    out += self._role_addresses(v[5:])
                else:
                    out.append(v)
            return out
        return value

    def _role_addresses(self, role: str) -> list[str]:
        assert self.lab
        if role not in self.lab.topology.nodes:
            raise profiles.ProfileError(f"role:{role}: no lab node {role!r}")
        return self.lab.topology.addresses(role)

    def _plan(self, transport: str, baseline_only: bool) -> CellPlan:
        w = self.spec.workloads
        # A transport that must bootstrap first (tor) gets at least its own floor.
        boot_s = max(w.bootstrap_timeout_s, plugins.get(transport).bootstrap_floor_s)
        return CellPlan(bootstrap_s=boot_s, repetitions=1 if baseline_only else
                        self.spec.repetitions, bulk_size=w.bulk_size, seed=self.spec.seed,
                        bulk_timeout_s=w.bulk_timeout_s, idle_timeout_s=w.idle_timeout_s,
                        latency_count=0 if baseline_only else w.latency_count,
                        benign=bool(w.benign), benign_timeout_s=w.benign_timeout_s)

    async def _measure(self, endpoint, plan: CellPlan) -> Measurement:
        """Measure from the client namespace, in this process (ptlab vm: on the client host)."""
        assert self.lab and self.services
        return await measure(self.lab.ns("client"), endpoint, plan,
                             self.services.benign_targets(), self.services.sshd)

    async def _workloads(self, row: Row, endpoint, baseline_only: bool) -> None:
        plan = self._plan(row.transport, baseline_only)
        self._fill(row, await self._measure(endpoint, plan), plan)

    def _fill(self, row: Row, m: Measurement, plan: CellPlan) -> None:
        """The row's status and figures from what the client measured."""
        row.bootstrap_s = m.bootstrap_s
        row.repetitions = plan.repetitions
        failure: str | None = None
        if m.bootstrap_s is None:
            failure = f"no request got through within {plan.bootstrap_s:.0f} s"
        for res in m.bulks:
            if res.integrity_error:
                self.integrity_failures.append(f"{row.transport} × {row.censor}: {res.error}")
                row.status, row.error = "ERROR", res.error
                self.log(f"[bold red]{res.error}[/]")
                return
            if not res.ok:
                failure = res.error
        if failure is None:
            goodputs = [b.goodput_mbps for b in m.bulks if b.goodput_mbps is not None]
            row.status = "reachable"
            row.goodput_samples = goodputs
            row.goodput_mbps, row.goodput_ci95 = mean_ci95(goodputs)
            row.latency_samples = list(m.latency_samples)
            if row.latency_samples:
                row.latency_ms = statistics.median(row.latency_samples)
                row.latency_ci95 = mean_ci95(row.latency_samples)[1]
        else:
            row.status, row.error = "blocked", failure
            row.bytes_before_block = sum(b.received for b in m.bulks)
        if m.benign is not None:
            self._benign(row, m.benign, baseline=row.censor == BASELINE)

    def _benign(self, row: Row, results: list, baseline: bool) -> None:
        """Collateral damage: benign flows that fail under this censor but not without one."""
        failing = {(r.kind, r.target) for r in results if not r.ok}
        if baseline:
            self.baseline_benign_failures[row.transport] = failing
            if failing:
                row.notes.append(f"benign flows fail with no censor: {sorted(failing)}")
            excused: set[tuple[str, str]] = set()
        else:
            excused = failing & self.baseline_benign_failures.get(row.transport, set())
            if excused:
                row.notes.append(f"not counted as collateral (fail with no censor too): "
                                 f"{sorted(excused)}")
        counted = [r for r in results if (r.kind, r.target) not in excused]
        row.benign_total = len(counted)
        row.benign_blocked = sum(not r.ok for r in counted)
        row.collateral = row.benign_blocked / row.benign_total if counted else None
        results = counted
        detail: dict[str, dict[str, int]] = {}
        for r in results:
            d = detail.setdefault(r.kind, {"ok": 0, "blocked": 0})
            d["ok" if r.ok else "blocked"] += 1
        row.benign_detail = detail

    def _finish_censor(self, row: Row, run: CellRun, t_client: float) -> None:
        censor = run.censor
        assert censor
        if not censor.running():
            row.status, row.error = "ERROR", "the censor process died during the cell"
        self._await_probes(censor)
        censor.stop()
        events = [e for line in censor.log_text().splitlines()
                  if (e := parse_event_line(line))]
        for e in events:
            if e["event"] == "detection":
                acts = e.get("actions") or ([e["action"]] if e.get("action") else [])
                if not acts:  # detected, but the per-connection chance said no
                    continue
                det = e.get("detector") or "?"
                row.detections[det] = row.detections.get(det, 0) + 1
                if row.detector is None:
                    row.detector, row.action = det, "+".join(acts)
                    row.time_to_detection_s = round(max(e["ts"] - t_client, 0.0), 3)
            if e["event"] == "probe_request":
                row.probes_sent += 1
            if e["event"] == "probe_verdict":
                label = str(e.get("label"))
                row.probe_verdicts[label] = row.probe_verdicts.get(label, 0) + 1
            if e["event"] == "counters":
                row.censor_counters = {k: v["packets"] for k, v in e["counters"].items()}
                flows = row.censor_counters.get("new_flows", 0)
                if flows:
                    row.censor_cpu_per_flow_ms = round(e["cpu_s"] * 1000 / flows, 4)
        if not any(e["event"] == "counters" for e in events):
            row.notes.append("censor reported no counters (did it crash?)")

    @staticmethod
    def _await_probes(censor: LabProcess, limit_s: float = 15.0) -> None:
        """Probes follow the suspicious connection by a delay and take a while: let
        the ones already asked for report their verdict before the censor stops."""
        deadline = time.monotonic() + limit_s
        while censor.running() and time.monotonic() < deadline:
            text = censor.log_text()
            asked = text.count('"event": "probe_request"')
            if asked == text.count('"event": "probe_verdict"') + text.count(
                    '"event": "probe_failed"'):
                return
            time.sleep(0.1)

    def _stop_cell(self, run: CellRun) -> None:
        for p in reversed(run.procs):
            p.stop()
        for role, dev in run.gso_limited:  # the veth default
            self._exec(role, ["ip", "link", "set", "dev", dev, "gso_max_segs", "65535"])
        for c in run.captures:
            try:
                c.stop()
            except LabError as exc:
                self.log(f"capture: {exc}")
        self._collect_events(run.name, run.procs)

    def _collect_events(self, cell: str, procs: list[LabProcess]) -> None:
        with open(self.events_path, "a") as out:
            for p in procs:
                for line in p.log_text().splitlines():
                    if (e := parse_event_line(line)) is not None:
                        e["cell"] = cell
                        out.write(json.dumps(e) + "\n")


def _python() -> str:
    import sys

    return sys.executable
