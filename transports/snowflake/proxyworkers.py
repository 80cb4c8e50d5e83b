"""Sessions of the Snowflake proxy in worker processes, so it uses every core.

Tor's proxy is Go: its goroutines spread clients over every core the machine
has. Ours relays each client through aiortc (SCTP, DTLS) and aiohttp in
Python, where one process uses one core, and at 20 clients its one core is
the limit (docs/transports/snowflake.md §3.8-§3.9). With ``-workers N`` the proxy
keeps polling the broker itself, one Sid and one client count as before, and
hands each match to one of N worker processes: the one serving the fewest
clients. The worker answers the offer, opens the data channel and relays, as
the proxy does in-process with one worker.

A worker's setup (the proxy's config, the ICE port range, the log level) is
its one argument, in JSON. Then the pipe between them is JSON lines: to the
worker, one line per match, ``{"session": n, "sid": ..., "match": {...}}``;
from it, its counters (``{"stats": {...}}``, cumulative, when they change and
at most every second) and ``{"done": n}`` when a session ends. A worker that dies takes its
sessions with it (they end; the proxy goes on) and is started again. A worker
ignores SIGINT and SIGTERM: it ends when its stdin does, which is when the
proxy closes it or exits, however the proxy ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import signal
import sys
from typing import Any

import aiohttp

from ptcommon import gcpolicy
from transports.common.budget import QuietErrors, raise_nofile_limit

from . import messages as m
from .proxy import SnowflakeProxy
from .proxyconfig import ProxyConfig
from .proxylogging import configure_logging
from .proxystats import ProxyStats
from .udpports import PortRange, loop_factory

log = logging.getLogger("snowflake-proxy")

#: The counters a worker keeps; the proxy keeps the rest (polls, broker errors).
WORKER_COUNTERS = ("connections", "timeouts", "inbound_bytes", "outbound_bytes",
                   "refused_relays", "completed")
MAX_LINE = 1 << 20  # a match carries an SDP offer: a few KiB


class _Worker:
    """One worker process and what it serves."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pending: dict[int, asyncio.Future[None]] = {}
        self.counters: dict[str, int] = dict.fromkeys(WORKER_COUNTERS, 0)
        self.reader: asyncio.Task[None] | None = None
        self.dead = False  # its pipe ended: no new session goes to it


class SessionWorkers:
    """N worker processes serving the proxy's sessions; ``stats`` gets their counters
    (added to what dead workers had counted, so the totals never go back)."""

    def __init__(self, config: ProxyConfig, count: int, stats: ProxyStats,
                 ports: str | None = None, verbose: bool = False) -> None:
        if count < 1:
            raise ValueError("workers: at least 1")
        self.config, self.count, self.stats = config, count, stats
        self.setup = json.dumps({"config": dataclasses.asdict(config), "ports": ports,
                                 "verbose": verbose})
        self.workers: list[_Worker] = []
        self.gone: dict[str, int] = dict.fromkeys(WORKER_COUNTERS, 0)  # dead workers' counts
        self.restarts = 0
        self._next_id = 0
        self._closing = False

    async def start(self) -> SessionWorkers:
        for _ in range(self.count):
            self.workers.append(await self._spawn())
        return self

    async def _spawn(self) -> _Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "transports.snowflake.proxyworkers", self.setup,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=MAX_LINE)
        worker = _Worker(proc)
        worker.reader = asyncio.create_task(self._read(worker))
        return worker

    @property
    def load(self) -> list[int]:
        """Sessions each worker serves now."""
        return [len(w.pending) for w in self.workers]

    async def session(self, sid: str, match: m.ProxyPollResponse) -> None:
        """Serve one match on the least loaded worker; return when it ends there (at
        once if no worker is alive: one being started again)."""
        live = [w for w in self.workers if not w.dead]
        if not live:
            return
        worker = min(live, key=lambda w: len(w.pending))
        self._next_id += 1
        sid_no = self._next_id
        done = asyncio.get_running_loop().create_future()
        worker.pending[sid_no] = done
        line = json.dumps({"session": sid_no, "sid": sid, "match": dataclasses.asdict(match)})
        assert worker.proc.stdin is not None
        try:
            worker.proc.stdin.write(line.encode() + b"\n")
            await worker.proc.stdin.drain()
            await done
        except (ConnectionError, BrokenPipeError):
            pass  # the worker is gone: _read ends its sessions and starts another
        finally:
            worker.pending.pop(sid_no, None)

    def _count(self) -> None:
        for name in WORKER_COUNTERS:
            setattr(self.stats, name,
                    self.gone[name] + sum(w.counters[name] for w in self.workers))

    async def _read(self, worker: _Worker) -> None:
        assert worker.proc.stdout is not None
        while True:
            try:
                line = await worker.proc.stdout.readline()
            except (ValueError, ConnectionError):  # an over-long line: not our worker's
                line = b""
            if not line:
                break
            try:
                msg = json.loads(line)
                if "stats" in msg:
                    worker.counters.update({k: int(msg["stats"][k]) for k in WORKER_COUNTERS})
                    self._count()
                if "done" in msg:
                    fut = worker.pending.get(int(msg["done"]))
                    if fut is not None and not fut.done():
                        fut.set_result(None)
            except (ValueError, KeyError, TypeError):
                log.warning("session worker: unreadable line ignored")
        worker.dead = True  # before any await: no session can be added from here on
        lost = len(worker.pending)
        for fut in worker.pending.values():
            if not fut.done():
                fut.set_result(None)
        await worker.proc.wait()
        if self._closing or worker not in self.workers:
            return
        for name in WORKER_COUNTERS:
            self.gone[name] += worker.counters[name]
        worker.counters = dict.fromkeys(WORKER_COUNTERS, 0)
        log.warning("session worker exited (status %s) with %d clients; starting another",
                    worker.proc.returncode, lost)
        self.restarts += 1
        self.workers[self.workers.index(worker)] = await self._spawn()
        self._count()

    async def close(self, timeout_s: float = 5.0) -> None:
        """End every worker: EOF on its stdin ends its sessions and then it; killed
        if it takes longer than ``timeout_s``."""
        self._closing = True
        for w in self.workers:
            if w.proc.stdin is not None:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    w.proc.stdin.close()
        for w in self.workers:
            try:
                await asyncio.wait_for(w.proc.wait(), timeout_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    w.proc.kill()
                await w.proc.wait()
            if w.reader is not None:
                await asyncio.gather(w.reader, return_exceptions=True)
        self._count()


# --- the worker's side -------------------------------------------------------------


def _write(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


async def _serve(config: ProxyConfig) -> None:
    proxy = SnowflakeProxy(config)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    sessions: set[asyncio.Task[None]] = set()
    sent: dict[str, int] = {}

    def report() -> None:
        now = {k: getattr(proxy.stats, k) for k in WORKER_COUNTERS}
        if now != sent:
            sent.update(now)
            _write({"stats": now})

    async def one(number: int, sid: str, match: m.ProxyPollResponse) -> None:
        try:
            await proxy.session(sid, match)
        finally:
            report()
            _write({"done": number})

    async def reports() -> None:
        while True:
            await asyncio.sleep(1.0)
            report()

    timeout = aiohttp.ClientTimeout(total=None, sock_read=config.broker_timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        proxy._http = http
        ticker = asyncio.create_task(reports())
        try:
            while line := await reader.readline():
                try:
                    msg = json.loads(line)
                    match = m.ProxyPollResponse(**msg["match"])
                    number, sid = int(msg["session"]), str(msg["sid"])
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("session worker: bad request from the proxy: %s", exc)
                    continue
                task = asyncio.create_task(one(number, sid, match))
                sessions.add(task)
                task.add_done_callback(sessions.discard)
        finally:
            for t in [*sessions, ticker]:
                t.cancel()
            await asyncio.gather(*sessions, ticker, return_exceptions=True)
            report()


def main(argv: list[str] | None = None) -> int:
    """``python -m transports.snowflake.proxyworkers SETUP``: one worker, as the proxy
    starts it."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        setup = json.loads(argv[0])
    except (IndexError, ValueError):
        print("a session worker of 'ptlab snowflake-proxy -workers N': not to be run "
              "by hand", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    configure_logging(bool(setup.get("verbose")))
    fields = {f.name for f in dataclasses.fields(ProxyConfig)}
    config = ProxyConfig(**{k: v for k, v in setup["config"].items() if k in fields})
    ports = PortRange.parse(setup["ports"]) if setup.get("ports") else None

    async def run() -> None:
        raise_nofile_limit()
        QuietErrors(log.warning).install(asyncio.get_running_loop())
        gcpolicy.for_packet_loop()
        await _serve(config)

    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(
            loop_factory=loop_factory(ports)) as runner:
        runner.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
