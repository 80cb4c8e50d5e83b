"""The proxy's worker processes (``-workers N``): matches go to the least loaded
worker, a worker's counters reach the proxy's, a worker that dies is replaced
without the proxy stopping, and closing leaves no worker behind. Real worker
processes against a scripted broker; a relay the proxy must refuse ends each
session inside its worker without WebRTC (the lab test of relayed bytes through
two workers is in tests/interop/test_snowflake_interop.py)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from netns import procstat
from transports.snowflake import messages as m
from transports.snowflake.proxy import SnowflakeProxy
from transports.snowflake.proxyconfig import ProxyConfig
from transports.snowflake.proxystats import ProxyStats
from transports.snowflake.proxyworkers import SessionWorkers

from .test_proxy import OFFER, scripted_broker


def refused_match() -> m.ProxyPollResponse:
    return m.ProxyPollResponse(m.STATUS_MATCH, OFFER, "unknown", "wss://evil.example/", 10)


async def until(predicate, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


async def test_matches_are_served_in_workers_and_their_counts_reach_the_proxy():
    replies = [m.ProxyPollResponse(m.STATUS_NO_MATCH, next_poll_ms=10), refused_match(),
               refused_match(), refused_match()]
    server, polls, answers = await scripted_broker(replies)
    cfg = ProxyConfig(broker=str(server.make_url("/")), stun=[], poll_interval_s=0.05,
                      nat_probe_url="", summary_interval_s=0)
    proxy = SnowflakeProxy(cfg)
    proxy.workers = await SessionWorkers(cfg, 2, proxy.stats).start()
    pids = [w.proc.pid for w in proxy.workers.workers]
    stop = asyncio.Event()
    task = asyncio.create_task(proxy.run(stop))
    try:
        await until(lambda: proxy.stats.refused_relays == 3)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await proxy.workers.close()
        await server.close()
    assert answers == [] and proxy.clients == 0  # refused in the workers: never answered
    assert polls[2]["Sid"] != polls[1]["Sid"]  # a match still renews the Sid
    assert len(set(pids)) == 2 and os.getpid() not in pids
    for pid in pids:  # closed: no worker left
        assert not procstat.alive(pid)


async def test_the_least_loaded_worker_gets_the_next_match():
    stats = ProxyStats()
    pool = await SessionWorkers(ProxyConfig(stun=[], nat_probe_url=""), 3, stats).start()
    try:
        busy = pool.workers[0]
        held = asyncio.get_running_loop().create_future()
        busy.pending[999] = held  # as if a client were being served there
        await pool.session("sid", refused_match())
        assert stats.refused_relays == 1 and busy.counters["refused_relays"] == 0
        assert pool.load == [1, 0, 0]  # ended on another worker, the held one stays
    finally:
        held.set_result(None)
        await pool.close()


async def test_a_worker_that_dies_is_replaced_and_its_counts_are_kept():
    stats = ProxyStats()
    pool = await SessionWorkers(ProxyConfig(stun=[], nat_probe_url=""), 1, stats).start()
    try:
        await pool.session("a", refused_match())
        assert stats.refused_relays == 1
        first = pool.workers[0].proc
        os.kill(first.pid, signal.SIGKILL)  # SIGTERM is ignored: only the pipe ends it
        # A match that comes while it dies ends (the client is lost), never hangs.
        await asyncio.wait_for(pool.session("x", refused_match()), 10)
        await until(lambda: pool.restarts == 1 and pool.workers[0].proc is not first)
        await pool.session("b", refused_match())
        assert stats.refused_relays == 2  # the dead worker's count is not lost
    finally:
        await pool.close()


def ignored_signals(pid: int) -> set[int]:
    """The signals process `pid` ignores, from /proc/PID/status's SigIgn mask."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


async def test_workers_ignore_signals_and_end_with_their_pipe():
    pool = await SessionWorkers(ProxyConfig(stun=[], nat_probe_url=""), 1,
                                ProxyStats()).start()
    proc = pool.workers[0].proc
    # Once the worker has set both signals to be ignored (the kernel's own record of
    # it, not a guess at how long a loaded machine takes to start Python).
    await until(lambda: ignored_signals(proc.pid) >= {signal.SIGINT, signal.SIGTERM})
    os.kill(proc.pid, signal.SIGTERM)
    os.kill(proc.pid, signal.SIGINT)
    await asyncio.sleep(0.3)
    assert proc.returncode is None
    await pool.close(timeout_s=5.0)
    assert proc.returncode == 0  # ended by EOF, not killed


def test_a_worker_run_by_hand_says_what_it_is(capsys):
    from transports.snowflake.proxyworkers import main

    assert main([]) == 2
    assert "not to be run by hand" in capsys.readouterr().err


def test_zero_workers_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        SessionWorkers(ProxyConfig(), 0, ProxyStats())
