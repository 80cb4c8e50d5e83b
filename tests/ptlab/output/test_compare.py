"""ptlab compare: status and goodput changes cell by cell, spec and provenance diffs."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from ptlab.common.results import write_results
from ptlab.output.compare import CellChange, compare, html_report, text_report
from tests.support.rows import blocked_row, reachable_row, results_of

REPO = Path(__file__).resolve().parents[3]


def run_of(fet_status: str = "blocked", goodput=(41.0, 42.0, 43.0), seed: int = 7):
    rows = [reachable_row(goodput_samples=list(goodput)),
            (blocked_row(censor="gfw-fet") if fet_status == "blocked"
             else reachable_row(censor="gfw-fet"))]
    return results_of(rows, spec={"experiment": {"seed": seed}},
                      provenance={"git_sha": "abc", "hostname": "a", "kernel": "6.1"})


def test_identical_runs_show_no_status_differences():
    cmp = compare(run_of(), run_of())
    assert cmp.status_changes == [] and cmp.spec_diffs == [] and cmp.provenance_diffs == []
    assert "0 changed status" in text_report(cmp)


def test_a_spec_change_that_flips_a_cell_shows_it():
    cmp = compare(run_of(), run_of("reachable", seed=8))
    assert [c.cell for c in cmp.status_changes] == [("obfs4", "gfw-fet")]
    assert cmp.spec_diffs == [("experiment.seed", 7, 8)]
    text = text_report(cmp)
    assert "1 changed status" in text and "! obfs4 × gfw-fet" in text
    assert "changed" in html_report(cmp)


def test_goodput_ratio_is_on_the_log_scale_with_a_welch_interval():
    a, b = reachable_row(goodput_samples=[10.0, 11.0, 12.0]), reachable_row(
        goodput_samples=[20.0, 22.0, 24.0])
    ratio, ci = CellChange(("x", "y"), a, b).goodput_ratio()
    assert ratio == pytest.approx(2.0)
    assert ci[0] < 2.0 < ci[1] and ci[0] > 1.5  # clearly faster, and the CI says so
    one = CellChange(("x", "y"), a, reachable_row(goodput_samples=[20.0])).goodput_ratio()
    assert one[1] is None and math.isclose(one[0], 20 / (10 * 11 * 12) ** (1 / 3))


def test_volatile_provenance_is_not_a_difference():
    b = run_of()
    b.provenance["hostname"] = "another"
    b.provenance["kernel"] = "6.12"
    assert compare(run_of(), b).provenance_diffs == [("kernel", "6.1", "6.12")]


def test_cli_writes_text_and_html_and_can_fail_ci(tmp_path: Path):
    for name, results in (("a", run_of()), ("b", run_of("reachable", seed=8))):
        write_results(results, tmp_path / name)
    out = subprocess.run([sys.executable, "-m", "ptlab", "compare", str(tmp_path / "a"),
                          str(tmp_path / "b"), "--html", str(tmp_path / "c.html"),
                          "--fail-on-change"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 1 and "1 changed status" in out.stdout
    assert (tmp_path / "c.html").read_text().startswith("<!DOCTYPE html>")
    one = subprocess.run([sys.executable, "-m", "ptlab", "compare", str(tmp_path / "a")],
                         capture_output=True, text=True, cwd=REPO)
    assert one.returncode == 2 and "at least two" in one.stderr


def settings_run(bulk: int, reps: int, origin: str, lab_id: str):
    res = run_of()
    res.settings = {"experiment.repetitions": reps, "experiment.seed": 7,
                    "workloads.bulk.size": bulk, "workloads.latency.count": 10,
                    "run.timeout_scale": 1.0}
    res.setting_origins = {k: origin if k != "experiment.seed" else "spec"
                           for k in res.settings}
    res.provenance |= {"lab_id": lab_id, "machines": "network namespaces on this machine"}
    return res


def test_a_quick_and_a_full_run_of_one_spec_show_their_workloads_differ():
    full = settings_run(2_000_000, 3, "default", "ab12")
    quick = settings_run(1_000_000, 1, "--quick", "cd34")
    cmp = compare(full, quick)
    # Effective settings, named by their values; no lab id; no spec difference.
    assert cmp.setting_diffs == [("experiment.repetitions", 3, 1),
                                 ("workloads.bulk.size", 2_000_000, 1_000_000)]
    assert cmp.spec_diffs == [] and cmp.provenance_diffs == []
    text = text_report(cmp)
    assert text.splitlines()[1] == (
        "warning: the runs' workloads differ (workloads.bulk.size 2,000,000 -> 1,000,000): "
        "their goodput and latency do not compare")
    assert "  workloads.bulk.size: 2,000,000 -> 1,000,000" in text
    assert "ab12" not in text and "None" not in text
    assert "workloads differ" in html_report(cmp)


def test_runs_without_recorded_settings_fall_back_to_the_spec_and_say_so():
    cmp = compare(run_of(), run_of(seed=8))
    assert not cmp.settings_recorded
    assert "settings: not recorded by both runs" in text_report(cmp)


def test_compare_json_is_what_the_text_says(tmp_path: Path):
    import json

    for name, res in (("a", settings_run(2_000_000, 3, "default", "x")),
                      ("b", settings_run(1_000_000, 1, "--quick", "y"))):
        write_results(res, tmp_path / name)
    proc = subprocess.run([sys.executable, "-m", "ptlab", "compare", "--json",
                           str(tmp_path / "a"), str(tmp_path / "b")],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [cmp] = json.loads(proc.stdout)
    assert cmp["workload_warning"].startswith("warning: the runs' workloads differ")
    assert {d["key"] for d in cmp["setting_diffs"]} == {"experiment.repetitions",
                                                         "workloads.bulk.size"}
    assert [(c["transport"], c["censor"], c["status_changed"]) for c in cmp["cells"]] == [
        ("obfs4", "none", False), ("obfs4", "gfw-fet", False)]
