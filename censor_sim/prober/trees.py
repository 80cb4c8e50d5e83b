"""Frolov's decision trees: label a server from how it closed on each probe.

Frolov, Wampler and Wustrow (NDSS 2020, §V-A, Table II) label an endpoint as
a given probe-resistant proxy when every probe meets that proxy's expected
reaction. Their trees are written over probe *names* for their exact probe
bytes; each name stands for a length on one side of the proxy's close
threshold (Table II), so the trees here are written over probe lengths with
those thresholds, which keeps them true for any suite (ours has a 37-byte
HTTP probe and a 31-byte DNS probe, under Shadowsocks' 50-byte threshold,
where the paper's tree put its HTTP and DNS probes above it):

* obfs4 (< 0.0.11): more than 8192 + N bytes (rand-17k) → RST fast; everything
  else → FIN after 30–90 s (closeAfterDelay).
* OSSH: under 24 bytes → FIN after ≥ 30 s; 25 bytes or more → RST fast.
* Lampshade: more than 256 bytes → RST fast; the rest → FIN after ≥ 90 s.
* shadowsocks-python: 50 bytes or more → FIN fast; the rest → TIMEOUT.
* shadowsocks-outline (1.0.6): more than 50 → RST fast; exactly 50 → FIN
  fast; fewer → TIMEOUT.
* MTProto: every probe → TIMEOUT (also every "read forever" server: unidentifiable).

The first layer everywhere is "any data response → not a proxy"; a suite where
no probe connected is "unreachable", and one that fits no tree "unknown". The
paper's time constants (2 s, 30 s, 90 s and the 300 s TIMEOUT) scale with
:class:`Timing` so lab tests can run the same trees in seconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import overload

from .observe import ProbeResult
from .probes import frolov_suite


@dataclass(frozen=True)
class Timing:
    """The trees' time constants, in seconds; ``scale`` shrinks them together.

    ``fast_floor_s`` keeps "in under 2 s" from shrinking below real network latency:
    a 0.01 scale would otherwise demand a reaction within 20 ms, which a loaded lab
    path (NFQUEUE, namespaces) can miss. The floor never blurs two branches of one
    tree, because every "fast" branch (RST or FIN in under 2 s) is told apart from
    its sibling by close type (FIN late, or TIMEOUT), not by time alone.

    ``jitter_s`` widens every time window by that much on both sides. Frolov et al.
    binned close times to whole seconds, so a server that closes "at 30 s" passes
    "≥ 30 s" in their data; measured in-process on loopback, where the server's
    timer may start a few microseconds before the prober's clock, the same close
    can read 29.9999 scaled seconds. A few milliseconds of jitter absorb that.
    """

    scale: float = 1.0
    fast_floor_s: float = 0.0
    jitter_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.scale > 0 or not self.fast_floor_s >= 0 or not self.jitter_s >= 0:
            raise ValueError("Timing needs scale > 0, fast_floor_s >= 0 and jitter_s >= 0")

    @classmethod
    def for_watch(cls, watch_s: float, fast_floor_s: float = 0.0,
                  jitter_s: float = 0.0) -> Timing:
        """The timing whose TIMEOUT horizon (the paper's 300 s) is ``watch_s``."""
        return cls(watch_s / 300.0, fast_floor_s, jitter_s)

    @property
    def fast(self) -> float:  # "in under 2 s"
        return max(2.0 * self.scale, self.fast_floor_s)

    @property
    def obfs4_min(self) -> float:  # closeAfterDelay: 30-90 s
        return 30.0 * self.scale

    @property
    def obfs4_max(self) -> float:
        return 90.0 * self.scale

    @property
    def ossh_min(self) -> float:  # OSSH's 30 s connection timeout
        return 30.0 * self.scale

    @property
    def lampshade_min(self) -> float:  # Lampshade's 90 s (or 135 s) timeout
        return 90.0 * self.scale

    @property
    def watch(self) -> float:  # the TIMEOUT horizon: run probes with this watch_s
        return 300.0 * self.scale


Expect = Callable[[int, ProbeResult, Timing], bool]


def _fast(close: str) -> Expect:
    return lambda n, r, t: r.close == close and (r.close_after_s or 0) < t.fast + t.jitter_s


def _timeout(n: int, r: ProbeResult, t: Timing) -> bool:
    return r.close == "TIMEOUT"


def _fin_between(lo: Callable[[Timing], float], hi: Callable[[Timing], float] | None) -> Expect:
    def check(n: int, r: ProbeResult, t: Timing) -> bool:
        after = r.close_after_s or 0
        return (r.close == "FIN" and after >= lo(t) - t.jitter_s
                and (hi is None or after < hi(t) + t.jitter_s))
    return check


def _by_length(*rules: tuple[Callable[[int], bool], Expect]) -> Expect:
    def tree(n: int, r: ProbeResult, t: Timing) -> bool:
        for applies, expect in rules:
            if applies(n):
                return expect(n, r, t)
        return False
    return tree


OBFS4_RST_ABOVE = 8192 + 8192  # the largest FIN threshold: 8192 + N, N ≤ 8192 (Table II)

TREES: dict[str, Expect] = {
    "obfs4": _by_length((lambda n: n > OBFS4_RST_ABOVE, _fast("RST")),
                        (lambda n: True, _fin_between(lambda t: t.obfs4_min,
                                                      lambda t: t.obfs4_max))),
    "ossh": _by_length((lambda n: n < 24, _fin_between(lambda t: t.ossh_min, None)),
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

LABELS: tuple[str, ...] = ("not-proxy", *TREES, "unreachable", "unknown")

_RAND_EXACT = re.compile(r"rand-(\d+)")


@cache
def _suite_lengths() -> dict[str, int]:
    # Every default Frolov probe has a seed-independent length (the TLS hello is
    # padded to 512 bytes, the random parts of STUN and DNS are fixed-size).
    return {p.name: len(p.payload) for p in frolov_suite()}


def probe_length(name: str) -> int:
    """The byte length behind a Frolov probe name: the default suite's names
    (``http`` 37, ``tls`` 517, ..., ``rand-7k`` 7168, ``rand-17k`` 17410) and exact
    ``rand-<n>`` names. Other names raise ValueError: pass ``lengths`` instead."""
    if (n := _suite_lengths().get(name)) is not None:
        return n
    if m := _RAND_EXACT.fullmatch(name):
        return int(m.group(1))
    raise ValueError(f"no known length for probe {name!r}; pass lengths explicitly")


@overload
def label(results: Mapping[str, ProbeResult], timing: Timing = ..., /) -> str: ...
@overload
def label(results: Sequence[ProbeResult], lengths: Sequence[int] | None = ...,
          timing: Timing = ..., /) -> str: ...


def label(results: Mapping[str, ProbeResult] | Sequence[ProbeResult],
          lengths: Sequence[int] | Timing | None = None,
          timing: Timing | None = None, /) -> str:
    """One of :data:`LABELS`: "not-proxy", a proxy name from :data:`TREES`,
    "unreachable" or "unknown".

    Call forms:

    * ``label({probe_name: result}, timing)``: lengths come from the probe names
      (:func:`probe_length`), for results of :func:`~.probes.frolov_suite`;
    * ``label([result, ...], lengths, timing)``: ``lengths[i]`` is the number of
      bytes probe ``results[i]`` sent (any suite, any names); with ``lengths``
      None they come from the result names as above.

    Run the probes with ``watch_s=timing.watch`` so TIMEOUT means what the trees
    mean by it (the paper's 300 s, scaled).
    """
    if isinstance(lengths, Timing):
        lengths, timing = None, lengths
    timing = timing or Timing()
    if isinstance(results, Mapping):
        names = list(results)
        rows = [results[n] for n in names]
        sizes = list(lengths) if lengths is not None else [probe_length(n) for n in names]
    else:
        rows = list(results)
        sizes = (list(lengths) if lengths is not None
                 else [probe_length(r.probe) for r in rows])
    if len(sizes) != len(rows):
        raise ValueError(f"{len(rows)} results but {len(sizes)} lengths")
    if any(r.response_len > 0 for r in rows):
        return "not-proxy"
    if not rows or not any(r.connected for r in rows):
        return "unreachable"
    for name, tree in TREES.items():
        if all(tree(n, r, timing) for n, r in zip(sizes, rows, strict=True)):
            return name
    return "unknown"
