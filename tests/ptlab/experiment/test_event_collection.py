"""The runner keeps every event its processes log, once, as they log them (no root)."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

from ptcommon.events import event_line
from ptlab.experiment.backend import LabBackend
from ptlab.experiment.runner import LabRunner
from ptlab.experiment.spec import Spec
from tests.support.events import lost_events


class FakeProcess:
    """A process whose log grows as the test says."""

    def __init__(self, name: str, log: Path) -> None:
        self.name, self.argv, self.log = name, [name], log
        log.write_text("")

    def write(self, text: str) -> None:
        with open(self.log, "a") as f:
            f.write(text)

    def log_text(self, this_run_only: bool = False) -> str:
        return self.log.read_text()

    def running(self) -> bool:
        return True

    def stop(self, timeout: float = 3.0) -> int | None:
        return 0

    def wait_log(self, pattern: str, timeout: float = 10.0, what: str | None = None,
                 hint: str = "") -> None:
        pass


def runner(out: Path) -> LabRunner:
    backend = mock.create_autospec(LabBackend, instance=True)
    return LabRunner(Spec(path=None, name="t"), out, backend=backend)


def test_a_long_lived_process_is_read_from_where_the_last_read_stopped(tmp_path: Path):
    r = runner(tmp_path)
    broker = FakeProcess("broker", tmp_path / "broker.log")
    broker.write(event_line("broker", "ready") + "\nplain text, not an event\n")
    r._collect_events("lab", [broker])
    broker.write(event_line("broker", "stats", clients=3) + "\n"
                 + event_line("broker", "half")[:20])  # still being written
    r._collect_events("lab", [broker])
    kept = [json.loads(x) for x in r.events_path.read_text().splitlines()]
    assert [(e["event"], e["cell"]) for e in kept] == [("ready", "lab"), ("stats", "lab")]
    assert kept[1]["clients"] == 3
    # The half line is read once it is whole, and nothing is kept twice.
    broker.write(event_line("broker", "half")[20:] + "\n")
    r._collect_events("lab", [broker])
    assert [json.loads(x)["event"] for x in r.events_path.read_text().splitlines()] == [
        "ready", "stats", "half"]
    assert lost_events(tmp_path) == []


def test_the_checker_reports_a_line_the_runner_cannot_keep(tmp_path: Path):
    r = runner(tmp_path)
    p = FakeProcess("meek-server", tmp_path / "meek.log")
    # The meek server's old stats line: no ts, no component.
    p.write(json.dumps({"event": "stats", "sessions": 2}) + "\n")
    r._collect_events("cell", [p])
    assert lost_events(tmp_path) == ['meek.log: {"event": "stats", "sessions": 2}']


def test_the_checker_leaves_lines_stamped_after_the_read_for_later(tmp_path: Path):
    r = runner(tmp_path)
    p = FakeProcess("benign", tmp_path / "benign.log")
    p.write(event_line("benign", "binary") + "\n")
    r._collect_events("lab", [p])
    late = json.loads(event_line("benign", "binary"))
    late["ts"] += 60  # written after the runner's last read
    p.write(json.dumps(late) + "\n")
    assert lost_events(tmp_path, before=late["ts"] - 1) == []
    assert len(lost_events(tmp_path)) == 1
