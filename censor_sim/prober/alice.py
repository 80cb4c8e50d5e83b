"""The GFW's Shadowsocks prober: replays and random probes, in stages.

Alice, Bob, Carol, Beznazwy and Houmansadr (IMC 2020, "How China Detects and
Blocks Shadowsocks", §4; censors.md §3.2) saw seven probe types built from a
recorded first client payload:

* replays: R1 identical; R2 byte 0 changed; R3 bytes 0–7 and 62–63 changed;
  R4 byte 16 changed; R5 bytes 6 and 16 changed;
* random: NR1 in trios of lengths around 8, 12, 16, 22, 33, 41 and 49 bytes;
  NR2 exactly 221 bytes.

R3–R5 were only sent after the server had *answered* R1 or R2: a server
that answers a replay has no replay filter, so the prober escalates. Probes
that would change bytes beyond a short payload change only the bytes that
exist (and a probe with nothing to change is skipped).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from .observe import ProbeResult, SockFactory, observe
from .probes import Probe

NR1_LENGTHS = (7, 8, 9, 11, 12, 13, 15, 16, 17, 21, 22, 23, 32, 33, 34, 40, 41, 42, 48, 49, 50)
NR2_LENGTH = 221
CHANGED = {"R2": (0,), "R3": (0, 1, 2, 3, 4, 5, 6, 7, 62, 63), "R4": (16,), "R5": (6, 16)}


def _changed(payload: bytes, offsets: tuple[int, ...], rng: random.Random) -> bytes | None:
    data = bytearray(payload)
    hit = [o for o in offsets if o < len(data)]
    if not hit:
        return None
    for o in hit:
        data[o] = (data[o] + 1 + rng.randrange(255)) % 256  # always a different byte
    return bytes(data)


def replay_probes(payload: bytes, names: tuple[str, ...], rng: random.Random) -> list[Probe]:
    out = []
    for name in names:
        if name == "R1":
            out.append(Probe("R1", bytes(payload)))
        elif (data := _changed(payload, CHANGED[name], rng)) is not None:
            out.append(Probe(name, data))
    return out


def random_probes(rng: random.Random, nr1: int = 3) -> list[Probe]:
    """NR2 (221 bytes) and `nr1` NR1 probes of lengths drawn from the trios."""
    probes = [Probe("NR2", rng.randbytes(NR2_LENGTH))]
    for _ in range(nr1):
        n = rng.choice(NR1_LENGTHS)
        probes.append(Probe(f"NR1-{n}", rng.randbytes(n)))
    return probes


@dataclass
class Investigation:
    """What the staged probing saw and concluded."""

    results: list[ProbeResult] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    answers_replay: bool = False
    escalated: bool = False


async def investigate(host: str, port: int, first_payload: bytes, *, watch_s: float = 10.0,
                      seed: int = 0, nr1: int = 3,
                      sock_factory: SockFactory | None = None) -> Investigation:
    """Stage 1: R1, R2 and random probes; stage 2 (R3–R5) only if R1 or R2 got data.

    ``watch_s`` is the prober's patience: it "usually times out in under 10 s".
    """
    rng = random.Random(seed)
    inv = Investigation()

    async def run(probes: list[Probe]) -> list[ProbeResult]:
        return list(await asyncio.gather(*(observe(host, port, p, watch_s,
                                                   sock_factory=sock_factory)
                                           for p in probes)))

    stage1 = await run(replay_probes(first_payload, ("R1", "R2"), rng) + random_probes(rng, nr1))
    inv.stages.append("R1,R2,NR")
    inv.results += stage1
    inv.answers_replay = any(r.response_len > 0 for r in stage1 if r.probe in ("R1", "R2"))
    if inv.answers_replay:
        inv.escalated = True
        inv.stages.append("R3,R4,R5")
        inv.results += await run(replay_probes(first_payload, ("R3", "R4", "R5"), rng))
    return inv
