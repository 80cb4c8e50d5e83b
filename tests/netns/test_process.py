"""A stopped LabProcess leaves nothing of its group behind, even when its leader
died first (a shell under ``set -e`` whose background daemon lives on)."""

import os
import time

import pytest

from netns.process import LabProcess, live_group_members
from tests.support.netlab import pair_lab

pytestmark = pytest.mark.lab  # a namespace: root


@pytest.fixture
def one_node_lab():
    with pair_lab("solo") as lab:
        yield lab


def _wait_members(pgid: int, want: int, timeout: float = 3.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(members := live_group_members(pgid)) != want and time.monotonic() < deadline:
        time.sleep(0.02)
    return members


def test_an_orphaned_background_child_is_stopped_with_its_dead_leader(one_node_lab, tmp_path):
    p = LabProcess(one_node_lab.ns("solo"), ["sh", "-c", "sleep 60 & exit 3"], "orphan",
                   tmp_path / "orphan.log").start()
    assert p.proc.wait(3) == 3
    assert len(_wait_members(p.pid, 1)) == 1      # the sleep outlived its shell
    assert p.stop() == 3
    assert live_group_members(p.pid) == []


def test_a_running_group_is_stopped_whole(one_node_lab, tmp_path):
    p = LabProcess(one_node_lab.ns("solo"), ["sh", "-c", "sleep 60 & sleep 60 & wait"],
                   "group", tmp_path / "group.log").start()
    assert len(_wait_members(p.pid, 3)) == 3       # the shell and its two sleeps
    p.stop()
    assert live_group_members(p.pid) == []


def test_a_child_that_ignores_sigterm_is_killed(one_node_lab, tmp_path):
    p = LabProcess(one_node_lab.ns("solo"),
                   ["sh", "-c", "(trap '' TERM; sleep 60) & exit 0"],
                   "stubborn", tmp_path / "stubborn.log").start()
    assert p.proc.wait(3) == 0
    assert live_group_members(p.pid) != []        # the subshell that ignores SIGTERM
    p.stop(timeout=0.3)
    assert live_group_members(p.pid) == []


def test_zombies_do_not_count_as_members():
    assert live_group_members(os.getpgrp()) != []          # this test's own group
    assert live_group_members(2**22 + 12345) == []        # no such group


def test_cpu_seconds_count_the_whole_group(one_node_lab, tmp_path):
    """A launcher that idles while its child burns CPU: the child's seconds count."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n" \
           "time.sleep(30)"
    p = LabProcess(one_node_lab.ns("solo"),
                   ["sh", "-c", f"python3 -c '{burn}' & wait"], "burner",
                   tmp_path / "burner.log").start()
    try:
        deadline = time.monotonic() + 10
        while (p.cpu_seconds() or 0) < 0.35 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.35 <= p.cpu_seconds() < 5
    finally:
        p.stop()
    assert LabProcess("x", ["true"], "unstarted", tmp_path / "u.log").cpu_seconds() is None
