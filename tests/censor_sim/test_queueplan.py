"""What the censor asks the kernel for, per profile and mode (censor_sim.queueplan)."""

from __future__ import annotations

import random

import pytest

from censor_sim.engine import Engine
from censor_sim.profile import load_profile, profile_path
from censor_sim.queueplan import queue_config


def plan(name: str, on_path: bool = False, **datapath):
    profile = load_profile(name, {"datapath": datapath} if datapath else {})
    engine = Engine(profile, clock=lambda: 0.0, rng=random.Random(0))
    return queue_config(engine, profile.datapath, on_path, "in0", "out0")


@pytest.mark.parametrize("on_path", [False, True], ids=["in-path", "on-path"])
def test_a_payload_censor_of_clients_gets_only_their_tcp_payloads_and_no_syn(on_path):
    q = plan("gfw-fet-2021", on_path)
    assert q.mechanism == ("tap" if on_path else "queue")
    assert q.protocols == (6,) and q.skip_empty_tcp and q.client_side_only
    assert q.watch_births  # in-path too: the SYN never waits in the queue


@pytest.mark.parametrize("on_path", [False, True], ids=["in-path", "on-path"])
def test_a_residual_restarted_by_new_attempts_keeps_their_syns(on_path, tmp_path):
    """Iran's protocol filter restarts its block on each new attempt, which the
    censor knows only from the attempt's SYN (test_live_profiles shows the restart).
    Here the same restart on FET, whose inspector alone would let SYNs stay behind."""
    text = profile_path("gfw-fet-2021").read_text().replace(
        "[actions.residual]\n", "[actions.residual]\nrefresh_on_new_flow = true\n")
    assert "refresh_on_new_flow" in text
    (tmp_path / "fet-restart.toml").write_text(text)
    q = plan(str(tmp_path / "fet-restart.toml"), on_path)
    assert q.skip_empty_tcp and q.client_side_only
    assert not q.watch_births
    assert not plan("iran-protocol-filter-2020", on_path).watch_births


def test_watching_births_can_be_turned_off():
    assert not plan("gfw-fet-2021", watch_births=False).watch_births
    assert not plan("gfw-fet-2021", True, watch_births=False).watch_births


def test_a_censor_that_reads_the_server_side_gets_both_sides_and_syns():
    q = plan("gfw-quic-sni-2024")
    assert not q.client_side_only and not q.watch_births


def test_a_packet_censor_gets_every_packet_and_no_shortcuts():
    q = plan("geneva-censor1")  # Geneva's TCB censors track every segment both ways
    assert q.inspect_packets is None and q.protocols is None
    assert not q.skip_empty_tcp and not q.client_side_only and not q.watch_births


def test_the_tap_batch_wait_rounds_up_to_the_kernels_hundredths():
    q = plan("gfw-fet-2021", True, tap_batch=64, tap_wait_ms=11)
    assert (q.tap_batch, q.tap_wait_cs) == (64, 2)
