"""Crash safety: SIGKILL `ptlab lab up` and `ptlab run` anywhere, then `ptlab lab down`
leaves nothing behind; and two labs never disturb each other."""

from __future__ import annotations

import os
import secrets
import signal
import time

import pytest

from netns import cleanup
from netns.lab import Lab
from netns.topology import default_topology

from .conftest import lab_pids, lab_traces, pids_alive, ptlab, spawn_ptlab

pytestmark = pytest.mark.lab


def new_id() -> str:
    return "t" + secrets.token_hex(2)[:3]


@pytest.mark.parametrize("delay", [0.0, 0.15, 0.4, 0.8, None])
def test_sigkill_lab_up_then_lab_down_leaves_nothing(delay):
    lab_id = new_id()
    proc = spawn_ptlab("lab", "up", "--id", lab_id, "--proxies", "3")
    if delay is None:
        proc.wait(30)  # finished: the lab is up and detached
    else:
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    try:
        # Plain `lab down` removes the lab if it was orphaned mid-creation...
        assert ptlab("lab", "down").returncode == 0
        state = cleanup.status(lab_id)
        if lab_traces(lab_id):
            # ...and only a finished `lab up` (detached) survives it, by design.
            assert delay is None or state.state == "detached", (delay, state, lab_traces(lab_id))
        assert ptlab("lab", "down", lab_id).returncode in (0, 2)
    finally:
        cleanup.down(lab_id)
    assert lab_traces(lab_id) == []


@pytest.mark.parametrize("delay", [0.5, 2.5, 5.0])
def test_sigkill_run_then_lab_down_leaves_nothing(delay, tmp_path):
    lab_id = new_id()
    proc = spawn_ptlab("run", "--quick", "--lab-id", lab_id, "--results", str(tmp_path / "r"))
    time.sleep(delay)
    pids = lab_pids(lab_id)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    try:
        assert cleanup.status(lab_id).state == "orphan" or not lab_traces(lab_id)
        down = ptlab("lab", "down")
        assert down.returncode == 0, down.stderr
        assert lab_traces(lab_id) == []
        # Every process the run had started inside the lab is gone too.
        deadline = time.monotonic() + 5
        while pids_alive(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pids_alive(pids) == set()
    finally:
        cleanup.down(lab_id)


def test_two_labs_do_not_disturb_each_other():
    a = Lab(default_topology(0), new_id()).up()
    b = Lab(default_topology(0), new_id()).up()
    try:
        for lab in (a, b):
            assert lab.exec("client", ["ping", "-c1", "-W1", lab.addr("web")],
                            check=False).returncode == 0
        # A plain `lab down` removes orphans only: both labs have a live owner (us).
        assert ptlab("lab", "down").returncode == 0
        assert cleanup.status(a.id).state == "owned" and cleanup.status(b.id).namespaces
        b.down()
        assert lab_traces(b.id) == []
        # a keeps working after its neighbour went away.
        assert a.exec("client", ["ping", "-c1", "-W1", a.addr("web")],
                      check=False).returncode == 0
    finally:
        a.down()
        b.down()
    assert lab_traces(a.id) == [] and lab_traces(b.id) == []


def test_a_dead_owner_makes_an_orphan_and_a_recycled_pid_does_not_fool_it():
    lab_id = new_id()
    pid = os.fork()
    if pid == 0:  # child: bring a lab up, then die without cleaning up
        try:
            Lab(default_topology(0), lab_id).up()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    try:
        assert cleanup.status(lab_id).state == "orphan"
        assert lab_id in cleanup.down_orphans()
        assert lab_traces(lab_id) == []
    finally:
        cleanup.down(lab_id)


def _orphan_lab(lab_id: str) -> int:
    """A lab brought up by a child process that then dies without cleaning up; the
    child's pid (the lab's owner, as a Dask worker owns its lab)."""
    pid = os.fork()
    if pid == 0:
        try:
            Lab(default_topology(0), lab_id).up()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_a_stopped_run_takes_down_its_own_workers_labs_and_no_other():
    """--jobs: a run that stops on an error may kill a worker mid bring-up. The run
    removes the labs its workers owned on its way out (executors.down_labs_of), and
    leaves alone another lab whose owner is dead too, someone else's, and one whose
    owner had a worker's pid but another start time (a recycled pid)."""
    from netns import ownership
    from ptlab.experiment.executors import down_labs_of

    ours, theirs = new_id(), new_id()
    ours_pid, theirs_pid = _orphan_lab(ours), _orphan_lab(theirs)
    try:
        assert ours_pid != theirs_pid
        assert cleanup.status(ours).state == cleanup.status(theirs).state == "orphan"
        owner = ownership.read_owner(ours)
        assert owner is not None and owner.pid == ours_pid and owner.start is not None
        assert down_labs_of({(ours_pid, owner.start + 1)}) == []  # the pid, not the process
        assert down_labs_of({(ours_pid, owner.start)}) == [ours]
        assert lab_traces(ours) == []
        assert lab_traces(theirs) and cleanup.status(theirs).state == "orphan"
        assert down_labs_of({(ours_pid, owner.start)}) == []  # nothing left of ours
    finally:
        cleanup.down(ours)
        cleanup.down(theirs)
