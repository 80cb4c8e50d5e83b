"""A lab's state directory appears with its owner or not at all, so a claimant
killed at any instant leaves nothing `ptlab lab down` mistakes for a lab being made."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
    dead = state_root / f"{ownership.CLAIMING}t3c.{dead_pid()}"
    live = state_root / f"{ownership.CLAIMING}t3d.{os.getpid()}"
    for d in (dead, live):
        d.mkdir()
        (d / "owner.tmp").write_text("{")
    assert not {"t3c", "t3d"} & cleanup.all_lab_ids()
    assert not any(i.startswith(".") for i in cleanup.all_lab_ids())
    assert ownership.sweep_claims() == [dead.name]
    assert not dead.exists() and live.exists()  # its claimant may still rename it
