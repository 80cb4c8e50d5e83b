"""ptlab compare on real runs: two runs of the default experiment agree on every
cell's status, and a spec change that lets obfs4 through FET shows as a change."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ptlab.common.results import SCHEMA_VERSION

from .conftest import REPO, ptlab, spawn_ptlab

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def quick_run(out: Path, spec: Path) -> None:
    proc = ptlab("run", str(spec), "--quick", "--results", str(out), timeout=400)
    assert (out / "results.json").exists(), proc.stderr


def quick_runs_side_by_side(runs: dict[Path, Path]) -> None:
    """Quick runs of several specs at once, each in a lab of its own (results dir ->
    spec). A quick run spends most of its minute waiting on its clients' timers (about
    a fifth of a CPU), so three side by side take about as long as one."""
    procs = {out: spawn_ptlab("run", str(spec), "--quick", "--results", str(out),
                              stderr=subprocess.PIPE)
             for out, spec in runs.items()}
    try:
        errors = {out: proc.communicate(timeout=400)[1] for out, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for out in runs:
        assert (out / "results.json").exists(), errors[out]


def test_compare_two_default_runs_then_a_spec_change(tmp_path):
    default = REPO / "experiments" / "default.toml"
    # The spec change: FET never fires. Only the cells it can change are run
    # (the default's obfs4 rows under its gfw-fet column), to keep CI short.
    text = default.read_text()
    rule = 'policy.rules = [{ detector = "fet", action = "residual", probability = 1.0 }]'
    assert rule in text
    changed = tmp_path / "fet-p0.toml"
    changed.write_text(
        '[experiment]\nname = "default"\nseed = 7\n\n'
        "[transports.obfs4]\n\n[transports.obfs4proxy]\n\n"
        '[censors.gfw-fet]\nprofile = "gfw-fet-2021"\n'
        + rule.replace("1.0 }", "0.0 }") + "\nactions.residual.seconds = [20]\n")
    quick_runs_side_by_side({tmp_path / "a": default, tmp_path / "b": default,
                             tmp_path / "c": changed})
    same = ptlab("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-on-change")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "9 cells in both; 0 changed status" in same.stdout
    assert "spec: no differences" in same.stdout

    diff = ptlab("compare", str(tmp_path / "a"), str(tmp_path / "c"),
                 "--html", str(tmp_path / "compare.html"))
    assert diff.returncode == 0, diff.stderr
    # Both obfs4 rows (ours and obfs4proxy) get through once FET never fires.
    assert "2 changed status" in diff.stdout, diff.stdout
    changed_cells = {line[2:].split("  ")[0] for line in diff.stdout.splitlines()
                     if line.startswith("! ")}
    assert changed_cells == {"obfs4 × gfw-fet", "obfs4proxy × gfw-fet"}
    assert "censors.gfw-fet.policy.rules" in diff.stdout
    written = json.loads((tmp_path / "c" / "results.json").read_text())
    assert written["schema_version"] == SCHEMA_VERSION
    assert "changed status" in (tmp_path / "compare.html").read_text()


def test_a_quick_and_a_full_run_of_one_spec_compare_with_their_workloads(tmp_path):
    spec = tmp_path / "small.toml"
    spec.write_text('[experiment]\nname = "small"\n[transports.direct]\n[censors.none]\n'
                    "[workloads.benign]\nenabled = false\n")
    quick_run(tmp_path / "quick", spec)
    proc = ptlab("run", str(spec), "--results", str(tmp_path / "full"), timeout=400)
    assert proc.returncode == 0, proc.stderr
    out = ptlab("compare", str(tmp_path / "full"), str(tmp_path / "quick")).stdout
    lines = out.splitlines()
    assert lines[1] == ("warning: the runs' workloads differ (workloads.bulk.size 2,000,000 "
                        "-> 1,000,000; workloads.latency.count 10 -> 3): their goodput and "
                        "latency do not compare"), out
    assert "settings: 3 differ" in out and "experiment.repetitions: 3 -> 1" in out
    assert "spec: no differences" in out and "provenance: no differences" in out
    quick = json.loads((tmp_path / "quick" / "results.json").read_text())
    assert quick["setting_origins"]["workloads.bulk.size"] == "--quick"
    assert quick["settings"]["workloads.bulk.timeout_s"] == 30.0  # a default, by its value
