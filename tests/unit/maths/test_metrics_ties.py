"""FPR@95%TPR against a brute-force enumeration of thresholds (issue 11).

The rule is "memorized iff score ≥ t"; the exact FPR at TPR ≥ 0.95 is the smallest FPR over every threshold t
(every distinct score, plus +inf) whose TPR reaches the target. scikit-learn's ``roc_curve`` drops collinear
operating points by default, which with tied scores can drop the one point that reaches the target.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from core.maths.metrics import auc, fpr_at_tpr, roc_points


def brute_force_fpr(y: np.ndarray, s: np.ndarray, target: float = 0.95) -> float:
    """min FPR over all thresholds t with TPR(t) ≥ target, by enumeration (no scikit-learn)."""
    best = 1.0
    pos, neg = s[y == 1], s[y == 0]
    for t in [*np.unique(s), np.inf]:
        tpr = float(np.count_nonzero(pos >= t)) / pos.size
        fpr = float(np.count_nonzero(neg >= t)) / neg.size
        if tpr >= target - 1e-12:
            best = min(best, fpr)
    return best


def collinear_case() -> tuple[np.ndarray, np.ndarray]:
    """40 positives, 13 negatives in three tied blocks: 36 P + 7 N at 3; 2 P + 3 N at 2; 2 P + 3 N at 1.

    The point after the second block (FPR 10/13 = 0.769, TPR 38/40 = 0.95) is reached by the same count
    steps as the next one, so ``drop_intermediate=True`` drops it and the next point (1, 1) gives 1.000.
    """
    y = np.array([1] * 36 + [0] * 7 + [1] * 2 + [0] * 3 + [1] * 2 + [0] * 3)
    s = np.array([3.0] * 43 + [2.0] * 5 + [1.0] * 5)
    return y, s


def test_the_collinear_tie_case_is_exact():
    y, s = collinear_case()
    assert brute_force_fpr(y, s) == pytest.approx(10 / 13)
    assert fpr_at_tpr(y, s, 0.95) == pytest.approx(10 / 13)  # the old code (default roc_curve) said 1.000


def _tied_blocks(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random scores on a few levels; some runs of levels share one positive:negative ratio (collinear)."""
    levels = int(rng.integers(2, 7))
    a, b = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    y, s = [], []
    for level in range(levels):
        if rng.random() < 0.5:
            k = int(rng.integers(1, 5))
            p, n = k * a, k * b
        else:
            p, n = int(rng.integers(0, 12)), int(rng.integers(0, 6))
        y += [1] * p + [0] * n
        s += [float(level)] * (p + n)
    return np.array(y), np.array(s)


def test_fpr_matches_brute_force_on_tie_heavy_random_data():
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(600):
        y, s = _tied_blocks(rng) if rng.random() < 0.7 else (rng.integers(0, 2, 30), rng.integers(0, 5, 30) * 1.0)
        if y.size < 2 or y.min() == y.max():
            continue
        for target in (0.95, 0.9, 0.8, 0.5):
            assert fpr_at_tpr(y, s, target) == pytest.approx(brute_force_fpr(y, s, target)), (y.tolist(), s.tolist())
        checked += 1
    assert checked > 400


def test_roc_points_keep_every_operating_point():
    y, s = collinear_case()
    fpr, tpr, thr = roc_points(y, s)
    # one point per distinct score plus the (0, 0) start: the collinear middle point is kept
    assert len(fpr) == np.unique(s).size + 1
    assert any(abs(f - 10 / 13) < 1e-12 and abs(t - 0.95) < 1e-12 for f, t in zip(fpr, tpr))
    assert np.isnan(thr[0])


def test_auc_is_unaffected_by_ties():
    rng = np.random.default_rng(5)
    for _ in range(50):
        y, s = _tied_blocks(rng)
        if y.min() == y.max():
            continue
        # Mann-Whitney with ties counted one half, independently of scikit-learn's curve
        pos, neg = s[y == 1], s[y == 0]
        mw = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (pos.size * neg.size)
        assert auc(y, s) == pytest.approx(mw) == pytest.approx(roc_auc_score(y, s))
