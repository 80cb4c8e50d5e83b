"""Frolov's decision trees: label a server from how it closed on each probe.

Frolov, Wampler and Wustrow (NDSS 2020, §V-A, Table II) label an endpoint as
a given probe-resistant proxy when every probe meets that proxy's expected
reaction. Their trees are written over probe *names* for their exact probe
bytes; each name stands for a length on one side of the proxy's close
threshold (Table II), so the trees here are written over probe lengths with
those thresholds, which keeps them true for any suite (ours has a 37-byte
HTTP probe, theirs was longer):

* obfs4 (< 0.0.11): more than 8192 + N bytes (rand-17k) → RST fast; everything
  else → FIN after 30–90 s (closeAfterDelay).
* OSSH: under 24 bytes → FIN after ≥ 30 s; 25 bytes or more → RST fast.
* Lampshade: more than 256 bytes → RST fast; the rest → FIN after ≥ 90 s.
* shadowsocks-python: 50 bytes or more → FIN fast; the rest → TIMEOUT.
* shadowsocks-outline (1.0.6): more than 50 → RST fast; exactly 50 → FIN
  fast; fewer → TIMEOUT.
* MTProto: every probe → TIMEOUT (also every "read forever" server: unidentifiable).

The first layer everywhere is "any data response → not a proxy". The paper's
time constants (2 s, 30 s, 90 s and the 300 s TIMEOUT) scale with
:class:`Timing` so lab tests can run the same trees in seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .observe import ProbeResult


@dataclass(frozen=True)
class Timing:
    """The trees' time constants, in seconds; ``scale`` shrinks them together."""

    scale: float = 1.0

    @property
    def fast(self) -> float:  # "in under 2 s"
        return 2.0 * self.scale

    @property
    def obfs4_min(self) -> float:  # closeAfterDelay: 30-90 s
        return 30.0 * self.scale

    @property
    def obfs4_max(self) -> float:
        return 90.0 * self.scale

    @property
    def lampshade_min(self) -> float:
        return 90.0 * self.scale

    @property
    def watch(self) -> float:  # the TIMEOUT horizon
        return 300.0 * self.scale


Expect = Callable[[int, ProbeResult, Timing], bool]


def _fast(close: str) -> Expect:
    return lambda n, r, t: r.close == close and (r.close_after_s or 0) < t.fast


def _timeout(n: int, r: ProbeResult, t: Timing) -> bool:
    return r.close == "TIMEOUT"


def _fin_between(lo: Callable[[Timing], float], hi: Callable[[Timing], float] | None) -> Expect:
    def check(n: int, r: ProbeResult, t: Timing) -> bool:
        after = r.close_after_s or 0
        return r.close == "FIN" and after >= lo(t) and (hi is None or after < hi(t))
    return check


def _by_length(*rules: tuple[Callable[[int], bool], Expect]) -> Callable[..., bool]:
    def tree(n: int, r: ProbeResult, t: Timing) -> bool:
        for applies, expect in rules:
            if applies(n):
                return expect(n, r, t)
        return False
    return tree


OBFS4_RST_ABOVE = 8192 + 8192  # the largest FIN threshold: 8192 + N, N ≤ 8192 (Table II)

TREES: dict[str, Callable[[int, ProbeResult, Timing], bool]] = {
    "obfs4": _by_length((lambda n: n > OBFS4_RST_ABOVE, _fast("RST")),
                        (lambda n: True, _fin_between(lambda t: t.obfs4_min,
                                                      lambda t: t.obfs4_max))),
    "ossh": _by_length((lambda n: n < 24, _fin_between(lambda t: t.obfs4_min, None)),
                       (lambda n: n >= 25, _fast("RST"))),
    "lampshade": _by_length((lambda n: n > 256, _fast("RST")),
                            (lambda n: True, _fin_between(lambda t: t.lampshade_min, None))),
    "shadowsocks-python": _by_length((lambda n: n >= 50, _fast("FIN")),
                                     (lambda n: True, _timeout)),
    "shadowsocks-outline": _by_length((lambda n: n > 50, _fast("RST")),
                                      (lambda n: n == 50, _fast("FIN")),
                                      (lambda n: True, _timeout)),
    "mtproto": _by_length((lambda n: True, _timeout)),
}


def label(results: Sequence[ProbeResult], lengths: Sequence[int],
          timing: Timing = Timing()) -> str:
    """"not-proxy", a proxy name from :data:`TREES`, "unreachable" or "unknown".

    ``lengths[i]`` is the number of bytes probe ``results[i]`` sent.
    """
    if any(r.response_len > 0 for r in results):
        return "not-proxy"
    if not results or not any(r.connected for r in results):
        return "unreachable"
    for name, tree in TREES.items():
        if all(tree(n, r, timing) for n, r in zip(lengths, results, strict=True)):
            return name
    return "unknown"
