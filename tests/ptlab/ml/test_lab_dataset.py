"""A learning censor trained in the lab (issue 9): the dataset, the evaluation, portability.

One dataset of about 1,020 real flows is collected per session in the lab (the
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

from censor_sim.detectors.ml.model import entropy_length_model
from ptlab.ml.dataset import collect, load_dataset, parse_dataset_spec
from ptlab.ml.evaluate import EvalOptions, evaluate, split

pytestmark = pytest.mark.lab

SPEC = {
    "dataset": {"name": "ci", "seed": 9, "window": 30, "concurrency": 8},
    "settings": {"lan": {}, "wan": {"rate_mbit": 20, "delay_ms": 10, "loss_pct": 1}},
    # 150 meek sessions per setting: about 78 held-out meek flows reach the tree's
    # window, enough for its Wilson bound to tolerate two misses (below).
    "transports": {"obfs4": {"flows": 160}, "meek": {"flows": 150}},
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


def test_entropy_length_test_separates_obfs4_from_the_benign_mix(dataset, result):
    m = by_kind(result, "obfs4")["entropy-length"]
    assert m["tpr"] >= 0.97 and m["tpr_ci95"][0] >= 0.9
    # Its false positives are the random-looking binary protocol only: none on
    # TLS, HTTP, SSH or DNS.
    for app, v in m["fpr_by_app"].items():
        if app != "binary":
            assert v["flagged"] == 0, (app, v)
    # Its FPR over every benign flow, at 0.06 as before. The test learns nothing,
    # so no flow is one it was fitted on, and the held-out 120 were a sample of
    # the 400 that moved with the capture's order: the binary protocol is 4 % of
    # the sessions (16 of 400, drawn by the seeded RNG) and each is flagged, and
    # 4 to 8 of them fell in the 120 in sixteen collections, an FPR of
    # 0.033-0.067 (three failed runs in seven). Over all 400: 0.04, whatever
    # the order. The held-out figure must agree within its interval.
    model = entropy_length_model(result["dataset"]["window"])
    benign = [(x, row["app"]) for x, row in zip(dataset.X, dataset.meta, strict=True)
              if row["label"] == "benign"]
    flagged = [app for x, app in benign if model.decide_vector(x).flagged]
    assert set(flagged) <= {"binary"}, flagged
    assert len(flagged) / len(benign) <= 0.06, (len(flagged), len(benign))
    assert m["fpr_ci95"][0] <= 0.06, m["fpr_ci95"]


def test_a_decision_tree_detects_meek_against_https_through_the_same_edge(dataset, result):
    """The tree against meek, apart from the meek sessions too short for it.

    A meek session that asks for one small page is over in 20-29 packets, before
    the tree's 30, and the censor lets it through undecided; the held-out TPR
    counts it as a miss. In nine collections (two beside two CPU hogs) the tree
    flagged every held-out meek flow it decided, and every miss was such a
    session. They are 12-16 % of meek flows, set by the seeded requests: from
    run to run, loaded or not, four at most crossed the line. Which of them the
    30 % split holds out
    is what varied (the flows' order in the capture moves with load): with 90
    sessions a setting, 5 to 9 of the 54 held out here, a TPR of 0.83-0.91
    against a bound of 0.8; CI's 0.78 was 12 of 54. So the two are bounded
    apart, each from data the split does not choose."""
    m = by_kind(result, "meek")["tree"]
    decided = m["decided"]
    # The tree's own TPR, over the held-out meek flows it decided: the Wilson 95 %
    # lower bound at 0.9 (Wang et al.'s meek trees: 0.98, docs/censors/ml.md
    # §1.2). Of about 78 flows two misses pass (76/78: 0.911), three do not
    # (0.893). Its AUC there too: over all flows the AUC, like the TPR, counts
    # every abstention as a miss (it was bound at 0.9 and came to 0.905-0.95).
    assert decided["tp"] + decided["fn"] >= 60
    assert decided["tpr_ci95"][0] >= 0.9, decided
    assert decided["auc"] >= 0.95 and len(m["roc"]) >= 3
    # The censor's TPR, misses and abstentions counted, as before at 0.8: the
    # share of meek flows that reach the window, over all of them (a flow's length
    # does not depend on the model, so no split is needed), times the tree's TPR
    # on those. Seen: 0.84-0.88, a margin of about 20 of 300 flows; load moved
    # three. The held-out figure, from a third of the flows, must agree within
    # its interval.
    window = result["dataset"]["window"]
    meek = [x for x, row in zip(dataset.X, dataset.meta, strict=True) if row["label"] == "meek"]
    reach = sum(x[0] >= window for x in meek) / len(meek)
    assert reach * decided["tpr"] >= 0.8, (reach, decided["tpr"])
    assert m["tpr_ci95"][1] >= 0.8, m["tpr_ci95"]
    assert m["fpr"] <= 0.03
    assert m["fpr_by_app"]["https-edge"]["flows"] > 20
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
