"""Evaluation on a synthetic dataset: deterministic per seed, honest about abstention."""

from __future__ import annotations

import csv
import hashlib
import json
import random

import pytest

from censor_sim.detectors.ml import features
from censor_sim.detectors.ml.flowlog import DOWN, UP, FlowLog
from ptlab.experiment.spec import SpecError
from ptlab.ml.dataset import FORMAT, META_COLUMNS, load_dataset
from ptlab.ml.evaluate import EvalOptions, evaluate, split
from ptlab.ml.report import render, summary_lines

pytest.importorskip("sklearn")


def synthetic_flow(rng: random.Random, label: str, setting: str,
                   short: bool = False) -> FlowLog:
    """obfs4-like: a random first message; 'meek'-like: many small client records
    every poll; benign: text, then a download. Timing scales with the setting.
    A short flow ends at 20 packets, before a 30-packet model decides."""
    log = FlowLog(30)
    slow = 5.0 if setting == "wan" else 1.0
    t = 0.0
    for d in (UP, DOWN, UP):
        log.add(d, t, 0)
        t += 0.001 * slow
    for i in range(17 if short else rng.randint(28, 45)):
        t += rng.uniform(0.0005, 0.003) * slow
        if label == "obfs4":
            data = rng.randbytes(rng.randint(200, 1448)) if i == 0 else rng.randbytes(
                rng.randint(50, 1448))
            log.add(UP if i % 3 == 0 else DOWN, t, len(data), data)
        elif label == "meek":
            n = rng.choice((517, 120, 300)) if i % 2 == 0 else rng.randint(60, 90)
            log.add(UP if i % 2 == 0 else DOWN, t, n, b"\x17\x03\x03" + bytes(n - 3))
        else:
            n = rng.randint(100, 1448)
            log.add(UP if i == 0 else DOWN, t, n, b"GET /" + b"a" * (n - 5))
    return log


def write_dataset(path, n=120, seed=1, short_meek_every=0):
    rng = random.Random(seed)
    names = features.feature_names(30)
    rows = []
    for setting in ("lan", "wan"):
        for label in ("obfs4", "meek", "benign"):
            for k in range(n):
                short = label == "meek" and short_meek_every and k % short_meek_every == 0
                log = synthetic_flow(rng, label, setting, short=bool(short))
                rows.append([len(rows), label, label if label != "benign" else "http", setting,
                             f"{setting}__{label}", "198.18.0.2", "198.18.5.2", 443, "x",
                             len(log), "none", *features.extract(log)])
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "flows.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*META_COLUMNS, *names])
        w.writerows(rows)
    sha = hashlib.sha256((path / "flows.csv").read_bytes()).hexdigest()
    (path / "dataset.json").write_text(json.dumps({
        "format": FORMAT, "name": "synthetic", "window": 30, "csv_sha256": sha,
        "settings": [{"name": "lan"}, {"name": "wan"}], "counts": {}}))
    return path


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return load_dataset(write_dataset(tmp_path_factory.mktemp("ds")))


def test_split_is_stratified_and_seeded(ds):
    tr, te = split(ds, 7, 0.3)
    assert sorted(tr + te) == list(range(len(ds.X))) and not set(tr) & set(te)
    for label in ("obfs4", "benign"):
        for setting in ("lan", "wan"):
            assert sum(ds.meta[i]["label"] == label and ds.meta[i]["setting"] == setting
                       for i in te) == 36
    assert split(ds, 7, 0.3) == (tr, te)
    assert split(ds, 8, 0.3) != (tr, te)


def test_same_seed_same_metrics_exactly(ds, tmp_path):
    a = evaluate(ds, EvalOptions(seed=3, save_models=tmp_path / "m"))
    b = evaluate(ds, EvalOptions(seed=3))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    c = evaluate(ds, EvalOptions(seed=4))
    assert json.dumps(a, sort_keys=True) != json.dumps(c, sort_keys=True)
    saved = json.loads((tmp_path / "m" / "meek-tree.json").read_text())
    assert saved["provenance"]["dataset_sha256"] == ds.manifest["csv_sha256"]
    assert saved["provenance"]["split_seed"] == 3


def test_metrics_and_report(ds, tmp_path):
    r = evaluate(ds, EvalOptions(seed=1, prevalence=1e-5))
    by = {(t["positive"], m["kind"]): m for t in r["tasks"] for m in t["models"]}
    assert by[("obfs4", "entropy-length")]["tpr"] == 1.0
    assert by[("obfs4", "entropy-length")]["fpr"] == 0.0
    assert by[("meek", "entropy-length")]["tpr"] == 0.0  # meek's first message is TLS-like
    assert by[("meek", "tree")]["tpr"] > 0.9 and by[("meek", "tree")]["fpr"] < 0.05
    assert by[("meek", "tree")]["comparisons"]["max"] <= 8
    br = by[("obfs4", "entropy-length")]["base_rate"]["at_fpr_upper95"]
    assert 0 < br["precision"] < 0.01  # 0 observed FPs still bound the precision
    assert {(p["train_setting"], p["test_setting"]) for p in r["portability"]} == {
        ("lan", "wan"), ("wan", "lan")}
    html = render(r, tmp_path).read_text()
    assert "<svg" in html and "Portability" in html
    assert any("obfs4" in line and "TPR 100.00 %" in line for line in summary_lines(r))


def test_the_rates_over_decided_flows_leave_out_the_abstentions(ds, tmp_path):
    """A meek flow shorter than the tree's window is a miss in the TPR (the censor
    lets it through) and absent from the decided rates, which are the tree's own."""
    r = evaluate(ds, EvalOptions(seed=1, learners=("tree",)))
    tree = next(m for t in r["tasks"] if t["positive"] == "meek" for m in t["models"]
                if m["kind"] == "tree")
    assert tree["abstained"] == 0  # no short flow here: the same rates
    assert {k: tree["decided"][k] for k in ("tp", "fn", "fp", "tn", "tpr", "fpr")} == \
        {k: tree[k] for k in ("tp", "fn", "fp", "tn", "tpr", "fpr")}
    short = load_dataset(write_dataset(tmp_path / "short", short_meek_every=4))
    r = evaluate(short, EvalOptions(seed=1, learners=("tree",)))
    task = next(t for t in r["tasks"] if t["positive"] == "meek")
    tree = next(m for m in task["models"] if m["kind"] == "tree")
    d = tree["decided"]
    assert tree["abstained"] > 0 and d["flows"] == task["test"] - tree["abstained"]
    assert d["tp"] == tree["tp"] and d["fn"] == tree["fn"] - tree["abstained"]
    assert d["tpr"] > tree["tpr"] and d["tpr_ci95"][0] > 0.9
    entropy = next(m for m in task["models"] if m["kind"] == "entropy-length")
    assert entropy["decided"]["flows"] == task["test"]  # it decides at the first message


def test_one_direction_of_portability_and_bad_settings(ds):
    r = evaluate(ds, EvalOptions(seed=1, train_setting="lan", test_setting="wan",
                                 learners=("tree",)))
    assert {(p["train_setting"], p["test_setting"]) for p in r["portability"]} == {
        ("lan", "wan")}
    with pytest.raises(ValueError, match="no link setting"):
        evaluate(ds, EvalOptions(train_setting="moon"))


def test_an_edited_dataset_is_refused(tmp_path):
    p = write_dataset(tmp_path / "d", n=5)
    with open(p / "flows.csv", "a") as f:
        f.write("extra\n")
    with pytest.raises(SpecError, match="SHA-256"):
        load_dataset(p)
    with pytest.raises(SpecError, match="not a dataset"):
        load_dataset(tmp_path)


def test_a_malformed_row_is_named(tmp_path):
    p = write_dataset(tmp_path / "e", n=3)
    lines = (p / "flows.csv").read_text().splitlines()
    cells = lines[3].split(",")
    cells[-1] = "not-a-number"
    lines[3] = ",".join(cells)
    lines.append("1,2,3")  # and a short row after it
    (p / "flows.csv").write_text("\n".join(lines) + "\n")
    man = json.loads((p / "dataset.json").read_text())
    man["csv_sha256"] = hashlib.sha256((p / "flows.csv").read_bytes()).hexdigest()
    (p / "dataset.json").write_text(json.dumps(man))
    with pytest.raises(SpecError, match=r"flows\.csv:4: could not convert"):
        load_dataset(p)
    lines[3] = lines[3].replace("not-a-number", "0")
    (p / "flows.csv").write_text("\n".join(lines) + "\n")
    man["csv_sha256"] = hashlib.sha256((p / "flows.csv").read_bytes()).hexdigest()
    (p / "dataset.json").write_text(json.dumps(man))
    with pytest.raises(SpecError, match="3 columns"):
        load_dataset(p)
