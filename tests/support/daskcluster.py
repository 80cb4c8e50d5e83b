"""A Dask cluster on this machine as a real one runs: `dask scheduler` and `dask
worker` processes (not threads of the test), on loopback. Used by the scale tests
and benchmarks/scale_matrix.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from netns import cleanup

REPO = Path(__file__).resolve().parents[2]


class LocalDaskCluster:
    """A scheduler and `workers` single-threaded workers; with ``nanny=False`` a
    killed worker stays dead, as a lost machine does."""

    def __init__(self, tmp: Path, workers: int = 2, nanny: bool = False) -> None:
        from distributed import Client

        self.file = tmp / "scheduler.json"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        dask = str(Path(sys.executable).with_name("dask"))
        self.procs["scheduler"] = self._start(
            dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
            "--scheduler-file", str(self.file))
        deadline = time.monotonic() + 60
        while not self.file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        for i in range(workers):
            self.procs[f"w{i}"] = self._start(
                dask, "worker", "--scheduler-file", str(self.file), "--nthreads", "1",
                "--no-dashboard", "--name", f"w{i}", *([] if nanny else ["--no-nanny"]))
        with Client(scheduler_file=str(self.file), timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)

    @staticmethod
    def _start(*argv: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(argv), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd=REPO)

    @property
    def address(self) -> str:
        return str(json.loads(self.file.read_text())["address"])

    def stop(self) -> None:
        """The workers first, then the scheduler: a worker told to stop while its
        scheduler goes too can hang in its close, retrying the scheduler until a
        30 s timeout (seen 1 time in 3 after a run; CI's teardown took 60 s)."""
        workers = [p for name, p in self.procs.items() if name != "scheduler"]
        self._terminate(workers)
        self._terminate([self.procs["scheduler"]])
        cleanup.down_orphans()  # the labs of a killed worker

    @staticmethod
    def _terminate(procs: list[subprocess.Popen[bytes]]) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
