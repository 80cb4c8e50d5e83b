"""Alice et al.'s staged replay probing against servers with and without a replay filter."""

from __future__ import annotations

import asyncio
import os
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from censor_sim.prober import alice
from censor_sim.prober.observe import ProbeResult


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


# ------------------------------------------------------------------ classification


def result(probe: str, close: str, sent: int = 300, data: int = 0,
           connected: bool = True) -> ProbeResult:
    return ProbeResult(probe, connected, b"x" * data, data, close, 1.0, sent=sent)


def investigation(r1: str, randoms: dict[int, str], r1_data: int = 0) -> alice.Investigation:
    inv = alice.Investigation()
    inv.results = [result("R1", r1, data=r1_data), result("R2", r1)]
    inv.results += [result(f"NR1-{n}" if n != 221 else "NR2", c, sent=n)
                    for n, c in randoms.items()]
    return inv


def test_libev_3_3_with_aead_times_out_on_everything():
    """Alice et al.: v3.3.1 and v3.3.3 with AEAD ciphers time out on every probe."""
    inv = investigation("TIMEOUT", {8: "TIMEOUT", 33: "TIMEOUT", 49: "TIMEOUT",
                                    221: "TIMEOUT"})
    assert alice.classify(inv).label == alice.TIMEOUT_EVERYWHERE


def test_libev_3_2_with_aead_resets_above_50_bytes():
    """v3.0.8-v3.2.5, AEAD with a 16-byte salt: timeout on <= 50 bytes, RST above."""
    inv = investigation("RST", {12: "TIMEOUT", 41: "TIMEOUT", 50: "TIMEOUT", 221: "RST"})
    c = alice.classify(inv)
    assert (c.label, c.threshold, c.reactions["R1"]) == (alice.LIBEV_OLD_AEAD, 221, "R")
    # One random probe of 50 bytes or fewer that resets breaks the pattern.
    assert alice.classify(investigation("RST", {12: "TIMEOUT", 50: "RST", 221: "RST"})
                          ).label == alice.UNCLASSIFIED


def test_libev_3_2_with_a_stream_cipher_resets_from_9_bytes():
    inv = investigation("RST", {7: "TIMEOUT", 8: "TIMEOUT", 9: "RST", 12: "RST", 13: "RST",
                                221: "FIN"})
    assert alice.classify(inv).label == alice.LIBEV_OLD_STREAM
    inv = investigation("RST", {7: "TIMEOUT", 9: "TIMEOUT", 12: "TIMEOUT", 221: "FIN"})
    assert alice.classify(inv).label == alice.UNCLASSIFIED


def test_a_server_that_answers_the_identical_replay_and_one_never_reached():
    inv = investigation("TIMEOUT", {221: "TIMEOUT"}, r1_data=40)
    assert alice.classify(inv).label == alice.NO_REPLAY_FILTER
    inv = alice.Investigation(results=[result("R1", "REFUSED", connected=False)])
    assert alice.classify(inv).label == alice.UNREACHABLE


def test_a_silent_toy_with_a_replay_filter_is_timeout_everywhere():
    inv = asyncio.run(run_against(replay_filter=True))
    assert alice.classify(inv).label == alice.TIMEOUT_EVERYWHERE


CLOSES = ["FIN", "RST", "TIMEOUT", "REFUSED", "ERROR"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["R1", "R2", "R3", "NR2", "NR1-8", "NR1-49"]),
                          st.sampled_from(CLOSES), st.integers(0, 3000), st.integers(0, 50),
                          st.booleans()), max_size=10))
def test_classify_names_any_set_of_reactions(rows):
    inv = alice.Investigation(results=[result(p, c, n, d, ok) for p, c, n, d, ok in rows])
    label = alice.classify(inv).label
    assert label in {alice.UNREACHABLE, alice.NO_REPLAY_FILTER, alice.TIMEOUT_EVERYWHERE,
                     alice.LIBEV_OLD_AEAD, alice.LIBEV_OLD_STREAM, alice.UNCLASSIFIED}


async def test_the_service_reports_each_probes_reaction():
    """The probe service answers the class and, per probe, the paper's reaction letter,
    so a report can show a server's reactions as Alice et al. tabulate them."""
    from censor_sim.prober.service import handle_request

    genuine = random.Random(1).randbytes(300)
    srv = await asyncio.start_server(ReplayServer(genuine, True).handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)  # the real client's session
        w.write(genuine)
        assert (await r.read(100))[:1] == b"\x17"
        w.close()
        reply = await handle_request({"id": 1, "host": "127.0.0.1", "port": port,
                                      "first_payload": genuine.hex(), "suites": ["alice"],
                                      "watch_s": 0.5, "delay_s": 0})
    finally:
        srv.close()
    assert reply["shadowsocks"] == alice.TIMEOUT_EVERYWHERE
    reactions = reply["shadowsocks_reactions"]
    assert {"R1", "R2"} <= set(reactions) and set(reactions.values()) == {"T"}
    assert len(reactions) == len(reply["results"])
