"""A client's workload outside the lab: fetch through a PT's SOCKS port, again and again.

``python -m ptlab.workloads.fetchloop --info pt.json --target HOST:PORT ...``
waits for ``ptlab.processes.ptparent``'s info file (the PT's CMETHOD), then every
``--every`` seconds opens a tunnel with the bridge-line ``--arg``\\ s, downloads
``/bulk?size=N&seed=i`` from the web server, checks its SHA-256, and prints
one JSON line per fetch. It needs no namespaces, so it runs where the lab
does not: on Shadow hosts (``ptlab export shadow``) or a VM.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
from pathlib import Path

from ptcommon.events import EventLog
from transports.common.hostport import split_hostport
from transports.pt import socks5

from ..services.payload import expected_sha256
from .http import HTTPError, read_body, read_head, send_get


async def fetch_once(socks: tuple[str, int], target: tuple[str, int], args: dict[str, str],
                     size: int, seed: int, timeout: float) -> dict[str, object]:
    t0 = time.monotonic()
    h = hashlib.sha256()
    got = 0
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(*socks)
            try:
                await socks5.client_connect(reader, writer, target[0], target[1], args)
                await send_get(writer, f"/bulk?size={size}&seed={seed}", "web.lab",
                               keep_alive=False)
                resp = await read_head(reader)
                if resp.status != 200:
                    raise HTTPError(f"HTTP {resp.status}")

                def on_chunk(data: bytes) -> None:
                    nonlocal got
                    got += len(data)
                    h.update(data)

                await read_body(reader, resp, on_chunk, timeout)
            finally:
                writer.close()
    except (OSError, TimeoutError, HTTPError, socks5.SocksError,
            asyncio.IncompleteReadError) as exc:
        return {"ok": False, "bytes": got, "error": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.monotonic() - t0, 3)}
    ok = h.hexdigest() == expected_sha256(size, seed)
    return {"ok": ok, "bytes": got, "seconds": round(time.monotonic() - t0, 3),
            **({} if ok else {"error": "INTEGRITY FAILURE: sha256 mismatch"})}


async def run(args: argparse.Namespace) -> int:
    events = EventLog("fetchloop")
    info_path = Path(args.info)
    deadline = time.monotonic() + args.wait
    while not info_path.exists():
        if time.monotonic() > deadline:
            events.emit("error", error=f"no {info_path} after {args.wait} s")
            return 1
        await asyncio.sleep(0.5)
    info = json.loads(info_path.read_text())
    socks = split_hostport(info["methods"][0]["addr"])
    target = split_hostport(args.target)
    bridge_args = dict(a.split("=", 1) for a in args.arg)
    for i in range(args.count if args.count > 0 else 1 << 62):
        events.emit_fields("fetch", await fetch_once(socks, target, bridge_args, args.size, i,
                                                     args.timeout))
        await asyncio.sleep(args.every)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ptlab.workloads.fetchloop",
                                description=__doc__.splitlines()[0])
    p.add_argument("--info", required=True, help="ptlab.processes.ptparent's --info file")
    p.add_argument("--target", required=True, help="HOST:PORT of the web server")
    p.add_argument("--arg", action="append", default=[], help="a bridge-line KEY=VALUE")
    p.add_argument("--size", type=int, default=100_000)
    p.add_argument("--every", type=float, default=30.0, help="seconds between fetches")
    p.add_argument("--count", type=int, default=0, help="fetches (0 = until stopped)")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--wait", type=float, default=60.0, help="seconds to wait for --info")
    args = p.parse_args(argv)
    if any("=" not in a for a in args.arg):
        p.error("--arg takes KEY=VALUE")
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
