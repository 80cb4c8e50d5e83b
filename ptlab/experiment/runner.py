"""The experiment runner: one lab, a matrix of cells, one result row per cell.

For each transport it runs the ``none`` censor first, as the baseline: a cell
whose baseline fails is ERROR, never "blocked". For each cell it starts the
censor with its profile, the transport's server and client processes, waits
for readiness, runs the workloads from the client, reads the censor's counters
and events, and stops the cell's processes. The lab itself (network and lab
services) is brought up once and reused across cells: every cell starts and
stops its own processes and censor table, so cells do not share state.

Where the processes run is a backend's business (:mod:`ptlab.experiment.backend`: the
namespace lab here, three machines in :mod:`ptlab.vm.runner`); what the evidence
means is :mod:`ptlab.experiment.scoring`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from censor_sim import profile as profiles
from netns.capture import dropped_packets
from netns.errors import LabError
from ptcommon.events import count_events, event_record, parse_event_line

from ..common.flowroles import TCP, UDP, FlowRoles
from ..common.labview import Process
from ..common.logevents import is_tor, tor_event
from ..common.results import Row
from ..common.wellknown import DNS_PORT, STUN_PORT, WEB_HTTPS
from ..plugins.base import Endpoint, LabPlugin
from ..workloads.cell import CellPlan
from . import scoring
from .backend import CellRun, LabBackend
from .labservices import LabServices
from .nsbackend import NamespaceBackend
from .scoring import BASELINE, workload_markers
from .spec import Spec, TransportRow

__all__ = ["BASELINE", "CellRun", "LabRunner"]


def _cpu(procs: list) -> float | None:
    """The processes' CPU seconds so far, summed; None where it is not measured."""
    seconds = [p.cpu_seconds() for p in procs]
    return None if any(s is None for s in seconds) else sum(seconds)


class LabRunner:
    """Runs a spec's cells on a backend (by default, the namespace lab on this
    machine). Use as a context manager, or start()/stop()."""

    def __init__(self, spec: Spec, out_dir: Path, lab_id: str | None = None,
                 capture: bool = True, log=print, extend_for_all: bool = False,
                 backend: LabBackend | None = None) -> None:
        self.spec = spec
        self.out = Path(out_dir)
        self.backend = backend or NamespaceBackend(spec, self.out, lab_id, extend_for_all)
        self.cell_dir: Path | None = None  # the cell in progress
        self.capture = capture
        self.log = log
        self.baselines: dict[str, Row] = {}
        # Benign flows that fail with no censor, per transport: not the censor's doing.
        self.baseline_benign_failures: dict[str, set[str]] = {}  # transport -> classes
        self.events_path = self.out / "events.jsonl"
        # id(process) -> (process, lines of its log already in events.jsonl)
        self._events_read: dict[int, tuple[Process, int]] = {}
        self.integrity_failures: list[str] = []
        self.corrupted_cells: list[str] = []  # "transport × censor" of each one
        self._runs: dict[str, int] = {}
        # The processes of the traffic_session in progress (benchmarks read them).
        self.session: CellRun | None = None

    # --- lab lifecycle --------------------------------------------------------

    @property
    def work(self) -> Path:
        """Where cells keep their files (the same path wherever they run)."""
        return self.backend.work

    @property
    def services(self) -> LabServices | None:
        return self.backend.services

    @property
    def rtt_ms(self) -> float | None:
        return self.backend.rtt_ms

    @property
    def lab(self):
        """The namespace lab (None on another backend, or before start)."""
        return getattr(self.backend, "lab", None)

    def row(self, transport: str) -> TransportRow:
        """Transport `transport` as a row of the spec as it stands: its plugin and
        options are looked up once per cell, which then carries them (a shared lab's
        spec may change a row's options between cells)."""
        return self.spec.row(transport)

    def start(self) -> LabRunner:
        for name in self.spec.transports:
            self.row(name).check()
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            self.backend.start()
        except BaseException:
            self.stop()
            raise
        return self

    def describe(self) -> str:
        """What the cells run on, for progress lines."""
        return self.backend.describe()

    def stop(self) -> None:
        for label, procs in self.backend.stop():
            self._collect_events(label, procs)

    def __enter__(self) -> LabRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- cells ----------------------------------------------------------------

    def run_matrix(self, on_row=None, cells: list[tuple[str, str]] | None = None) -> list[Row]:
        """Run `cells` (by default the spec's selection) row by row, each row's
        no-censor column first, and apply the expectations."""
        rows: list[Row] = []
        t0 = time.monotonic()
        # The budget is the spec's wall time on this machine's namespaces: an
        # emulated machine gets as much longer as its every wait does.
        budget_s = self.spec.budget_s * self.backend.timeout_scale
        cells = self.spec.selected_cells() if cells is None else cells
        for transport in dict.fromkeys(t for t, _ in cells):
            columns = [c for t, c in cells if t == transport]
            if BASELINE in columns:
                columns.remove(BASELINE)
                columns.insert(0, BASELINE)
            for censor in columns:
                if time.monotonic() - t0 > budget_s:
                    row = Row(transport, censor, "ERROR",
                              error=f"over the wall-time budget ({budget_s:.0f} s)")
                else:
                    row = self.run_cell(transport, censor)
                scoring.apply_expectations(row, self.spec.expect)
                rows.append(row)
                if on_row:
                    on_row(row)
        return rows

    def adopt_baselines(self, rows: list[Row]) -> None:
        """Take earlier no-censor cells as the baselines of their transports (a run
        resumed from its results): their benign failures still excuse, and they
        are not measured again."""
        for row in rows:
            if row.censor == BASELINE and row.transport not in self.baselines:
                self.baselines[row.transport] = scoring.as_baseline(row)
                self.baseline_benign_failures[row.transport] = set(row.benign_lab_failures)

    def baseline(self, row: TransportRow) -> Row:
        """`row` with no censor, measured once per transport."""
        if row.name not in self.baselines:
            self.baselines[row.name] = scoring.as_baseline(
                self._cell(row, BASELINE, {}, baseline_only=True))
        return self.baselines[row.name]

    def run_cell(self, transport: str, censor: str,
                 overrides: dict[str, Any] | None = None) -> Row:
        """Run one cell; `censor` is a column of the spec (or a profile name).

        A row that cannot run with the tools found (a build tag it needs is
        missing) is not run: the cell is "skipped", with the plugin's reason.
        """
        row = self.row(transport)
        reason = row.plugin.skip_reason()
        if reason:
            return Row(transport, censor, "skipped", error=reason, rtt_ms=self.rtt_ms)
        if censor in self.spec.censors:
            profile_name, spec_over = self.spec.censor_profile(censor)
        else:
            profile_name, spec_over = censor, {}
        merged = {**spec_over, **(overrides or {})}
        is_baseline = profile_name == BASELINE and not merged
        if not is_baseline:
            self.baseline(row)  # so collateral can discount baseline failures
        result = self._cell(row, censor, merged, profile_name=profile_name)
        if is_baseline:
            self.baselines[transport] = scoring.as_baseline(result)
            return result
        return scoring.against_baseline(result, self.baselines[transport])

    def _cell(self, transport: TransportRow, censor: str, overrides: dict[str, Any],
              profile_name: str | None = None, baseline_only: bool = False) -> Row:
        services = self.services
        assert services
        b = self.backend
        profile_name = profile_name or censor
        name = f"{transport.name}__{censor}" + ("__baseline" if baseline_only else "")
        # The same cell may run again (pytest plugin): never overwrite its files.
        self._runs[name] = self._runs.get(name, 0) + 1
        if self._runs[name] > 1:
            name += f"__{self._runs[name]}"
        cell_dir = self.cell_dir = self.work / "cells" / name
        cell_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        plugin = transport.plugin
        ctx = b.context(transport.options, self.spec.seed, cell_dir)
        run = CellRun(name, roles=self._flow_roles(resolver_is_wire=plugin.resolver_is_wire))
        run.markers.append(event_record("runner", "cell_start", cell=name,
                                        transport=transport.name, censor=censor,
                                        baseline=baseline_only))
        row = Row(transport.name, censor, "ERROR", rtt_ms=self.rtt_ms,
                  cell_dir=str(cell_dir.relative_to(self.work)))
        restarted = services.restart_dead()
        if restarted:
            row.notes.append(f"restarted lab services that had died: {', '.join(restarted)}")
        try:
            if self.capture and not baseline_only:
                b.start_captures(run)
                row.pcaps = [str(p.relative_to(self.work)) for p in run.pcaps]
            prof, over = self._censor_profile(run, profile_name, overrides)
            run.censor = b.start_censor(run, prof, over, self.spec.seed, cell_dir)
            if run.gso_limited:
                row.notes.append("policing cell: hosts sent wire-sized packets (gso_max_segs 1)")
            servers = plugin.servers(ctx)  # may write state files into the cell directory
            b.share(cell_dir)
            sides: dict[str, list] = {"server": [], "client": []}
            for svc in servers:
                sides["server"].append(b.start_process(run, svc, cell_dir))
            t_client = time.time()
            for svc in plugin.clients(ctx):
                sides["client"].append(b.start_process(run, svc, cell_dir))
            b.gather(cell_dir)  # what the processes wrote: bridge lines, SOCKS ports
            endpoint = self._inner_tls(plugin.endpoint(ctx), ctx, row)
            plan = self._plan(plugin, baseline_only)
            cpu_before = {side: _cpu(procs) for side, procs in sides.items()}
            measurement = asyncio.run(b.measure(endpoint, plan, cell_dir))
            row.cpu_s = {}
            for side, procs in sides.items():
                before, after = cpu_before[side], _cpu(procs)
                if before is not None and after is not None:
                    row.cpu_s[side] = round(after - before, 3)
            run.markers += workload_markers(name, measurement)
            self._score_measurement(row, measurement, plan)
            row.notes += plugin.notes(ctx)
            self._check_alive(row, run)
            self._finish_censor(row, run, t_client, run.roles)
        except (LabError, profiles.ProfileError, OSError) as exc:
            row.status, row.error = "ERROR", str(exc)
        except Exception as exc:  # a bug must cost one cell, not the run
            (cell_dir / "traceback.txt").write_text(traceback.format_exc())
            row.status = "ERROR"
            row.error = f"internal error: {type(exc).__name__}: {exc} (see {name}/traceback.txt)"
        finally:
            run.markers.append(event_record("runner", "cell_end", cell=name,
                                            status=row.status))
            self._stop_cell(run)
            b.gather_cell(run, cell_dir)
            row.cell_seconds = round(time.monotonic() - started, 3)
        return row

    def _flow_roles(self, resolver_is_wire: bool = False) -> FlowRoles | None:
        """Whose flows the censor may see in this lab (None before the lab is up).
        With ``resolver_is_wire`` (a DNS tunnel) the client's flows to the lab
        resolver are the transport's, so they are not listed as infrastructure."""
        if self.services is None:
            return None
        targets = self.services.benign_targets()
        try:
            svc = self.backend.role_addresses("svc")
        except ValueError:  # a lab without the services node
            svc = []
        infra = ([] if resolver_is_wire
                 else [(proto, a, DNS_PORT) for a in svc for proto in (TCP, UDP)])
        infra += [(UDP, a, STUN_PORT) for a in svc]
        return FlowRoles.build(self.backend.role_addresses("client"), targets.destinations(),
                               targets.unbound_destinations(), self.backend.prober_networks(),
                               infra)

    def _score_measurement(self, row: Row, m, plan: CellPlan) -> None:
        integrity = scoring.score_measurement(row, m, plan)
        if integrity is not None:
            self.integrity_failures.append(f"{row.transport} × {row.censor}: {integrity}")
            self.corrupted_cells.append(row.cell)
            self.log(f"[bold red]{integrity}[/]")
            return
        if m.benign is not None:
            baseline = row.censor == BASELINE
            failing = scoring.score_benign(
                row, m.benign,
                None if baseline else self.baseline_benign_failures.get(row.transport, set()))
            if baseline:
                self.baseline_benign_failures[row.transport] = failing

    @contextlib.contextmanager
    def traffic_session(self, transport: str | None, name: str, pcap: Path,
                        snaplen: int = 2200) -> Iterator[Any]:
        """Run a transport's processes (or none, for benign traffic) with no censor,
        capturing the censor's client-side interface into `pcap`, and yield the
        transport's endpoint (None without a transport). Hosts send wire-sized
        packets meanwhile, as on a real link, so the capture holds the packets a
        censor on NFQUEUE sees. The learning censor's datasets come from here.
        """
        b = self.backend
        if not isinstance(b, NamespaceBackend):
            raise LabError("traffic sessions (datasets) run in the namespace lab only")
        assert self.services
        cell_dir = self.out / "cells" / name
        cell_dir.mkdir(parents=True, exist_ok=True)
        run = self.session = CellRun(name)
        try:
            b.wire_sized_segments(run)
            pcap.parent.mkdir(parents=True, exist_ok=True)
            b.capture_client_side(run, pcap, snaplen)
            endpoint = None
            if transport is not None:
                row = self.row(transport)
                plugin = row.plugin
                ctx = b.context(row.options, self.spec.seed, cell_dir)
                for svc in plugin.servers(ctx):
                    b.start_process(run, svc, cell_dir)
                for svc in plugin.clients(ctx):
                    b.start_process(run, svc, cell_dir)
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

    def _censor_profile(self, run: CellRun, profile_name: str,
                        overrides: dict[str, Any]) -> tuple[profiles.Profile, dict[str, Any]]:
        """The cell's profile, and its overrides with "role:" addresses resolved. Hosts
        send wire-sized packets from here on when the profile polices or learned."""
        prof = profiles.load_profile(profile_name, overrides)
        detectors = self._resolve_roles(prof.detectors)
        learning = any(d.get("kind") == "ml" for d in prof.detectors.values())
        if "throttle" in prof.actions or learning:
            # Policers, and models trained on wire-sized packets (ptlab dataset), need
            # the packets a real link carries.
            self.backend.wire_sized_segments(run)
        return prof, {**overrides, "detectors": detectors} if detectors else overrides

    def _resolve_roles(self, value: Any) -> Any:
        """Replace "role:NAME" with every address of lab node NAME."""
        if isinstance(value, dict):
            return {k: self._resolve_roles(v) for k, v in value.items()}
        if isinstance(value, list):
            out: list[Any] = []
            for v in value:
                if isinstance(v, str) and v.startswith("role:"):
                    out += self.backend.role_addresses(v[5:])
                else:
                    out.append(v)
            return out
        return value

    def _inner_tls(self, endpoint: Endpoint, ctx: Any, row: Row) -> Endpoint:
        """With workloads.inner_tls, the workloads speak HTTPS to the web node inside
        the transport. Only a row whose workloads connect to the web server itself
        can: one whose bridge relays to its HTTP port keeps plain HTTP, with a note."""
        if not self.spec.workloads.inner_tls:
            return endpoint
        if (endpoint.target_host, endpoint.target_port) != tuple(ctx.upstream) or not ctx.lab_ca:
            row.notes.append("workloads.inner_tls: not applied (the row's bridge relays to "
                             "the web server's HTTP)")
            return endpoint
        return dataclasses.replace(endpoint, target_port=WEB_HTTPS,
                                   inner_tls_ca=str(ctx.lab_ca), inner_tls_host="web.lab")

    def _plan(self, plugin: LabPlugin, baseline_only: bool) -> CellPlan:
        w = self.spec.workloads
        scale = self.backend.timeout_scale  # > 1 on emulated machines
        # A transport that must bootstrap first (tor) gets at least its own floor.
        boot_s = max(w.bootstrap_timeout_s, plugin.bootstrap_floor_s) * scale
        return CellPlan(bootstrap_s=boot_s, repetitions=1 if baseline_only else
                        self.spec.repetitions, bulk_size=w.bulk_size, seed=self.spec.seed,
                        bulk_timeout_s=w.bulk_timeout_s * scale,
                        idle_timeout_s=w.idle_timeout_s * scale,
                        latency_count=0 if baseline_only else w.latency_count,
                        benign=bool(w.benign), benign_timeout_s=w.benign_timeout_s * scale)

    def _finish_censor(self, row: Row, run: CellRun, t_client: float,
                       roles: FlowRoles | None) -> None:
        censor = run.censor
        assert censor
        alive = censor.running()
        self._await_probes(censor)
        censor.stop()
        events = [e for line in censor.log_text().splitlines()
                  if (e := parse_event_line(line))]
        scoring.score_censor(row, events, t_client, censor_alive=alive, roles=roles)

    @staticmethod
    def _await_probes(censor: Process, limit_s: float = 15.0) -> None:
        """Probes follow the suspicious connection by a delay and take a while: let
        the ones already asked for report their verdict before the censor stops."""
        deadline = time.monotonic() + limit_s
        while censor.running() and time.monotonic() < deadline:
            text = censor.log_text()
            asked = count_events(text, "probe_request")
            if asked == count_events(text, "probe_verdict") + count_events(text, "probe_failed"):
                return
            time.sleep(0.1)

    def _stop_cell(self, run: CellRun) -> None:
        for p in reversed(run.procs):
            p.stop()
        for role, dev in run.gso_limited:  # the veth default
            self.backend.exec(role, ["ip", "link", "set", "dev", dev, "gso_max_segs", "65535"])
        for c, pcap in zip(run.captures, run.pcaps, strict=True):
            try:
                c.stop()
            except LabError as exc:
                self.log(f"capture: {exc}")
                continue
            # A capture that lost packets is said so, where the cell's events are:
            # a reader counting bytes in it must know it is short.
            dropped = dropped_packets(c.log_text())
            if dropped:
                self.log(f"capture {pcap.name}: the kernel dropped {dropped} packets")
                run.markers.append(event_record(
                    "runner", "capture_dropped", cell=run.name, packets=dropped,
                    pcap=pcap.name))
        events = self._read_events(run.name, run.procs, run.roles)
        if self.services:  # lab-wide services: what they logged during this cell
            events += self._read_events(run.name, self.services.procs, run.roles)
        self._write_events(events + run.markers)

    def _read_events(self, cell: str, procs: list[Process],
                     roles: FlowRoles | None = None) -> list[dict[str, Any]]:
        """The events ``procs`` logged since the last read, each marked with ``cell``
        and, when it names a flow, the flow's role (transport, benign:<class>, probe).

        Lab services live across cells, so they are read after every cell from
        where the last read stopped: events.jsonl is current after each cell, and
        an interrupted run still keeps what its services said. A line still being
        written is left for the next read.
        """
        out = []
        for p in procs:
            text = p.log_text(this_run_only=True)
            lines = text.splitlines()
            if text and not text.endswith("\n"):
                lines.pop()
            _, done = self._events_read.get(id(p), (p, 0))
            tor = is_tor(p.argv)
            for line in lines[done:]:
                e = parse_event_line(line) or (tor_event(p.name, line) if tor else None)
                if e is not None:
                    e["cell"] = cell
                    if roles is not None and isinstance(e.get("flow"), dict):
                        e["role"] = roles.role_of(e["flow"])
                    out.append(e)
            # The process is kept in the map so its id is not reused.
            self._events_read[id(p)] = (p, max(done, len(lines)))
        return out

    def _write_events(self, events: list[dict[str, Any]]) -> None:
        """Append ``events`` to events.jsonl in time order (processes' clocks are the
        same machine's, or NTP-close ones across VMs)."""
        events.sort(key=lambda e: float(e.get("ts", 0)))
        with open(self.events_path, "a") as out:
            for e in events:
                out.write(json.dumps(e, default=str) + "\n")

    def flush_events(self) -> None:
        """Write what the lab services logged since the last cell ended (a server
        may log a connection's end after the cell that opened it)."""
        if self.services:
            self._collect_events("lab", self.services.procs)

    def _collect_events(self, cell: str, procs: list[Process]) -> None:
        self._write_events(self._read_events(cell, procs))
