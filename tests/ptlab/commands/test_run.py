"""`ptlab run --check` (and --json), and one clear line, never a traceback, for every
bad input a person gives the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

MISSING_TOOL = """
[transports.mytool]
kind = "external"
binaries = ["ptl-no-such-server", "ptl-no-such-client"]
server = "ptl-no-such-server --port {server_port}"
client = "ptl-no-such-client --socks {socks_port}"

[censors.none]
"""


def ptlab(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ptlab", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ptlab: "), proc.stderr
    return lines[0]


def test_check_catches_a_binary_the_row_needs(tmp_path):
    spec = tmp_path / "mine.toml"
    spec.write_text(MISSING_TOOL)
    line = one_line(ptlab("run", "--check", str(spec)))
    assert "transports.mytool: ptl-no-such-server, ptl-no-such-client not installed" in line
    assert "install them, or fix the row's `binaries`" in line
    as_json = ptlab("run", "--check", "--json", str(spec))
    assert as_json.returncode == 2
    report = json.loads(as_json.stdout)
    assert report["ok"] is False and "not installed" in report["error"]


def test_check_json_counts_the_cells_with_their_baselines(tmp_path):
    spec = tmp_path / "two.toml"
    spec.write_text('[transports.direct]\n[transports.obfs4]\n'
                    '[censors.ip-blocklist]\n[censors.gfw-fet]\nprofile = "gfw-fet-2021"\n')
    proc = ptlab("run", "--check", "--json", str(spec))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    # 2 x 2 cells, and each row's no-censor baseline as a cell of its own.
    assert (report["matrix_cells"], report["baseline_cells"], report["cells"]) == (4, 2, 6)
    assert report["settings"]["workloads.bulk.size"] == 2_000_000
    text = ptlab("run", "--check", str(spec))
    assert "= 4 cells (+2 no-censor baselines)" in text.stdout


def test_check_warns_when_the_estimate_is_past_the_budget(tmp_path, monkeypatch, capsys):
    """Cells past experiment.budget_s become ERROR: --check says so before a run.
    (In-process: the command's own functions, without three interpreter starts.)"""
    from censor_sim.profile import available
    from ptlab import plugins
    from ptlab.commands.run import check_report, check_spec
    from ptlab.experiment.spec import load_spec

    monkeypatch.chdir(tmp_path)  # no earlier runs' times in the estimate
    body = ('[transports.direct]\n[censors.ip-blocklist]\n'
            '[workloads.bulk]\nsize = 2_000_000\n')
    reports, specs = {}, {}
    for name, budget in (("over", 5), ("within", 600)):
        path = tmp_path / f"{name}.toml"
        path.write_text(f"[experiment]\nbudget_s = {budget}\n" + body)
        specs[name] = load_spec(path, plugins.available(), available())
        reports[name] = check_report(specs[name])
    assert 5 < reports["over"]["estimated_seconds"] < 600
    past = [w for w in reports["over"]["warnings"] if "budget_s" in w]
    assert past and "(5 s)" in past[0] and "would not run (ERROR)" in past[0]
    assert not [w for w in reports["within"]["warnings"] if "budget_s" in w]
    assert check_spec(specs["over"]) == 0
    assert "warning: the estimate is past experiment.budget_s (5 s)" in capsys.readouterr().out


@pytest.mark.parametrize("what", ["transports", "profiles", "workloads"])
def test_list_json(what):
    proc = ptlab("list", what, "--json")
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)
    assert records and all("name" in r for r in records)
    if what == "workloads":
        bulk = next(r for r in records if r["name"] == "bulk")
        assert bulk["settings"]["bulk.size"] == 2_000_000  # the real default, stated
        benign = next(r for r in records if r["name"] == "benign")
        assert "quic" in benign["measures"]


def test_list_workloads_states_the_defaults():
    assert "bulk.size (default 2,000,000)" in ptlab("list", "workloads").stdout


def test_a_directory_and_a_binary_file_are_one_line_each(tmp_path):
    assert "a directory, not a spec file" in one_line(ptlab("run", "--check", str(tmp_path)))
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'[experiment]\nname = "caf\xe9"\n')
    assert "not UTF-8 text" in one_line(ptlab("run", "--check", str(bad)))


@pytest.mark.parametrize(("spec", "command"), [
    ("ml-dataset.toml", "ptlab dataset SPEC OUT"),
    ("snowflake-scale.toml", "ptlab export shadow SPEC OUT"),
])
def test_another_format_names_the_command_that_reads_it(spec, command):
    line = one_line(ptlab("run", "--check", f"experiments/{spec}"))
    assert "not an experiment spec" in line and command in line


def test_bare_ptlab_prints_help():
    proc = ptlab()
    assert proc.returncode == 0 and proc.stdout.startswith("usage: ptlab")
    assert "run an experiment spec" in proc.stdout


def test_compare_with_one_run_is_one_line(tmp_path):
    assert "at least two results directories" in one_line(ptlab("compare", str(tmp_path)))


def test_run_help_documents_the_exit_statuses():
    out = ptlab("run", "-h").stdout
    for line in ("0    every cell ran", "1    a cell's status", "3    a bulk download",
                 "4    a cell could not be measured"):
        assert line in out
    assert "--junit FILE" in out


def test_help_texts_read_as_text():
    assert "95 %%" not in ptlab("evaluate", "-h").stdout
    for group in (("lab", "down"), ("lab", "exec"), ("vm", "up"), ("vm", "run")):
        help_text = ptlab(*group, "-h").stdout
        # A description paragraph of its own, not only the usage line.
        assert len(help_text.split("\n\n")) >= 3, help_text


def test_the_proxy_help_has_a_version_and_says_what_each_flag_does():
    proc = ptlab("snowflake-proxy", "-h")
    assert proc.returncode == 0 and "``" not in proc.stdout
    flags = [line.split()[0] for line in proc.stdout.splitlines()
             if line.startswith("  -") and not line.startswith("  -h")]
    assert "-version" in flags and "-unsafe-logging" in flags
    # Every flag is followed by words on its line or the next: none is bare.
    blocks = proc.stdout.split("\n  -")[1:]
    bare = [b.split()[0] for b in blocks if len(b.split()) < 3]
    assert not bare, bare
    version = ptlab("snowflake-proxy", "-version")
    assert version.returncode == 0 and version.stdout.startswith("ptlab snowflake-proxy")


def test_results_go_under_the_current_directory(tmp_path):
    import os

    from ptlab.commands.common import new_run_dir, results_root

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert results_root() == tmp_path / "results"
        assert new_run_dir("vm-").parent == tmp_path / "results"
    finally:
        os.chdir(here)
