"""``python -m censor_sim --config FILE``: the censor process of the censor namespace.

It installs the datapath for a profile, reports detections as JSON-line
events while it runs (by watching the kernel's block counters), and on
SIGTERM reports its final counters and CPU time, then removes its table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

from . import datapath
from .profile import ProfileError, load_profile

COMPONENT = "censor"


def emit(event: str, **fields: object) -> None:
    rec = {"ts": round(time.time(), 6), "component": COMPONENT, "event": event, **fields}
    print(json.dumps(rec, default=str), flush=True)


async def run(config: dict, poll: float) -> None:
    profile = load_profile(config["profile"], config.get("overrides") or {})
    if why := datapath.unsupported(profile):
        raise ProfileError(f"profile {profile.name}: {why}")
    blocklist = None
    if "ip_blocklist" in profile.detectors:
        blocklist = datapath.Blocklist.from_params(profile.detectors["ip_blocklist"])
    datapath.install(blocklist)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # CPU spent deciding flows, not starting the interpreter.
    cpu_at_ready = time.process_time()
    emit("ready", profile=profile.name, source=profile.source, sha256=profile.sha256,
         blocklist=blocklist.__dict__ if blocklist else None)
    fired: set[str] = set()
    try:
        while not stop.is_set():
            counts = datapath.counters()
            for name, (detector, action) in datapath.BLOCK_COUNTERS.items():
                if name not in fired and counts.get(name, {}).get("packets", 0) > 0:
                    fired.add(name)
                    emit("detection", detector=detector, action=action)
            try:
                await asyncio.wait_for(stop.wait(), poll)
            except TimeoutError:
                pass
        counts = datapath.counters()
        emit("counters", counters=counts, cpu_s=round(time.process_time() - cpu_at_ready, 6))
    finally:
        datapath.remove()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m censor_sim", description=__doc__)
    p.add_argument("--config", required=True, help="JSON file: profile, overrides")
    p.add_argument("--poll", type=float, default=0.1, help="counter poll interval (s)")
    args = p.parse_args(argv)
    try:
        config = json.loads(Path(args.config).read_text())
        if not isinstance(config, dict) or "profile" not in config:
            raise ProfileError("config needs a 'profile' key")
        asyncio.run(run(config, args.poll))
    except (ProfileError, datapath.DatapathError, ValueError, OSError) as exc:
        msg = str(exc)
        if isinstance(exc, PermissionError) or "Operation not permitted" in msg:
            msg = f"missing privilege: {msg} (the censor needs root / CAP_NET_ADMIN)"
        print(f"censor: {msg}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
