"""Recover a server's data-dependent close threshold by binary search.

Frolov et al. (NDSS 2020, §IV-B) found that many probe-resistant proxies
close the connection once they have read a fixed number of bytes that fail
to authenticate (obfs4: 8192 + N; Outline 1.0.6: 50; OSSH: 24). A prober
that finds such a threshold has a fingerprint. The search sends n random
bytes and watches for a close (FIN or RST) within ``window`` seconds; the
smallest n that closes is the threshold. censors.md T-AP-2 asks for a binary
search starting at 4096 bytes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .observe import ProbeResult, SockFactory, observe
from .probes import Probe


@dataclass
class Threshold:
    bytes: int | None  # the smallest length that makes the server close, or None
    close: str | None  # how it closed at exactly that length: "FIN" or "RST"
    probes: list[tuple[int, str]] = field(default_factory=list)  # (length, close) tried


async def find_threshold(host: str, port: int, *, start: int = 4096, maximum: int = 1 << 17,
                         window: float = 1.0, seed: int = 0,
                         sock_factory: SockFactory | None = None) -> Threshold:
    """The smallest payload length in 1..maximum after which the server closes."""
    rng = random.Random(seed)
    out = Threshold(None, None)
    seen: dict[int, ProbeResult] = {}

    async def closes(n: int) -> bool:
        if n not in seen:
            r = await observe(host, port, Probe(f"len-{n}", rng.randbytes(n)), window,
                              sock_factory=sock_factory)
            seen[n] = r
            out.probes.append((n, r.close))
        return seen[n].close in ("FIN", "RST")

    hi = start
    while not await closes(hi):
        if hi >= maximum:
            return out
        hi = min(hi * 2, maximum)
    lo = 0  # 0 bytes: assumed not to close (an empty probe is the TIMEOUT baseline)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if await closes(mid):
            hi = mid
        else:
            lo = mid
    out.bytes, out.close = hi, seen[hi].close
    return out
