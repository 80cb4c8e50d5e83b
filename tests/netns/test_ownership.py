"""A lab's state directory appears with its owner or not at all, so a claimant
killed at any instant leaves nothing `ptlab lab down` mistakes for a lab being made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from netns import cleanup, ownership


@pytest.fixture
def state_root(tmp_path, monkeypatch):
    monkeypatch.setattr(ownership, "STATE_ROOT", tmp_path / "state")
    return tmp_path / "state"


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_claim_puts_the_directory_in_place_with_its_owner(state_root):
    assert ownership.claim("t1a")
    record = json.loads((state_root / "t1a" / "owner.json").read_text())
    assert record["pid"] == os.getpid() and record["start"] is not None
    assert not ownership.claim("t1a")  # taken
    assert [p.name for p in state_root.iterdir()] == ["t1a"]  # no claim left over
    assert cleanup.status("t1a").state == "owned"


def test_a_directory_without_an_owner_is_debris_at_once(state_root):
    (state_root / "t2b").mkdir(parents=True)
    assert cleanup.status("t2b").state == "orphan"  # not "being made" for 10 s


def test_a_half_made_claim_is_no_lab_and_goes_with_its_dead_claimant(state_root):
    state_root.mkdir()
    dead = state_root / f"{ownership.CLAIMING}t3c.{dead_pid()}.1"
    live = state_root / f"{ownership.CLAIMING}t3d.{os.getpid()}.{threading.get_native_id()}"
    for d in (dead, live):
        d.mkdir()
        (d / "owner.tmp").write_text("{")
    assert not {"t3c", "t3d"} & cleanup.all_lab_ids()
    assert not any(i.startswith(".") for i in cleanup.all_lab_ids())
    assert ownership.sweep_claims() == [dead.name]
    assert not dead.exists() and live.exists()  # its claimant may still rename it


def test_threads_of_one_process_racing_for_one_id_get_it_once(state_root):
    """Labs run side by side in one program (a test's runs, a threaded executor):
    threads that claim the same id at the same instant get one winner, and no
    thread's half-made claim is taken for another's."""
    threads = 8
    for round_ in range(30):
        lab_id = f"t4{round_:02d}"
        start = threading.Barrier(threads)
        won: list[bool] = []
        errors: list[BaseException] = []

        def race(lab_id: str = lab_id, start: threading.Barrier = start,
                 won: list[bool] = won, errors: list[BaseException] = errors) -> None:
            start.wait()
            try:
                won.append(ownership.claim(lab_id))
            except BaseException as exc:  # reported below, with the round
                errors.append(exc)

        workers = [threading.Thread(target=race) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert errors == [] and won.count(True) == 1, (round_, won, errors)
    assert sorted(p.name for p in state_root.iterdir()) == [f"t4{r:02d}" for r in range(30)]
