"""`ptlab runs` and results/index.html: every run under a results directory, newest
first, each linking its report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ptlab.common.results import write_results
from ptlab.output.runindex import INDEX_HTML, find_runs, write_index
from tests.support.rows import blocked_row, error_row, reachable_row, results_of

REPO = Path(__file__).resolve().parents[3]


def two_runs(root: Path) -> None:
    old = results_of([reachable_row(repetitions_ok=3), blocked_row(repetitions=3,
                                                                   repetitions_ok=0)],
                     spec={"experiment": {"name": "default"}},
                     provenance={"git_sha": "0123456789abcdef", "git_dirty": False})
    write_results(old, root / "20240101-000000")
    (root / "20240101-000000" / "report.html").write_text("<html></html>")
    new = results_of([error_row()], started="2024-02-01T00:00:00+00:00",
                     spec={"experiment": {"name": "meek"}},
                     provenance={"git_sha": "fedcba9876543210", "git_dirty": True})
    write_results(new, root / "nested" / "run2")
    (root / "broken").mkdir()
    (root / "broken" / "results.json").write_text("{not json")


def test_runs_are_listed_newest_first_with_their_outcome(tmp_path):
    two_runs(tmp_path)
    runs = find_runs(tmp_path)
    assert [r.directory for r in runs] == ["nested/run2", "20240101-000000", "broken"]
    assert runs[0].spec == "meek" and runs[0].statuses == {"ERROR": 1}
    assert runs[1].summary == "2 cells: 1 blocked, 1 reachable; 3/6 repetitions got through"
    assert runs[2].error is not None and runs[2].summary.startswith("unreadable:")


def test_the_index_links_every_report(tmp_path):
    two_runs(tmp_path)
    html = write_index(tmp_path).read_text()
    assert '<a href="20240101-000000/report.html">' in html
    assert "nested/run2" in html and "fedcba9876 (dirty)" in html
    assert (tmp_path / INDEX_HTML).exists()


def test_ptlab_runs_prints_text_and_json(tmp_path):
    two_runs(tmp_path)

    def runs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ptlab", "runs", str(tmp_path), *args],
                              capture_output=True, text=True, cwd=REPO, timeout=60)

    text = runs()
    assert text.returncode == 0, text.stderr
    assert "0123456789" in text.stdout and "1 blocked, 1 reachable" in text.stdout
    data = json.loads(runs("--json").stdout)
    assert [d["spec"] for d in data] == ["meek", "default", "?"]
    assert data[1]["repetitions_ok"] == 3 and data[1]["repetitions"] == 6
    assert runs("--index").returncode == 0 and (tmp_path / INDEX_HTML).exists()
    missing = subprocess.run([sys.executable, "-m", "ptlab", "runs", str(tmp_path / "no")],
                             capture_output=True, text=True, cwd=REPO, timeout=60)
    assert missing.returncode == 2 and "no such results directory" in missing.stderr
