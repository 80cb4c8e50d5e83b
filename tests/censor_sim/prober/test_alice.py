"""Alice et al.'s staged replay probing against servers with and without a replay filter."""

from __future__ import annotations

import asyncio
import os
import random

from censor_sim.prober import alice


class ReplayServer:
    """A toy AEAD-like server: it answers a payload that authenticates (here: one the
    real client sent, i.e. any exact copy of it) and stays silent on anything else.
    With ``replay_filter`` it answers each authenticated payload only once."""

    def __init__(self, genuine: bytes, replay_filter: bool) -> None:
        self.genuine, self.replay_filter = genuine, replay_filter
        self.seen: set[bytes] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            data = await asyncio.wait_for(reader.read(65536), 5)
            ok = data == self.genuine and not (self.replay_filter and data in self.seen)
            self.seen.add(data)
            if ok:
                writer.write(b"\x17" + os.urandom(60))
                await writer.drain()
            await reader.read()  # then read forever, like libev 3.3+ on failure
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


async def run_against(replay_filter: bool) -> alice.Investigation:
    genuine = random.Random(1).randbytes(300)
    toy = ReplayServer(genuine, replay_filter)
    srv = await asyncio.start_server(toy.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        # The real client's session, which the censor recorded on the wire.
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(genuine)
        assert (await r.read(100))[:1] == b"\x17"
        w.close()
        return await alice.investigate("127.0.0.1", port, genuine, watch_s=0.5, seed=2)
    finally:
        srv.close()


async def test_escalates_against_a_server_that_answers_replays():
    inv = await run_against(replay_filter=False)
    assert inv.answers_replay and inv.escalated
    assert {r.probe for r in inv.results} >= {"R1", "R2", "R3", "R4", "R5", "NR2"}


async def test_does_not_escalate_against_a_replay_filter():
    inv = await run_against(replay_filter=True)
    assert not inv.answers_replay and not inv.escalated
    assert not {"R3", "R4", "R5"} & {r.probe for r in inv.results}


def test_probe_shapes():
    rng = random.Random(0)
    payload = bytes(range(100))
    probes = {p.name: p.payload for p in alice.replay_probes(payload, ("R1", "R2", "R3",
                                                                         "R4", "R5"), rng)}
    assert probes["R1"] == payload
    diff = {n: [i for i in range(100) if p[i] != payload[i]] for n, p in probes.items()}
    assert diff == {"R1": [], "R2": [0], "R3": [0, 1, 2, 3, 4, 5, 6, 7, 62, 63], "R4": [16],
                    "R5": [6, 16]}
    short = {p.name for p in alice.replay_probes(b"abc", ("R3", "R4"), rng)}
    assert short == {"R3"}  # R4 changes byte 16, which a 3-byte payload lacks
    rnd = alice.random_probes(rng, nr1=5)
    assert len(rnd[0].payload) == 221 and all(len(p.payload) in alice.NR1_LENGTHS
                                               for p in rnd[1:])
