"""How the live censor sees packets: held in NFQUEUE (in-path) or copied by
NFLOG (on-path), each handed to the engine, its verdict carried back to the
kernel, and where each packet's time goes counted (docs/lab/censor.md §1, §5).
"""

from __future__ import annotations

import asyncio
import sys
import time
from functools import partial
from typing import Any

from ptcommon.events import EventLog

from . import datapath, packet
from .actions import Verdict
from .engine import Engine
from .injector import Injector

emit = EventLog("censor").emit


class Runner:
    """What both ways of seeing packets share: the engine, the injector, and
    the accounting of where each packet's time goes."""

    mechanism = ""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.injector = Injector()
        self.queued = 0
        self.busy_s = 0.0
        # Where a packet's time goes: reading it (copy and parse), the engine,
        # and what follows (the verdict, or the batch's marks, and any injection).
        self.parse_s = self.engine_s = 0.0
        self.errors = 0
        self.marker: Any = None  # on-path runners: a ctmark.Marker

    def _error(self, exc: Exception) -> None:
        # A censor bug must not wedge the datapath: count it, report it, go on.
        self.errors += 1
        emit("error", error=f"{type(exc).__name__}: {exc}")

    def _inject(self, v: Verdict) -> None:
        for spec in v.inject:
            self.injector.send(spec)

    def _act_on_path(self, v: Verdict, flow_tuple: tuple, marks: dict[tuple, int]) -> None:
        """On-path, the packet has gone on: what is left of ``v`` is its forgeries,
        and its flow decision, kept in ``marks`` to be written as conntrack marks
        with the rest of the batch (:meth:`_write_marks`). An accept is not
        written, nor a repeat of a decision already marked."""
        self._inject(v)
        mark = datapath.FLOW_MARKS.get(v.flow or "", 0)
        if mark and v.flow != "accept" and not v.repeat:
            marks[flow_tuple] = mark

    def _write_marks(self, marks: dict[tuple, int]) -> None:
        """A batch's flow marks in one ctnetlink exchange, then its event lines."""
        if marks:
            t0 = time.perf_counter()
            try:
                self.marker.mark(list(marks.items()))
            except OSError as exc:
                self._error(exc)
            self.busy_s += time.perf_counter() - t0
        sys.stdout.flush()

    def counters(self) -> dict[str, Any]:
        if self.marker is None:
            return {"mechanism": self.mechanism}
        return {"mechanism": self.mechanism, "marks_written": self.marker.written,
                "marks_missing": self.marker.missing}

    def bind(self) -> None:
        """Open the kernel's source of packets (a queue, a log group, a ring buffer)."""
        raise NotImplementedError

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read that source on ``loop`` from now on."""
        raise NotImplementedError

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        self.injector.close()


class QueueRunner(Runner):
    """In-path: NFQUEUE → engine → a verdict on the very packet, which waits."""

    mechanism = "nfqueue"

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.queues: list[Any] = []

    def bind(self) -> None:
        from netfilterqueue import NetfilterQueue

        for num, from_client in ((datapath.QUEUE_C2S, True), (datapath.QUEUE_S2C, False)):
            q = NetfilterQueue()
            q.bind(num, partial(self.on_packet, from_client=from_client), max_len=8192)
            self.queues.append(q)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        for q in self.queues:
            loop.add_reader(q.get_fd(), self._drain, q)

    @staticmethod
    def _drain(q) -> None:
        """Every packet waiting on `q`, then the batch's event lines in one write."""
        try:
            q.run(block=False)
        finally:
            sys.stdout.flush()

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        for q in self.queues:
            loop.remove_reader(q.get_fd())
            q.unbind()
        super().close(loop)

    def on_packet(self, nfpkt, from_client: bool) -> None:
        clock = time.perf_counter
        t0 = clock()
        self.queued += 1
        try:
            pkt = packet.parse(nfpkt.get_payload())
            if pkt is None:
                nfpkt.accept()
                return
            t1 = clock()
            v = self.engine.handle(pkt, from_client)
            t2 = clock()
            self.parse_s += t1 - t0
            self.engine_s += t2 - t1
            self._inject(v)
            self._verdict(nfpkt, v)
        except Exception as exc:
            self._error(exc)
            try:
                nfpkt.accept()
            except Exception:
                pass
        finally:
            self.busy_s += time.perf_counter() - t0

    @staticmethod
    def _verdict(nfpkt, v: Verdict) -> None:
        mark = datapath.FLOW_MARKS.get(v.flow or "", 0)
        if v.drop and v.flow == "accept":
            # Kernel state (a residual entry) already drops this packet in the
            # post chain; accepting with the mark also offloads the flow.
            nfpkt.set_mark(mark)
            nfpkt.accept()
        elif v.drop and v.flow != "drop":
            nfpkt.drop()
        else:
            if v.passthrough:
                mark |= datapath.MARK_PASS
            if mark:
                nfpkt.set_mark(mark)
            nfpkt.accept()


class TapRunner(Runner):
    """On-path: NFLOG copies → engine; the packets themselves never wait.

    Forgeries race the real packets, as an injector's do. A flow's decision
    (drop, throttle, freeze, loss) goes into its conntrack mark, written for a
    whole batch of copies at once; until then its packets pass, which is the
    tap's race with the flow. An "accept" is not written: the connbytes budget
    already ends the copies of a flow after its first packets, and a mark per
    flow would cost a message per flow for nothing. A decided flow's copies that
    were made before its mark took effect come back as repeats of the decision
    (``Verdict.repeat``) and are not marked again; a new connection on the same
    4-tuple is a new flow, and its own decision is marked.
    """

    mechanism = "nflog"

    def __init__(self, engine: Engine, batch: int = 1, wait_cs: int = 0) -> None:
        super().__init__(engine)
        self.batch, self.wait_cs = batch, wait_cs
        self.reader: Any = None

    def bind(self) -> None:
        from . import ctmark, nflog

        self.reader = nflog.Reader([datapath.QUEUE_C2S, datapath.QUEUE_S2C],
                                   threshold=self.batch, timeout_cs=self.wait_cs)
        self.marker = ctmark.Marker(datapath.FLOW_MASK)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_reader(self.reader.fileno(), self._drain)

    def _drain(self) -> None:
        clock = time.perf_counter
        c2s = datapath.QUEUE_C2S
        marks: dict[tuple, int] = {}
        handle, parse = self.engine.handle, packet.parse
        t_batch = clock()
        try:
            copies = self.reader.read()
        except OSError as exc:
            self._error(exc)
            return
        t_read = clock()
        per_copy = (t_read - t_batch) / len(copies) if copies else 0.0
        self.parse_s += t_read - t_batch
        self.queued += len(copies)
        for group, data in copies:
            t0 = clock()
            try:
                pkt = parse(data)
                if pkt is None:
                    continue
                t1 = clock()
                v = handle(pkt, group == c2s)
                self.parse_s += t1 - t0
                self.engine_s += clock() - t1
                self._act_on_path(v, pkt.flow_tuple(), marks)
            except Exception as exc:
                self._error(exc)
            finally:
                self.busy_s += clock() - t0 + per_copy
        self._write_marks(marks)

    def counters(self) -> dict[str, Any]:
        return {**super().counters(),
                "copy_overruns": self.reader.overruns if self.reader else 0}

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.reader is not None:
            loop.remove_reader(self.reader.fileno())
            self.reader.close()
        if self.marker is not None:
            self.marker.close()
        super().close(loop)


class KernelRunner(Runner):
    """On-path, with the detector in the kernel (``datapath.fast_path = "ebpf"``).

    A tc program on the client-side interface (censor_sim.bpf) judges each new
    flow's first payload where the packet already is, and reports only the flows
    no rule exempts; the engine hears of those alone, and its policy acts on
    them as on the tap (marks, residual sets, forgeries). An exempt flow costs
    the censor process nothing at all. ``queued`` counts the reports.
    """

    mechanism = "ebpf"

    def __init__(self, engine: Engine, inside: str, batch: int = 1, wait_ms: int = 0,
                 time_program: bool = False) -> None:
        super().__init__(engine)
        self.inside = inside
        # Reports come a batch at a time, or when the timer finds some waiting
        # (the tap's tap_batch and tap_wait_ms; 100 ms when a batch has no wait).
        self.batch = batch
        self.period_s = (wait_ms or 100) / 1000
        self._timer: asyncio.TimerHandle | None = None
        self.batches = 0  # drains that found reports
        # Have the kernel time the program too (benchmarks: its CPU is not the
        # censor process's, and a per-flow figure must count both).
        self.time_program = time_program
        self.classifier: Any = None
        (self.inspector,) = engine.inspectors  # engine.unsupported allows one

    def bind(self) -> None:
        from . import ctmark
        from .bpf.fetclassifier import FetClassifier

        insp = self.inspector
        self.classifier = FetClassifier([str(n) for n in insp.servers.networks],
                                        sorted(insp.ports), batch=self.batch)
        if self.time_program:
            self.classifier.measure_run_time()
        self.marker = ctmark.Marker(datapath.FLOW_MASK)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.classifier.attach(self.inside)
        loop.add_reader(self.classifier.events_fileno(), self._drain)
        if self.batch > 1:
            self._tick(loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        """The batch's timer: what waits short of a batch is drained every period."""
        self._drain()
        self._timer = loop.call_later(self.period_s, self._tick, loop)

    def _drain(self) -> None:
        clock = time.perf_counter
        t_batch = clock()
        try:
            reports = self.classifier.reports()
        except OSError as exc:
            self._error(exc)
            return
        if not reports:
            return
        self.batches += 1
        t_read = clock()
        self.parse_s += t_read - t_batch
        self.queued += len(reports)
        marks: dict[tuple, int] = {}
        judged, name = self.engine.judged_in_kernel, self.inspector.name
        act_s = 0.0
        # Timed per batch, not per report: most reports end in the engine with
        # nothing to do, and three clock reads were a tenth of such a report.
        t_loop = clock()
        for r in reports:
            try:
                key = (r.client, r.server, packet.TCP, r.client_port, r.server_port)
                v = judged(key, name, r.evidence(), r.packet)
                if v is not None:
                    t_act = clock()
                    self._act_on_path(v, key, marks)
                    act_s += clock() - t_act
            except Exception as exc:
                self._error(exc)
        loop_s = clock() - t_loop
        self.engine_s += loop_s - act_s
        self.busy_s += loop_s + (t_read - t_batch)
        self._write_marks(marks)

    def counters(self) -> dict[str, Any]:
        kernel = self.classifier.counters() if self.classifier else {}
        if self.classifier and self.time_program:
            kernel["run_ns"], kernel["runs"] = self.classifier.run_time()
        return {**super().counters(), "kernel": kernel, "report_batches": self.batches}

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.classifier is not None:
            try:
                loop.remove_reader(self.classifier.events_fileno())
            except ValueError:
                pass
            self.classifier.close()
            self.classifier = None
        if self.marker is not None:
            self.marker.close()
        super().close(loop)

