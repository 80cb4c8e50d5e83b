"""Rates with Wilson intervals, ROC and AUC, base rates."""

from __future__ import annotations

import math

import pytest

from ptlab.ml import metrics


def test_wilson_known_values():
    lo, hi = metrics.wilson(0, 100)
    assert lo == 0.0 and hi == pytest.approx(0.0370, abs=1e-4)
    lo, hi = metrics.wilson(50, 100)
    assert (lo, hi) == (pytest.approx(0.4038, abs=1e-4), pytest.approx(0.5962, abs=1e-4))
    assert metrics.wilson(0, 0) == (0.0, 1.0)


def test_rates():
    r = metrics.rates([True, True, False, True, False], [True, True, True, False, False])
    assert (r.tp, r.fn, r.fp, r.tn) == (2, 1, 1, 1)
    assert r.tpr == pytest.approx(2 / 3) and r.fpr == 0.5
    j = r.to_json()
    assert j["tpr_ci95"][0] < j["tpr"] < j["tpr_ci95"][1]


def test_roc_and_auc():
    perfect = metrics.roc([0.9, 0.8, 0.2, 0.1], [True, True, False, False])
    assert metrics.auc(perfect) == 1.0
    assert perfect[0][:2] == (0.0, 0.0) and perfect[-1][:2] == (1.0, 1.0)
    # Ties move together: one threshold, the diagonal.
    tied = metrics.roc([0.5] * 4, [True, False, True, False])
    assert [p[:2] for p in tied] == [(0.0, 0.0), (1.0, 1.0)]
    assert metrics.auc(tied) == 0.5


def test_base_rate_is_wang_et_al_s_example():
    # 99 % TPR, 1 % FPR, one obfuscated flow in 10^9: about 1 in 10^7 flags is real.
    b = metrics.base_rate(0.99, 0.01, 1e-9)
    assert b["precision"] == pytest.approx(9.9e-8, rel=1e-3)
    assert b["false_per_true"] == pytest.approx(1.0101e7, rel=1e-3)
    assert metrics.base_rate(0.0, 0.01, 1e-3)["false_per_true"] == math.inf
