"""The GFW's Shadowsocks prober: replays and random probes, in stages.

Alice, Bob, Carol, Beznazwy and Houmansadr (IMC 2020, "How China Detects and
Blocks Shadowsocks", §4; docs/censors/probing.md §2.2) saw seven probe types built from a
recorded first client payload:

* replays: R1 identical; R2 byte 0 changed; R3 bytes 0–7 and 62–63 changed;
  R4 byte 16 changed; R5 bytes 6 and 16 changed;
* random: NR1 in trios of lengths around 8, 12, 16, 22, 33, 41 and 49 bytes;
  NR2 exactly 221 bytes.

R3–R5 were only sent after the server had *answered* R1 or R2: a server
that answers a replay has no replay filter, so the prober escalates. Probes
that would change bytes beyond a short payload change only the bytes that
exist (and a probe with nothing to change is skipped): R3 of a 10-byte payload
changes bytes 0-7, R4 of a 16-byte payload is not sent. A changed byte is
always *different* from the original, so R2-R5 never equal R1 by accident.

NR1 lengths are drawn uniformly from the 21 lengths of the seven trios; the
paper reports the lengths, not how many NR1 probes follow one trigger (they
came "a few per hour"), so ``nr1`` is a parameter. The paper's prober gives
up after about 10 s, hence ``watch_s=10`` by default (docs/censors/probing.md §2.5, §4.1).

:func:`classify` then names the server from its reactions, as the paper's §5 does
(docs/censors/probing.md §2.6).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from .observe import ProbeResult, SockFactory, observe
from .probes import Probe

# NR1 lengths cluster in trios around 8, 12, 16, 22, 33, 41 and 49 bytes.
NR1_TRIOS = ((7, 9), (11, 13), (15, 17), (21, 23), (32, 34), (40, 42), (48, 50))
NR1_LENGTHS = tuple(n for lo, hi in NR1_TRIOS for n in range(lo, hi + 1))
NR2_LENGTH = 221
# The byte offsets each replay variant changes (R1 changes none).
CHANGED = {"R2": (0,), "R3": (0, 1, 2, 3, 4, 5, 6, 7, 62, 63), "R4": (16,), "R5": (6, 16)}


def _changed(payload: bytes, offsets: tuple[int, ...], rng: random.Random) -> bytes | None:
    data = bytearray(payload)
    hit = [o for o in offsets if o < len(data)]
    if not hit:
        return None
    for o in hit:
        data[o] = (data[o] + 1 + rng.randrange(255)) % 256  # always a different byte
    return bytes(data)


STAGE1 = ("R1", "R2")
STAGE2 = ("R3", "R4", "R5")


def replay_probes(payload: bytes, names: tuple[str, ...], rng: random.Random) -> list[Probe]:
    """The replay variants ``names`` (of R1-R5) of a recorded first payload, in order;
    a variant none of whose offsets exist in ``payload`` is left out."""
    out = []
    for name in names:
        if name == "R1":
            out.append(Probe("R1", bytes(payload)))
        elif (data := _changed(payload, CHANGED[name], rng)) is not None:
            out.append(Probe(name, data))
    return out


def random_probes(rng: random.Random, nr1: int = 3) -> list[Probe]:
    """NR2 (221 bytes) and ``nr1`` NR1 probes of lengths drawn from the trios, named
    ``NR1-<len>`` (``NR1-<len>.<k>`` for a repeated length, so names stay unique)."""
    probes = [Probe("NR2", rng.randbytes(NR2_LENGTH))]
    names: set[str] = set()
    for _ in range(nr1):
        n = rng.choice(NR1_LENGTHS)
        name, k = f"NR1-{n}", 1
        while name in names:
            k += 1
            name = f"NR1-{n}.{k}"
        names.add(name)
        probes.append(Probe(name, rng.randbytes(n)))
    return probes


@dataclass
class Investigation:
    """What the staged probing saw and concluded.

    ``stages`` names the stages that ran ("R1,R2,NR", then "R3,R4,R5" if it
    escalated); ``results`` has one ProbeResult per probe sent, stage 1 first.
    """

    results: list[ProbeResult] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    answers_replay: bool = False
    escalated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"stages": list(self.stages), "answers_replay": self.answers_replay,
                "escalated": self.escalated, "results": [r.to_json() for r in self.results]}


async def investigate(host: str, port: int, first_payload: bytes, *, watch_s: float = 10.0,
                      seed: int = 0, nr1: int = 3, connect_timeout: float = 5.0,
                      sock_factory: SockFactory | None = None) -> Investigation:
    """Stage 1: R1, R2, NR2 and ``nr1`` NR1 probes, concurrently; stage 2 (R3-R5)
    only if R1 or R2 got data back (Alice et al. §4.2: R3-R5 followed only servers
    that had *responded* to R1/R2).

    ``watch_s`` is the prober's patience per probe: it "usually times out in under
    10 s". A stage lasts until every probe in it closed or timed out, so a server
    that answers and then keeps the connection open costs ``watch_s`` per stage.
    """
    if not first_payload:
        raise ValueError("Alice staging needs the recorded first payload")
    rng = random.Random(seed)
    inv = Investigation()

    async def run(probes: list[Probe]) -> list[ProbeResult]:
        return list(await asyncio.gather(*(observe(host, port, p, watch_s, connect_timeout,
                                                   sock_factory=sock_factory)
                                           for p in probes)))

    stage1 = await run(replay_probes(first_payload, STAGE1, rng) + random_probes(rng, nr1))
    inv.stages.append("R1,R2,NR")
    inv.results += stage1
    inv.answers_replay = any(r.response_len > 0 for r in stage1 if r.probe in STAGE1)
    if inv.answers_replay:
        inv.escalated = True
        inv.stages.append("R3,R4,R5")
        inv.results += await run(replay_probes(first_payload, STAGE2, rng))
    return inv


# --------------------------------------------------------------------- classification

# Alice et al. §5 (Figure 9 and the replay table): how each implementation reacts.
# A 16-byte-salt AEAD server of shadowsocks-libev 3.0.8-3.2.5 needs salt + length +
# two tags (16 + 2 + 16 + 16 = 50 bytes) before it can fail authentication: it times
# out on 50 bytes or fewer and resets above.
AEAD_THRESHOLD_16 = 50
# The stream-cipher server with an 8-byte IV: 1-8 bytes time out, 9-14 mostly reset.
STREAM_TIMEOUT_MAX, STREAM_RST_MAX = 8, 14

UNREACHABLE = "unreachable"
NO_REPLAY_FILTER = "answers-identical-replay"
TIMEOUT_EVERYWHERE = "timeout-on-every-probe"
LIBEV_OLD_AEAD = "ss-libev-3.0-3.2-aead"
LIBEV_OLD_STREAM = "ss-libev-3.0-3.2-stream"
UNCLASSIFIED = "unclassified"


@dataclass(frozen=True)
class Classification:
    """The class :func:`classify` gives a server, and the reactions it read."""

    label: str
    reactions: dict[str, str]  # probe name -> D (data), R, F, T (timeout), - (no connection)
    threshold: int | None = None  # shortest random probe that drew a RST


def reaction(r: ProbeResult) -> str:
    """The paper's one-letter reaction: D(ata), R(ST), F(IN), T(imeout), or - if the
    probe never connected."""
    if not r.connected:
        return "-"
    if r.response_len > 0:
        return "D"
    return {"RST": "R", "FIN": "F", "TIMEOUT": "T"}.get(r.close, "-")


def classify(inv: Investigation) -> Classification:
    """Name the server from its reactions (Alice et al. §5; docs/censors/probing.md §2.6).

    In order:

    * no probe connected: ``unreachable``;
    * the identical replay R1 drew data: ``answers-identical-replay`` (no replay
      filter; OutlineVPN up to 1.0.6 did this, and drew R3-R5);
    * every probe that connected timed out: ``timeout-on-every-probe``. The paper
      found shadowsocks-libev 3.3.1 and 3.3.3 with AEAD ciphers, and OutlineVPN
      1.0.7-1.0.8, reacting so to every probe: nothing to tell them from a server
      that never answers within the prober's patience;
    * R1 reset, random probes of 50 bytes or fewer timed out and longer ones reset:
      ``ss-libev-3.0-3.2-aead`` (``threshold`` is the shortest that reset; the
      prober's lengths cannot tell a 16-byte salt's 50 from a 32-byte salt's 66);
    * R1 reset, random probes of 8 bytes or fewer timed out and those of 9-14 reset:
      ``ss-libev-3.0-3.2-stream``;
    * anything else: ``unclassified``.
    """
    reactions = {r.probe: reaction(r) for r in inv.results}
    connected = [r for r in inv.results if r.connected]
    if not connected:
        return Classification(UNREACHABLE, reactions)
    if reactions.get("R1") == "D":
        return Classification(NO_REPLAY_FILTER, reactions)
    if all(reaction(r) == "T" for r in connected):
        return Classification(TIMEOUT_EVERYWHERE, reactions)
    randoms = sorted((r.sent, reaction(r)) for r in connected
                     if r.probe.startswith("NR"))
    threshold = next((n for n, x in randoms if x == "R"), None)
    upto, above = ([x for n, x in randoms if n <= AEAD_THRESHOLD_16],
                   [x for n, x in randoms if n > AEAD_THRESHOLD_16])
    if reactions.get("R1") == "R" and upto and above and set(upto) == {"T"} \
            and set(above) == {"R"}:
        return Classification(LIBEV_OLD_AEAD, reactions, threshold)
    short = [x for n, x in randoms if n <= STREAM_TIMEOUT_MAX]
    mid = [x for n, x in randoms if STREAM_TIMEOUT_MAX < n <= STREAM_RST_MAX]
    if reactions.get("R1") == "R" and short and mid and all(x == "T" for x in short) \
            and mid.count("R") * 2 > len(mid):
        return Classification(LIBEV_OLD_STREAM, reactions, threshold)
    return Classification(UNCLASSIFIED, reactions, threshold)
