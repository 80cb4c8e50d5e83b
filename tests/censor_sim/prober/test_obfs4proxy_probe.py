"""The Frolov suite against a real obfs4proxy: one FIN time for every probe.

obfs4proxy >= 0.0.11 never answers a failed handshake and closes it with a FIN at
accept + 30 s + closeDelay, closeDelay fixed per bridge in 0..59 s (obfs4.md §1.6),
so every probe, whatever its size, must see a FIN at the same time in [30, 90) s.
All probes run in one concurrent batch: the test costs one close time, <= ~90 s.
"""

import asyncio
import os
import shutil

import pytest

from censor_sim.prober.observe import run_suite
from censor_sim.prober.probes import frolov_suite
from censor_sim.prober.verdict import looks_like, summarize

pytestmark = [pytest.mark.interop, pytest.mark.slow]

OBFS4PROXY = shutil.which("obfs4proxy")


async def start_obfs4proxy(state: str) -> tuple[asyncio.subprocess.Process, int]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TOR_PT_MANAGED_TRANSPORT_VER": "1",
        "TOR_PT_SERVER_TRANSPORTS": "obfs4",
        "TOR_PT_SERVER_BINDADDR": "obfs4-127.0.0.1:0",
        "TOR_PT_ORPORT": "127.0.0.1:9",  # never reached: no probe gets past the handshake
        "TOR_PT_STATE_LOCATION": state,
        "TOR_PT_EXIT_ON_STDIN_CLOSE": "1",
    }
    # stdin is a pipe we keep open: closing it asks obfs4proxy to exit (PT spec).
    proc = await asyncio.create_subprocess_exec(
        OBFS4PROXY, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=env)
    lines: list[str] = []
    while True:
        raw = await asyncio.wait_for(proc.stdout.readline(), 10)
        line = raw.decode().strip()
        if not raw or "ERROR" in line or line == "SMETHODS DONE":
            break
        lines.append(line)
    smethod = [ln for ln in lines if ln.startswith("SMETHOD obfs4 ")]
    if not smethod:
        await stop(proc)
        pytest.fail(f"obfs4proxy did not report an SMETHOD: {lines} / {line!r}")
    port = int(smethod[0].split()[2].rsplit(":", 1)[1])
    return proc, port


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@pytest.mark.skipif(OBFS4PROXY is None, reason="obfs4proxy not installed")
async def test_obfs4proxy_closes_every_probe_with_fin_at_one_time(tmp_path):
    proc, port = await start_obfs4proxy(str(tmp_path / "state"))
    try:
        results = await run_suite("127.0.0.1", port, frolov_suite(seed=1), watch_s=93.0,
                                  concurrency=16)
    finally:
        await stop(proc)
    summary = summarize(results)
    times = [r.close_after_s for r in results]
    print(f"\nobfs4proxy on port {port}: per-probe {summary['per_probe']}")
    print(f"obfs4proxy FIN time: {summary['fin_threshold_s']} s "
          f"(spread {max(t or 0 for t in times) - min(t or 0 for t in times):.3f} s)")
    assert all(r.connected and r.response_len == 0 for r in results), summary
    assert all(r.close == "FIN" for r in results), summary
    assert max(times) - min(times) < 0.5, summary
    assert 29.5 <= summary["fin_threshold_s"] < 90.5, summary
    assert looks_like(results) == "closes-at-threshold"
