"""Result schema, CI maths, writers and provenance."""

from __future__ import annotations

import csv
import hashlib
import json
import time
from pathlib import Path

import pytest

from ptlab.common import results as R
from ptlab.common.results import (
    SCHEMA_VERSION,
    Results,
    Row,
    csv_columns,
    load_results,
    provenance,
    write_results,
)
from tests.support.rows import blocked_row, error_row, reachable_row, results_of, skipped_row


def sample_results() -> Results:
    rows = [
        reachable_row(bootstrap_s=0.8, probes_sent=2, probe_verdicts={"benign": 2},
                      repetitions_ok=3, reachability_ci95=(0.44, 1.0),
                      repetition_outcomes=[
                          {"repetition": i + 1, "ok": True, "goodput_mbit_s": g,
                           "seconds": 0.2, "bytes": 1_000_000, "error": None,
                           "started": 1700000000.0 + i}
                          for i, g in enumerate([41.0, 42.0, 43.0])],
                      benign_total=10, benign_blocked=0,
                      benign_detail={"https": {"ok": 10, "blocked": 0}},
                      censor_cpu_per_flow_ms=0.12, censor_counters={"flows": 12},
                      notes=['a, note with "quotes"']),
        blocked_row(repetitions=3, bytes_before_block=1234, time_to_detection_s=0.05,
                    action="rst"),
        error_row(),
    ]
    res = results_of(rows, spec={"seed": 7, "transports": ["obfs4", "meek"]},
                     provenance={"git_sha": "abc123", "seeds": {"run": 7}})
    res.settings = {"experiment.repetitions": 1, "workloads.bulk.size": 1_000_000}
    res.setting_origins = {"experiment.repetitions": "--quick",
                           "workloads.bulk.size": "--quick"}
    return res


# --- Row -------------------------------------------------------------------------------------


def test_row_rejects_unknown_status_and_expectation() -> None:
    with pytest.raises(ValueError, match="status"):
        Row(transport="t", censor="c", status="up")
    with pytest.raises(ValueError, match="expectation"):
        Row(transport="t", censor="c", status="blocked", expectation="maybe")


def test_row_from_dict_rejects_unknown_fields() -> None:
    d = Row(transport="t", censor="c", status="blocked").to_dict()
    d["bogus"] = 1
    with pytest.raises(ValueError, match="bogus"):
        Row.from_dict(d)


# --- write / load ----------------------------------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    res = sample_results()
    write_results(res, tmp_path)
    back = load_results(tmp_path)
    assert back == res
    assert isinstance(back.rows[0].goodput_ci95, tuple)
    assert back.rows[2].error == "bridge not ready"


def test_json_layout(tmp_path: Path) -> None:
    write_results(sample_results(), tmp_path)
    text = (tmp_path / "results.json").read_text()
    assert text.startswith('{\n  "schema_version": 4,')
    data = json.loads(text)
    assert data["rows"][0]["goodput_ci95"] == [40.0, 44.0]
    assert data["provenance"]["git_sha"] == "abc123"
    assert data["settings"]["workloads.bulk.size"] == 1_000_000
    assert data["setting_origins"]["workloads.bulk.size"] == "--quick"


def test_csv_is_long_one_line_per_repetition(tmp_path: Path) -> None:
    res = sample_results()
    write_results(res, tmp_path)
    with open(tmp_path / "results.csv", newline="") as fh:
        records = list(csv.DictReader(fh))
    assert list(records[0]) == csv_columns(res)
    assert csv_columns(res)[-2:] == ["setting_experiment_repetitions",
                                     "setting_workloads_bulk_size"]
    # Three repetitions of the reachable cell, one line each for the other two.
    assert [(r["transport"], r["censor"], r["repetition"]) for r in records] == [
        ("obfs4", "none", "1"), ("obfs4", "none", "2"), ("obfs4", "none", "3"),
        ("obfs4", "gfw", ""), ("meek", "none", "")]
    first = records[0]
    assert first["schema_version"] == "4" and first["git_sha"] == "abc123"
    # Every line carries the run's effective settings.
    assert {r["setting_workloads_bulk_size"] for r in records} == {"1000000"}
    assert first["goodput_mbit_s"] == "41.0" and first["repetition_ok"] == "true"
    assert first["cell_goodput_ci95_lo_mbit_s"] == "40.0"
    assert first["expectation_met"] == "true" and first["latency_samples_n"] == "3"
    assert records[4]["cell_goodput_geomean_mbit_s"] == ""
    # No cell carries JSON: nothing to parse after reading.
    assert not any(v.startswith(("[", "{")) for r in records for v in r.values())


def test_pandas_reads_the_long_csv_with_no_custom_parsing(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    write_results(sample_results(), tmp_path)
    df = pd.read_csv(tmp_path / "results.csv")
    assert len(df) == 5
    assert str(df["goodput_mbit_s"].dtype) == "float64"
    assert str(df["schema_version"].dtype) == "int64"
    assert df["repetition_ok"].dropna().tolist() == [True, True, True]
    per_cell = df.groupby(["transport", "censor"])["goodput_mbit_s"].mean()
    assert per_cell[("obfs4", "none")] == pytest.approx(42.0)


def test_write_refuses_nan(tmp_path: Path) -> None:
    res = sample_results()
    res.rows[0].goodput_mbit_s = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        write_results(res, tmp_path)
    assert not (tmp_path / "results.json").exists()


@pytest.mark.parametrize("version", [None, 0, 5, "1"])
def test_bad_schema_version_raises(tmp_path: Path, version: object) -> None:
    write_results(sample_results(), tmp_path)
    path = tmp_path / "results.json"
    data = json.loads(path.read_text())
    if version is None:
        del data["schema_version"]
    else:
        data["schema_version"] = version
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="schema_version") as exc:
        load_results(tmp_path)
    assert "\n" not in str(exc.value)


def test_invalid_json_raises_value_error(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_results(tmp_path)


def test_schema_version_constant() -> None:
    assert SCHEMA_VERSION == 4
    assert Results(started="a", finished="b", spec_path="s").schema_version == 4


def test_results_of_schema_3_load_with_no_settings(tmp_path: Path) -> None:
    def older(data: dict) -> None:
        del data["settings"], data["setting_origins"], data["selection"]
        for row in data["rows"]:
            for key in ("cell_seconds", "benign_lab_failures", "benign_unjudged"):
                del row[key]

    rewrite_as(tmp_path, 3, older)
    old = load_results(tmp_path)
    assert old.settings == {} and old.rows[0].benign_lab_failures == {}


def test_a_skipped_row_round_trips_with_its_reason(tmp_path: Path) -> None:
    write_results(results_of([skipped_row()]), tmp_path)
    back = load_results(tmp_path).rows[0]
    assert back.status == "skipped" and back.error == "needs sing-box built with with_utls"
    assert back.expectation_met is None
    assert "skipped" in (tmp_path / "results.csv").read_text()


def test_a_version_2_file_still_loads(tmp_path: Path) -> None:
    write_results(sample_results(), tmp_path)
    path = tmp_path / "results.json"
    data = json.loads(path.read_text())
    data["schema_version"] = 2
    path.write_text(json.dumps(data))
    assert load_results(tmp_path).schema_version == 2


def test_a_version_1_file_still_loads(tmp_path: Path) -> None:
    """Runs made before k-of-n and flow roles stay readable (compare needs them)."""
    write_results(sample_results(), tmp_path)
    path = tmp_path / "results.json"
    data = json.loads(path.read_text())
    data["schema_version"] = 1
    for row in data["rows"]:
        for key in ("repetitions_ok", "reachability_ci95", "repetition_outcomes",
                    "latency_ci_level", "detection_data_packet",
                    "detection_after_first_byte_s", "collateral_detections",
                    "probe_detections"):
            row.pop(key)
    path.write_text(json.dumps(data))
    back = load_results(tmp_path)
    assert back.schema_version == 1 and back.rows[0].repetitions_ok is None


# --- provenance ------------------------------------------------------------------------------


def test_provenance(tmp_path: Path) -> None:
    profile = tmp_path / "gfw.toml"
    profile.write_bytes(b'source = "x"\n')
    prov = provenance({"run": 7}, [profile], ["definitely-not-a-binary-ptlab"])
    assert prov["seeds"] == {"run": 7}
    assert prov["profiles"] == {str(profile): hashlib.sha256(b'source = "x"\n').hexdigest()}
    assert prov["peers"] == {"definitely-not-a-binary-ptlab": "not installed"}
    assert set(prov["python_deps"]) == {"aiortc", "scapy", "cryptography", "aiohttp"}
    assert prov["kernel"] and prov["python"] and prov["hostname"]
    sha = prov["git_sha"]
    assert sha == "unknown" or (len(sha) == 40 and int(sha, 16) >= 0)
    assert prov["git_dirty"] in (True, False, None)
    json.dumps(prov)  # must be JSON-serialisable as is


def test_git_state_outside_checkout(tmp_path: Path) -> None:
    assert R.git_state(tmp_path) == ("unknown", None)


def _fake_bin(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_binary_version_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GNU style answers --version; Go style rejects it and answers -version.
    _fake_bin(tmp_path, "gnu", 'echo; echo "gnu 1.2"; echo more\n')
    _fake_bin(tmp_path, "go", '[ "$1" = "-version" ] && { echo "go-0.9"; exit 0; }; exit 2\n')
    _fake_bin(tmp_path, "mute", "exit 1\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert R.binary_version("gnu") == "gnu 1.2"
    assert R.binary_version("go") == "go-0.9"
    assert R.binary_version("mute") == "unknown"
    assert R.binary_version("absent") == "not installed"


def test_binary_version_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_bin(tmp_path, "hang", "exec sleep 30\n")
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert R.binary_version("hang", timeout=0.2) == "unknown"


def test_binary_version_timeout_kills_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A grandchild keeps stdout open; the timeout must still return promptly.
    _fake_bin(tmp_path, "forky", "sleep 30 &\nsleep 30\n")
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    t0 = time.monotonic()
    assert R.binary_version("forky", timeout=0.2) == "unknown"
    assert time.monotonic() - t0 < 5


def test_an_older_runs_goodput_mbps_is_read_as_goodput_mbit_s(tmp_path: Path) -> None:
    def older(data: dict) -> None:
        for row in data["rows"]:
            row["goodput_mbps"] = row.pop("goodput_mbit_s")

    rewrite_as(tmp_path, 3, older)
    assert load_results(tmp_path).rows[0].goodput_mbit_s == 42.0


def rewrite_as(tmp_path: Path, version: int, change=None) -> None:
    """Write the sample run, then rewrite its results.json as schema `version` had
    it (`change` removes or renames what that version lacked)."""
    write_results(sample_results(), tmp_path)
    path = tmp_path / "results.json"
    data = json.loads(path.read_text())
    data["schema_version"] = version
    if change is not None:
        change(data)
    path.write_text(json.dumps(data))
