"""Detection metrics against scikit-learn and hand computations."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from core.maths.metrics import auc, detection_metrics, fpr_at_tpr, precision_at_k


def test_auc_matches_sklearn():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 100)
    s = rng.normal(size=100) + y
    assert auc(y, s) == pytest.approx(roc_auc_score(y, s))


def test_fpr_at_95_tpr_by_hand():
    y = np.array([1, 1, 1, 1, 0, 0, 0, 0])
    s = np.array([0.9, 0.8, 0.7, 0.2, 0.6, 0.3, 0.1, 0.05])
    # all four positives are caught only once the threshold drops to 0.2: then negatives 0.6, 0.3 are in → FPR 0.5
    assert fpr_at_tpr(y, s, 0.95) == pytest.approx(0.5)
    assert fpr_at_tpr(y, s, 0.75) == pytest.approx(0.0)


def test_precision_at_k_by_hand():
    y = np.array([1, 0, 1, 0, 0])
    s = np.array([5, 4, 3, 2, 1])
    assert precision_at_k(y, s, 2) == pytest.approx(0.5)
    assert precision_at_k(y, s, 3) == pytest.approx(2 / 3)
    assert precision_at_k(y, s, 10) == pytest.approx(0.4)  # k capped at n


def test_errors():
    with pytest.raises(ValueError, match="both classes"):
        auc(np.ones(4), np.arange(4))
    with pytest.raises(ValueError, match="same length"):
        auc(np.array([0, 1]), np.array([1.0]))
    with pytest.raises(ValueError, match="finite"):
        auc(np.array([0, 1]), np.array([np.nan, 1.0]))


def test_perfect_separation():
    m = detection_metrics(np.array([1] * 12 + [0] * 12), np.arange(24)[::-1].astype(float))
    assert m == {"auc": 1.0, "fpr_at_95tpr": 0.0, "precision_at_10": 1.0}


def test_bootstrap_ci_contains_estimate_and_narrows_with_n():
    from core.maths.metrics import auc_bootstrap_ci

    rng = np.random.default_rng(3)

    def sample(n):
        y = np.array([1] * (n // 2) + [0] * (n - n // 2))
        return y, rng.normal(size=n) + 0.8 * y

    y_small, s_small = sample(40)
    y_big, s_big = sample(800)
    lo_s, hi_s = auc_bootstrap_ci(y_small, s_small)
    lo_b, hi_b = auc_bootstrap_ci(y_big, s_big)
    assert lo_s <= auc(y_small, s_small) <= hi_s
    assert lo_b <= auc(y_big, s_big) <= hi_b
    assert hi_b - lo_b < hi_s - lo_s
    assert auc_bootstrap_ci(y_small, s_small) == (lo_s, hi_s)  # seeded
