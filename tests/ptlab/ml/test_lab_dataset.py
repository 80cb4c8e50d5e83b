"""A learning censor trained in the lab (issue 9): the dataset, the evaluation, portability.

One dataset of about 900 real flows is collected per session in the lab (the
3,003-flow dataset the shipped model came from is checked exactly in
test_shipped_dataset.py; this one shows a fresh collection agrees): obfs4
(ours), meek (through the CDN edge, fronted) and a benign mix (HTTPS through
the same edge and to a web server, HTTP, SSH, DNS over TCP, a binary
protocol), under a LAN setting and a slower, lossy WAN setting. The
evaluation then runs on it exactly as ``ptlab evaluate`` does.
"""

from __future__ import annotations

import json

import pytest

from ptlab.ml.dataset import collect, load_dataset, parse_dataset_spec
from ptlab.ml.evaluate import EvalOptions, evaluate, split

pytestmark = pytest.mark.lab

SPEC = {
    "dataset": {"name": "ci", "seed": 9, "window": 30, "concurrency": 8},
    "settings": {"lan": {}, "wan": {"rate_mbit": 20, "delay_ms": 10, "loss_pct": 1}},
    "transports": {"obfs4": {"flows": 160}, "meek": {"flows": 90}},
    "benign": {"sessions": 200},
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from ptlab.pytest_plugin import lab_unavailable

    if why := lab_unavailable():
        pytest.skip(why)
    out = tmp_path_factory.mktemp("ml-dataset")
    collect(parse_dataset_spec(SPEC), out, log=lambda *a: None)
    return load_dataset(out)


@pytest.fixture(scope="module")
def result(dataset):
    return evaluate(dataset, EvalOptions(seed=5, prevalence=1e-6))


def by_kind(result, positive):
    task = next(t for t in result["tasks"] if t["positive"] == positive)
    return {m["kind"]: m for m in task["models"]}


def test_dataset_has_labelled_flows_from_real_pcaps(dataset):
    labels = dataset.labels
    assert len(labels) >= 850
    assert {"obfs4", "meek", "benign"} == set(labels)
    apps = {m["app"] for m in dataset.meta if m["label"] == "benign"}
    assert {"https-edge", "https", "http", "ssh"} <= apps
    # meek and the benign edge sessions reach the same server and port.
    meek = {(m["server_role"], m["server_port"]) for m in dataset.meta if m["label"] == "meek"}
    edge = {(m["server_role"], m["server_port"]) for m in dataset.meta
            if m["app"] == "https-edge"}
    assert meek == edge == {("cdn", "443")}
    pcaps = {m["pcap"] for m in dataset.meta}
    assert all((dataset.path / p).stat().st_size > 0 for p in pcaps)
    assert dataset.manifest["counts"]["obfs4"]["wan"] > 0


def test_entropy_length_test_separates_obfs4_from_the_benign_mix(result):
    m = by_kind(result, "obfs4")["entropy-length"]
    assert m["tpr"] >= 0.97 and m["tpr_ci95"][0] >= 0.9
    # Its false positives are the random-looking binary protocol only: none on
    # TLS, HTTP, SSH or DNS.
    for app, v in m["fpr_by_app"].items():
        if app != "binary":
            assert v["flagged"] == 0, (app, v)
    assert m["fpr"] <= 0.06


def test_a_decision_tree_detects_meek_against_https_through_the_same_edge(result):
    m = by_kind(result, "meek")["tree"]
    assert m["tpr"] >= 0.8 and m["fpr"] <= 0.03
    assert m["fpr_by_app"]["https-edge"]["flows"] > 20
    assert m["auc"] >= 0.9 and len(m["roc"]) >= 3
    assert m["comparisons"]["max"] <= 8  # a shallow tree, as in the paper
    # The entropy test cannot see meek: its first message is a TLS ClientHello.
    assert by_kind(result, "meek")["entropy-length"]["tpr"] == 0.0


def test_cross_setting_results_are_reported_both_ways(result):
    pairs = {(p["positive"], p["kind"], p["train_setting"], p["test_setting"]): p
             for p in result["portability"]}
    for positive in ("obfs4", "meek"):
        for a, b in (("lan", "wan"), ("wan", "lan")):
            p = pairs[(positive, "tree", a, b)]
            assert p["tpr_drop"] == pytest.approx(p["same"]["tpr"] - p["cross"]["tpr"])
            assert 0 <= p["cross"]["tpr"] <= 1


def test_a_fixed_seed_reproduces_the_split_and_the_metrics(dataset, result):
    again = evaluate(dataset, EvalOptions(seed=5, prevalence=1e-6))
    assert json.dumps(again, sort_keys=True) == json.dumps(result, sort_keys=True)
    # Another seed holds out other flows, in the same stratified proportions. (Its
    # metrics may well coincide: a tree that is near-perfect on both held-out
    # sets can draw the same three-point ROC, which once failed CI here.)
    ts = result["options"]["test_size"]
    held5, held6 = split(dataset, 5, ts)[1], split(dataset, 6, ts)[1]
    assert held5 != held6 and len(held5) == len(held6)
    other = evaluate(dataset, EvalOptions(seed=6, prevalence=1e-6, learners=("tree",)))
    assert other["split"] == result["split"]
    assert other["options"]["seed"] == 6
