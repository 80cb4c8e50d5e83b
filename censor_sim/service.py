"""The censor service: the running censor, apart from its command line.

Why a module of its own: the censor namespace's process (``python -m censor_sim``,
whose help lists the config keys) and ``ptlab censor`` on a router outside any lab
run the same loop, :func:`run`. It installs the kernel datapath for a profile,
reads the packets the profile's datapath hands it (NFQUEUE, NFLOG or the kernel
program's reports: :mod:`.runners`), runs the policy engine on them, injects
forged packets, and reports every detection, action and probe as a JSON line;
on SIGTERM or SIGINT it reports its final counters, CPU time and per-packet
cost, then removes everything it installed. :func:`serve` runs it as that
process does: event lines written a batch at a time, by orjson, and profiled
on request.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import resource
import signal
import sys
import time
from typing import Any

from ptcommon import gcpolicy
from ptcommon.events import EventLog

from . import datapath, eventjson
from .engine import Effects, Engine, unsupported
from .profile import Profile, ProfileError, load_profile
from .queueplan import queue_config
from .runners import KernelRunner, QueueRunner, Runner, TapRunner

COMPONENT = "censor"


_log = EventLog(COMPONENT)
emit = _log.emit


class LiveEffects(Effects):
    """Side effects on the real kernel and prober, reported as events."""

    def __init__(self, profile: Profile, prober: str | None, seed: int = 0) -> None:
        super().__init__()
        self.rng = random.Random(seed ^ 0x5EED)
        self.profile = profile
        self.prober = prober
        self.tasks: set[asyncio.Task] = set()
        self.probed: set[tuple[str, int]] = set()  # one investigation per server port

    def event(self, name: str, **fields: Any) -> None:
        # A detection that acts on nothing, the censor's commonest line, waits for
        # the runner's flush after the batch. Any other line goes out at once: the
        # engine writes a detection before taking its actions, so whoever sees an
        # action's effect (a reset, a drop, a mark, a residual entry) finds its line.
        _log.emit_fields(name, fields, flush=fields.get("actions") != [])

    def residual(self, key, seconds: float) -> None:
        client, server, proto, port = key
        datapath.add_residual(client, server, proto, port, seconds)

    def block_server(self, server: str, port: int, proto: int = 6) -> None:
        seconds = self.profile.actions.get("block_server", {}).get("seconds") or None
        datapath.block_server(server, proto, port, seconds)
        emit("block_server", server=server, port=port, seconds=seconds)

    def probe(self, flow: dict[str, Any], first_payload: bytes, match) -> None:
        if not self.prober:
            emit("probe_skipped", flow=flow, reason="no prober configured")
            return
        target = (flow["server"], flow["server_port"])
        if target in self.probed:
            return
        self.probed.add(target)
        # The SNI the detector read (from the whole ClientHello, which the first
        # payload may hold only the start of), for probes that ask by name.
        sni = match.evidence.get("sni") if match is not None else None
        task = asyncio.get_running_loop().create_task(
            self._probe(self.prober, flow, first_payload, sni))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _delay(self, cfg: dict[str, Any]) -> float:
        """A fixed delay, or one drawn from Alice et al.'s published distribution."""
        if cfg.get("delay", "fixed") == "alice2020":
            from .prober import delays

            return round(delays.sample(self.rng, float(cfg.get("delay_scale", 1.0)),
                                       float(cfg.get("delay_max_s", 3600.0))), 3)
        return float(cfg.get("delay_s", 0.5))

    async def _probe(self, service: str, flow: dict[str, Any], first_payload: bytes,
                     sni: str | None = None) -> None:
        """Ask the probe service (``service``, "HOST:PORT") about the flow's server,
        and block the server if the verdict is one the profile blocks."""
        cfg = self.profile.prober
        host, _, port = service.rpartition(":")
        req = {"id": f"{flow['server']}:{flow['server_port']}", "host": flow["server"],
               "port": flow["server_port"], "first_payload": first_payload.hex(),
               "suites": cfg.get("suites", ["alice"]), "watch_s": cfg.get("watch_s", 10.0),
               "delay_s": self._delay(cfg)}
        if sni:
            req["sni"] = sni
        emit("probe_request", flow=flow, request={k: v for k, v in req.items()
                                                  if k != "first_payload"})
        try:
            reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
            writer.write(json.dumps(req).encode() + b"\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), cfg.get("timeout_s", 120.0))
            writer.close()
            reply = json.loads(line)
        except (OSError, ValueError, TimeoutError) as exc:
            emit("probe_failed", flow=flow, error=str(exc))
            return
        label = reply.get("label")
        emit("probe_verdict", flow=flow, label=label, shadowsocks=reply.get("shadowsocks"),
             openvpn=reply.get("openvpn"), https=reply.get("https"),
             answers_replay=reply.get("answers_replay"),
             reactions=reply.get("shadowsocks_reactions"),
             escalated=reply.get("escalated"), sources=reply.get("sources", []),
             probes=len(reply.get("results", [])), error=reply.get("error"))
        blocked = set(cfg.get("block_labels", []))
        verdicts = {label, *(reply.get(k) for k in ("shadowsocks", "openvpn", "https"))}
        if verdicts & blocked or (cfg.get("block_on_replay", False)
                                  and reply.get("answers_replay")):
            self.block_server(flow["server"], flow["server_port"], flow["proto"])


async def run(config: dict, poll: float) -> None:
    """The censor on ``config`` until SIGTERM or SIGINT; ``poll`` is the first
    interval (s) at which the kernel's blocklist counter is read."""
    profile = load_profile(config["profile"], config.get("overrides") or {})
    if why := unsupported(profile):
        raise ProfileError(f"profile {profile.name}: {why}")
    blocklist = allowlist = None
    if "ip_blocklist" in profile.detectors:
        blocklist = datapath.Blocklist.from_params(profile.detectors["ip_blocklist"])
    if "ip_allowlist" in profile.detectors:
        allowlist = datapath.Allowlist.from_params(profile.detectors["ip_allowlist"])
    dp = profile.datapath
    on_path = dp.get("mode", "in-path") == "on-path"
    effects = LiveEffects(profile, config.get("prober"), int(config.get("seed", 0)))
    engine = Engine(profile, clock=time.monotonic, rng=random.Random(config.get("seed", 0)),
                    effects=effects, in_path=not on_path)
    for insp in engine.inspectors:
        if insp.unresolved:
            raise ProfileError(f"detectors.{insp.name}.servers: unresolved {insp.unresolved[0]!r}"
                               " (lab roles are resolved by the runner; give addresses here)")
    fast_path = dp.get("fast_path") is not None  # validated by unsupported()
    needs_queue = (bool(engine.inspectors) or engine.packet_censor is not None) and not fast_path
    queue = None
    if fast_path and not config.get("inside"):
        raise ProfileError(f"profile {profile.name} runs its detector in the kernel: the "
                           "config needs the 'inside' interface")
    if needs_queue:
        if not config.get("inside") or not config.get("outside"):
            raise ProfileError(f"profile {profile.name} inspects packets: the config needs "
                               "'inside' and 'outside' interfaces")
        queue = queue_config(engine, dp, on_path, config["inside"], config["outside"])
        if queue.watch_births:
            engine.watch_births()
    throttle = None
    if "throttle" in profile.actions:
        t = profile.actions["throttle"]
        rate = int(float(t.get("rate_kbps", 140)) * 1000 / 8)
        throttle = datapath.Throttle(rate, int(t.get("burst_bytes", max(rate // 4, 3000))))
    loop = asyncio.get_running_loop()
    runner: Runner = QueueRunner(engine)
    if fast_path:
        engine.watch_births()  # the program opens flows on the SYNs it sees
        runner = KernelRunner(engine, config["inside"], int(dp.get("tap_batch", 1)),
                              int(dp.get("tap_wait_ms", 0)),
                              time_program=bool(config.get("time_kernel_program")))
    elif on_path and queue is not None:
        runner = TapRunner(engine, queue.tap_batch, queue.tap_wait_cs)
    sysctls: dict[str, str] = {}
    injects = engine.packet_censor is not None or any(
        {"rst", "inject_dns"} & set(r.actions) for r in engine.rules.values())
    if injects:
        runner.injector.warm()
    try:
        if queue is not None or fast_path:
            runner.bind()  # bind before the rules exist, so no packet meets an empty queue
            runner.attach(loop)
        blocks_servers = any("block_server" in r.actions for r in engine.rules.values()) or \
            bool(profile.prober.get("block_labels") or profile.prober.get("block_on_replay"))
        # A kernel rule for each flow action the profile can take ("detector" rules
        # name theirs at run time, from the tables the profile declares).
        uses = {a for r in engine.rules.values() for a in r.actions} | set(profile.actions)
        freeze = profile.actions.get("freeze", {}) if "freeze" in uses else None
        if freeze is not None:  # byte counts per connection need conntrack accounting
            sysctls.update(datapath.set_sysctls({datapath.ACCOUNTING: 1}))
        if dp.get("udp_conntrack_timeout_s"):
            sysctls.update(datapath.set_udp_timeout(int(dp["udp_conntrack_timeout_s"])))
        loss = profile.actions.get("loss", {}) if "loss" in uses else None
        datapath.install(blocklist, queue, throttle, servers=blocks_servers,
                         freeze_bytes=int(freeze.get("bytes", 16384)) if freeze else None,
                         allowlist=allowlist, inside=config.get("inside"),
                         loss_percent=float(loss.get("percent", 50)) if loss else None,
                         dynamic=True if fast_path else None)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        gcpolicy.for_packet_loop()
        cpu_at_ready = time.process_time()
        usage_at_ready = resource.getrusage(resource.RUSAGE_SELF)
        emit("ready", profile=profile.name, source=profile.source, sha256=profile.sha256,
             blocklist=blocklist.__dict__ if blocklist else None, mode=dp.get("mode", "in-path"),
             queue=queue.__dict__ if queue else None, seed=config.get("seed", 0))
        # The kernel drops blocklisted packets on its own; its counter is the only
        # way to learn when the first one went, so it is polled until then. Each
        # poll runs `nft` (a few ms of CPU), so the interval backs off to 1 s and
        # polling stops once the detection is out.
        wait, watching = poll, blocklist is not None
        while not stop.is_set():
            if watching and datapath.counters().get("blocklist_drop", {}).get("packets", 0):
                emit("detection", detector="ip_blocklist", actions=["drop"])
                watching = False
            try:
                await asyncio.wait_for(stop.wait(), wait if watching else None)
            except TimeoutError:
                wait = min(wait * 1.25, max(poll, 1.0))
        counts = datapath.counters()
        n = runner.queued
        per_pkt = runner.busy_s / n * 1e6 if n else None
        cpu_s = time.process_time() - cpu_at_ready
        usage = resource.getrusage(resource.RUSAGE_SELF)
        # User time is the censor's Python; kernel time is mostly the queue's own
        # price (the verdict carries the packet on through the kernel).
        user_s = usage.ru_utime - usage_at_ready.ru_utime
        sys_s = usage.ru_stime - usage_at_ready.ru_stime
        split = {"parse": runner.parse_s, "engine": runner.engine_s,
                 "verdict": runner.busy_s - runner.parse_s - runner.engine_s}
        emit("counters", counters=counts, cpu_s=round(cpu_s, 6),
             queued=n, per_packet_us=round(per_pkt, 2) if per_pkt else None,
             # The process's CPU per queued packet: the callback plus reading the
             # queue (netlink receive, the event loop) and everything else it did.
             cpu_per_packet_us=round(cpu_s / n * 1e6, 2) if n else None,
             user_s=round(user_s, 3), sys_s=round(sys_s, 3),
             user_per_packet_us=round(user_s / n * 1e6, 2) if n else None,
             per_packet_split_us={k: round(v / n * 1e6, 2) for k, v in split.items()}
             if n else None,
             injected=runner.injector.sent, engine=engine.stats, errors=runner.errors,
             **runner.counters())
    finally:
        datapath.remove()
        datapath.restore_sysctls(sysctls)
        if queue is not None or fast_path:
            runner.close(loop)
        for task in list(effects.tasks):
            task.cancel()


def _buffered_stdout() -> None:
    """Event lines reach the log a batch of packets at a time, not a line at a time.

    The runners write detections unflushed and flush once per batch; but under
    PYTHONUNBUFFERED, which the lab's process runner sets, stdout writes through
    to the file, and every detection line was a write(2) of its own, about a
    tenth of the censor's CPU per flow on the tap (benchmarks/censor.py). Lines
    written with ``flush=True`` (ready, counters, probes) still go at once."""
    out = sys.stdout
    if isinstance(out, io.TextIOWrapper) and (
            out.write_through or not isinstance(out.buffer, io.BufferedWriter)):
        raw = io.FileIO(out.fileno(), "w", closefd=False)
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw, 1 << 16), encoding=out.encoding,
                                      errors=out.errors, line_buffering=out.line_buffering)


def serve(config: dict, poll: float) -> None:
    """:func:`run` as the censor namespace's process runs it, until SIGTERM.

    Errors are the caller's to report (``python -m censor_sim`` makes them one line
    and exit status 2)."""
    _buffered_stdout()
    eventjson.install()
    if prof_out := os.environ.get("PTLAB_CENSOR_PROFILE"):
        # Where the censor's time goes, for benchmarks (docs/lab/censor.md §5).
        import cProfile

        cProfile.runctx("asyncio.run(run(config, poll))", globals(), locals(), prof_out)
    else:
        asyncio.run(run(config, poll))
