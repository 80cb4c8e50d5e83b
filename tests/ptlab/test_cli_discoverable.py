"""What a newcomer finds without reading the source: version, lists, --check, help,
and a suggestion for a near-miss name."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from censor_sim.profile import ProfileError, available, load_profile
from ptlab import cli, plugins
from ptlab.common import peers
from ptlab.experiment.spec import SpecError, parse_spec

REPO = Path(__file__).resolve().parents[2]


def ptlab(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ptlab", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=60,
                          env=None if env is None else {**os.environ, **env})


def test_version():
    out = ptlab("--version")
    assert out.returncode == 0 and out.stdout.startswith("ptlab ") and out.stdout.split()[1]


def test_list_transports_names_every_row_with_its_description():
    lines = ptlab("list", "transports").stdout.splitlines()
    assert [line.split()[0] for line in lines] == plugins.available()
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)


def test_list_profiles_gives_each_profile_its_source():
    out = ptlab("list", "profiles").stdout
    for name in available():
        assert f"\n{name}\n" in f"\n{out}"
    assert out.count("    source: ") == len(available())
    assert "Wu et al." in out or "USENIX Security 2023" in out  # gfw-fet-2021's paper


def test_list_workloads():
    out = ptlab("list", "workloads").stdout
    for name in ("bootstrap", "bulk", "latency", "benign"):
        assert out.startswith(name) or f"\n{name} " in out


def test_run_check_validates_without_a_lab(tmp_path):
    ok = ptlab("run", "--check", "experiments/default.toml")
    assert ok.returncode == 0, ok.stderr
    assert "9 cells" in ok.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text((REPO / "experiments/default.toml").read_text()
                   .replace('profile = "gfw-fet-2021"', 'profile = "gfw-fet-2012"'))
    out = ptlab("run", "--check", str(bad))
    assert out.returncode == 2
    assert "did you mean 'gfw-fet-2021'?" in out.stderr


def test_run_check_names_the_rows_the_tools_found_cannot_run(tmp_path):
    # The wheel's sing-box, not one built by scripts/setup --peers (which has with_utls).
    ok = ptlab("run", "--check", "experiments/protocols-2026.toml",
               env={peers.ENV_DIR: str(tmp_path / "none")})
    assert ok.returncode == 0, ok.stderr
    skipped = [line for line in ok.stdout.splitlines() if line.startswith("skipped: ")]
    assert len(skipped) == 1, ok.stdout  # the wheel's sing-box lacks only with_utls
    assert skipped[0].startswith("skipped: transports.sb-vless-reality: needs sing-box "
                                 "built with with_utls; ")


def test_run_check_catches_a_bad_override(tmp_path):
    bad = tmp_path / "bad.toml"
    text = (REPO / "experiments/default.toml").read_text()
    assert "actions.residual.seconds = [20]" in text
    bad.write_text(text.replace("actions.residual.seconds = [20]",
                                "actions.residual.secnds = [20]"))
    out = ptlab("run", "--check", str(bad))
    assert out.returncode == 2, out
    assert "unknown parameter (did you mean 'seconds'?)" in out.stderr


def test_few_repetitions_warn_before_a_run():
    spec = parse_spec({"experiment": {"repetitions": 2}, "transports": {"direct": {}},
                       "censors": {"none": {}}})
    assert any("at least 3 repetitions" in w for w in spec.warnings)
    assert not parse_spec({"transports": {"direct": {}}, "censors": {"none": {}}}).warnings


@pytest.mark.parametrize(("data", "suggestion"), [
    ({"experimnt": {}}, "'experiment'"),
    ({"workloads": {"bulk": {"sise": 1}}}, "'size'"),
    ({"transports": {"obfs5": {}}}, "'obfs4'"),
])
def test_unknown_names_get_a_suggestion(data, suggestion):
    base = {"transports": {"direct": {}}, "censors": {"none": {}}}
    with pytest.raises(SpecError, match=f"did you mean {suggestion}"):
        parse_spec(base | data, known_transports=plugins.available(),
                   known_profiles=available())


def test_profile_override_typos_get_a_suggestion():
    with pytest.raises(ProfileError, match="did you mean"):
        load_profile("gfw-fet-2021", {"policy": {"rulez": []}})


def _subparsers(parser: argparse.ArgumentParser, path: str = "ptlab"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub, helps.get(name)
                yield from _subparsers(sub, f"{path} {name}")


def test_every_subcommand_has_help_text():
    """Each subcommand has a line in its parent's listing, and its own -h says more
    than the usage line."""
    found = list(_subparsers(cli.build_parser()))
    assert len(found) > 10
    no_line = [path for path, _, short in found if not short]
    assert not no_line, f"no help line in the parent's listing: {no_line}"
    bare = [path for path, sub, short in found
            if not sub.description and not any(a.help for a in sub._actions
                                               if a.dest != "help")]
    assert not bare, f"-h shows nothing but usage: {bare}"
