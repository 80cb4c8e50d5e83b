"""One 12-cell matrix run every way a large one can be: serially, two labs at once
(--jobs 2), on a real Dask cluster (a scheduler and two workers, each a process
of its own here, each worker with a lab of its own), resumed after SIGKILL, and
in shards merged. Every way gives the serial run's statuses, each cell once.

A worker killed mid-run must lose and double nothing: Dask runs its cells
elsewhere, and each cell is taken once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daskcluster import LocalDaskCluster

from .conftest import REPO, lab_traces, ptlab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
distributed = pytest.importorskip("distributed")

#: 9 cells of quick transports and censors, each over in seconds: blocked cells
#: give up after a few seconds, and every mode runs the whole matrix (CI's budget).
SPEC = """
[experiment]
name = "dask9"
repetitions = 1
[transports.direct]
[transports.obfs4]
[transports.obfs4proxy]
[censors.none]
[censors.ip-blocklist]
detectors.ip_blocklist.addresses = ["role:bridge", "role:web"]
[censors.gfw-fet]
profile = "gfw-fet-2021"
policy.rules = [{ detector = "fet", action = "residual", probability = 1.0 }]
actions.residual.seconds = [20]
[workloads]
bootstrap_timeout_s = 6
[workloads.bulk]
size = 200_000
timeout_s = 10
idle_timeout_s = 3
[workloads.latency]
count = 2
[workloads.benign]
enabled = false
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dask") / "dask9.toml"
    path.write_text(SPEC)
    return path


@pytest.fixture(scope="module")
def serial(spec: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("serial")
    proc = ptlab("run", str(spec), "--results", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr
    return statuses(out)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalDaskCluster]:
    c = LocalDaskCluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def statuses(out: Path) -> dict[str, str]:
    rows = json.loads((out / "results.json").read_text())["rows"]
    cells = [f"{r['transport']} × {r['censor']}" for r in rows]
    assert len(cells) == len(set(cells)), f"a cell counted twice: {cells}"
    return {c: r["status"] for c, r in zip(cells, rows, strict=True)}


def captures_all_there(out: Path) -> None:
    """Every capture a row names came back to the results directory (with --jobs and
    Dask they stayed with the workers: missing from the results, and piling up on
    the workers' disk until a full matrix filled it)."""
    rows = json.loads((out / "results.json").read_text())["rows"]
    named = [p for r in rows for p in r.get("pcaps") or []]
    assert len(named) == 2 * len(rows)  # both sides of the censor, every cell
    missing = [p for p in named if not (out / p).is_file()]
    assert not missing, missing


def test_a_real_scheduler_and_two_workers_give_the_serial_statuses(spec, serial, cluster,
                                                                 tmp_path):
    out = tmp_path / "dask"
    proc = ptlab("run", str(spec), "--executor", "dask", "--scheduler", cluster.address,
                 "--results", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert len(serial) == 9 and statuses(out) == serial
    written = json.loads((out / "results.json").read_text())
    assert len(written["provenance"]["workers"]) == 2  # both workers took cells
    assert (out / "report.html").exists() and (out / "events.jsonl").stat().st_size > 0
    # Each cell's files came back from the worker that ran it, its captures too.
    assert (out / "cells" / "obfs4__gfw-fet").is_dir()
    captures_all_there(out)


def test_a_worker_killed_mid_run_loses_and_doubles_nothing(spec, serial, cluster, tmp_path):
    out = tmp_path / "killed"
    run = subprocess.Popen([sys.executable, "-m", "ptlab", "run", str(spec),
                            "--executor", "dask", "--scheduler", cluster.address,
                            "--results", str(out)], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and run.poll() is None:
            done = out / "results.json"
            if done.exists() and len(json.loads(done.read_text())["rows"]) >= 3:
                break
            time.sleep(0.5)
        victim = cluster.procs["w0"]
        os.kill(victim.pid, signal.SIGKILL)  # mid-run: its cell in flight is lost
        _, err = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err.decode()[-3000:]
    assert statuses(out) == serial


def test_two_labs_at_once_give_the_serial_statuses(spec, serial, tmp_path):
    out = tmp_path / "jobs"
    proc = ptlab("run", str(spec), "--jobs", "2", "--results", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert statuses(out) == serial
    written = json.loads((out / "results.json").read_text())
    assert written["settings"]["run.labs_at_once"] == 2  # speeds under contention, said
    assert "labs measured at once" in (out / "report.html").read_text()
    assert len(written["provenance"]["lab_id"].split(",")) == 2
    captures_all_there(out)


def test_an_interrupted_run_of_two_labs_leaves_no_lab_behind(spec, tmp_path):
    """SIGTERM (or Ctrl-C) mid-run: exit 130, the rows so far kept, and both workers'
    labs gone, even the lab of a worker that died first without taking it down (as
    one does when the run closes its cluster mid bring-up)."""
    from netns import cleanup, ownership

    out = tmp_path / "stopped"
    run = subprocess.Popen([sys.executable, "-m", "ptlab", "run", str(spec), "--jobs", "2",
                            "--results", str(out)], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    labs: dict[str, int] = {}  # lab -> its worker
    try:
        deadline = time.monotonic() + 300
        done = out / "results.json"
        while time.monotonic() < deadline and run.poll() is None:
            workers = {int(p) for p in subprocess.run(
                ["pgrep", "-P", str(run.pid)], capture_output=True, text=True).stdout.split()}
            for lab_id in cleanup.all_lab_ids():
                owner = ownership.read_owner(lab_id)
                if owner is not None and owner.pid in workers:
                    labs[lab_id] = owner.pid
            if len(labs) == 2 and done.exists() and json.loads(done.read_text())["rows"]:
                break
            time.sleep(0.3)
        os.kill(min(labs.values()), signal.SIGKILL)  # a worker dies, its lab left up
        time.sleep(1)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert len(labs) == 2, labs  # both labs were up when it was stopped
    assert run.returncode == 130, err.decode()[-2000:]
    assert "Traceback" not in err.decode()
    assert json.loads((out / "results.json").read_text())["rows"]
    assert {lab_id: lab_traces(lab_id) for lab_id in labs} == {lab_id: [] for lab_id in labs}
    # Nor the workers' files (WORK_ROOT/<run>/<worker pid>), the killed one's included.
    from ptlab.experiment.cellworker import WORK_ROOT

    assert not [d for pid in labs.values() for d in WORK_ROOT.glob(f"*/{pid}")]


def test_a_run_killed_outright_resumes_with_only_what_it_lacks(spec, serial, tmp_path):
    out = tmp_path / "resumed"
    run = subprocess.Popen([sys.executable, "-m", "ptlab", "run", str(spec),
                            "--results", str(out)], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        done = out / "results.json"
        while time.monotonic() < deadline and run.poll() is None:
            if done.exists() and len(json.loads(done.read_text())["rows"]) >= 4:
                break
            time.sleep(0.2)
        run.send_signal(signal.SIGKILL)  # no clean-up of its own: its lab is an orphan
        run.wait(30)
    finally:
        if run.poll() is None:
            run.kill()
    kept = statuses(out)
    assert 4 <= len(kept) < 9  # it lost at most the cell in flight
    assert ptlab("lab", "down").returncode == 0  # the orphan, as after any crash
    again = ptlab("run", str(spec), "--resume", str(out), timeout=600)
    assert again.returncode == 0, again.stderr
    assert statuses(out) == serial
    written = json.loads(done.read_text())
    assert len(written["provenance"]["resumed"]) == 1
    # The kept cells were not run again: their rows are the first run's.
    first = {f"{r['transport']} × {r['censor']}": r["cell_seconds"] for r in written["rows"]}
    assert all(first[c] is not None for c in kept)
    # Another spec is refused in one line, unless forced.
    other = spec.with_name("other.toml")
    other.write_text(SPEC.replace("count = 2", "count = 3"))
    refused = ptlab("run", str(other), "--resume", str(out))
    assert refused.returncode == 2
    assert "the spec and the settings differ from the run it holds" in refused.stderr


def test_shards_merge_into_the_serial_run(spec, serial, tmp_path):
    parts = [tmp_path / f"shard{k}" for k in (1, 2)]
    for k, out in enumerate(parts, 1):
        proc = ptlab("run", str(spec), "--shard", f"{k}/2", "--results", str(out),
                     timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert len(statuses(out)) == (5 if k == 1 else 4)
    merged = tmp_path / "merged"
    proc = ptlab("merge", *map(str, parts), "--out", str(merged))
    assert proc.returncode == 0, proc.stderr
    assert statuses(merged) == serial
    twice = ptlab("merge", str(parts[0]), str(parts[0]), "--out", str(tmp_path / "x"))
    assert twice.returncode == 2 and "counted twice" in twice.stderr
