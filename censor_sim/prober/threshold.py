"""Recover a server's data-dependent close threshold by binary search.

Frolov et al. (NDSS 2020, §IV-B, Table II) found that many probe-resistant proxies
close the connection once they have read a fixed number of bytes that fail to
authenticate (obfs4 < 0.0.11: 8192 + N; Lampshade: 256; Outline 1.0.6 and
shadowsocks-python: 50; OSSH: 24). A prober that finds such a threshold has a
fingerprint, which is why the paper's advice is to have none. The search sends n
random bytes and watches for a close (FIN or RST) within ``window`` seconds; the
smallest n that closes is the threshold. T-AP-2 (docs/censors/probing.md §5.2) asks for a binary
search starting at 4096 bytes with a 1 s close window.

The search assumes what the mechanism implies: a server that closes after reading
N bytes also closes on any longer probe (RST, since bytes are left unread) and
never on a shorter one. An empty probe is sent alongside the first one as the
baseline: a server that closes within the window even when sent nothing has an
idle timeout shorter than the window, not a data-dependent threshold, and gets
``bytes=None, data_independent=True``.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from .observe import ProbeResult, SockFactory, observe
from .probes import Probe

DEFAULT_START = 4096
DEFAULT_MAXIMUM = 1 << 17
DEFAULT_WINDOW_S = 1.0


@dataclass
class Threshold:
    """The search's outcome and every probe it sent, in completion order."""

    bytes: int | None  # the smallest length that makes the server close, or None
    close: str | None  # how it closed at exactly that length: "FIN" or "RST"
    probes: list[tuple[int, str]] = field(default_factory=list)  # (length, close) tried
    data_independent: bool = False  # the empty baseline closed too: an idle timeout

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "close": self.close, "probes": self.probes,
                "data_independent": self.data_independent}


async def find_threshold(host: str, port: int, *, start: int = DEFAULT_START,
                         maximum: int = DEFAULT_MAXIMUM, window: float = DEFAULT_WINDOW_S,
                         seed: int = 0, connect_timeout: float = 5.0,
                         sock_factory: SockFactory | None = None) -> Threshold:
    """The smallest payload length in 1..``maximum`` after which the server closes
    (FIN or RST) within ``window`` seconds of the connect, found by doubling up from
    ``start`` until a probe closes, then bisecting down to the exact length.

    Costs about log2(threshold) + 2 probes; each probe that does *not* close costs
    a full ``window``, so the window is the parameter a lab scales down.
    """
    if not 1 <= start <= maximum:
        raise ValueError("need 1 <= start <= maximum")
    if not window > 0:
        raise ValueError("window must be positive")
    rng = random.Random(seed)
    out = Threshold(None, None)
    seen: dict[int, ProbeResult] = {}

    async def probe(n: int) -> ProbeResult:
        r = await observe(host, port, Probe(f"len-{n}", rng.randbytes(n)), window,
                          connect_timeout=connect_timeout, sock_factory=sock_factory)
        seen[n] = r
        out.probes.append((n, r.close))
        return r

    def closed(r: ProbeResult) -> bool:
        return r.close in ("FIN", "RST")

    async def closes(n: int) -> bool:
        return closed(seen[n] if n in seen else await probe(n))

    baseline, _ = await asyncio.gather(probe(0), probe(start))
    if not baseline.connected:
        return out  # unreachable: nothing to measure
    if closed(baseline):
        out.data_independent = True
        return out
    hi = start
    while not await closes(hi):
        if hi >= maximum:
            return out
        hi = min(hi * 2, maximum)
    lo = 0  # the baseline showed that 0 bytes do not close
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if await closes(mid):
            hi = mid
        else:
            lo = mid
    out.bytes, out.close = hi, seen[hi].close
    return out
