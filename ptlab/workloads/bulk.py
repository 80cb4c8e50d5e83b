"""Bulk download through a transport, checked byte-exact by SHA-256.

The web node streams a deterministic pseudorandom payload; the client hashes
what arrives and compares with the hash it computes itself from (size,
seed). A mismatch is an integrity failure, never a "slow" or "blocked"
result: something on the path changed bytes, and the run must say so loudly.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass

from ..plugins.base import Endpoint
from ..services.payload import expected_sha256
from .http import HTTPError, read_body, read_head, send_get
from .tunnel import open_tunnel


@dataclass
class BulkResult:
    ok: bool  # the whole payload arrived and its hash matched
    size: int
    received: int
    seconds: float
    sha256: str | None
    expected: str
    integrity_error: bool = False
    error: str | None = None
    started: float = 0.0  # epoch seconds: where this repetition sits in events.jsonl

    @property
    def goodput_mbit_s(self) -> float | None:
        if not self.ok or self.seconds <= 0:
            return None
        return self.received * 8 / self.seconds / 1e6


async def bulk_download(ns: str | None, ep: Endpoint, size: int, seed: int, host: str = "web.lab",
                        timeout: float = 30.0, idle_timeout: float = 4.0) -> BulkResult:
    expected = expected_sha256(size, seed)
    h = hashlib.sha256()
    received = 0

    def on_chunk(data: bytes) -> None:
        nonlocal received
        received += len(data)
        h.update(data)

    t0, started = time.monotonic(), round(time.time(), 6)
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await open_tunnel(ns, ep, idle_timeout)
            try:
                await send_get(writer, f"/bulk?size={size}&seed={seed}", host, keep_alive=False)
                resp = await asyncio.wait_for(read_head(reader), idle_timeout)
                if resp.status != 200:
                    raise HTTPError(f"HTTP {resp.status}")
                await read_body(reader, resp, on_chunk, idle_timeout)
            finally:
                writer.close()
    except (OSError, HTTPError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        err = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return BulkResult(False, size, received, time.monotonic() - t0, None, expected,
                          error=err, started=started)
    seconds = time.monotonic() - t0
    digest = h.hexdigest()
    if digest != expected:
        return BulkResult(False, size, received, seconds, digest, expected, integrity_error=True,
                          error=f"INTEGRITY FAILURE: sha256 {digest[:16]}... != expected "
                                f"{expected[:16]}... over {received} bytes", started=started)
    return BulkResult(True, size, received, seconds, digest, expected, started=started)
