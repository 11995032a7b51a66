"""Detection metrics (scikit-learn), with the positive class = *memorized* and higher score = more likely
memorised (RePCS §V: ROC-AUC, FPR at 95 % TPR, Precision@k)."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve


def _check(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels).astype(int)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"labels and scores must be 1-D of the same length, got {y.shape} and {s.shape}")
    if not np.all(np.isin(y, (0, 1))):
        raise ValueError("labels must be 0/1 (1 = memorized)")
    if y.min() == y.max():
        raise ValueError("both classes (memorized and grounded) are needed to compute ROC metrics")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    return y, s


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC-AUC (``sklearn.metrics.roc_auc_score``)."""
    y, s = _check(labels, scores)
    return float(roc_auc_score(y, s))


def fpr_at_tpr(labels: np.ndarray, scores: np.ndarray, tpr_target: float = 0.95) -> float:
    """The lowest false-positive rate among ROC operating points whose TPR ≥ ``tpr_target``."""
    y, s = _check(labels, scores)
    fpr, tpr, _ = roc_curve(y, s)
    return float(fpr[tpr >= tpr_target - 1e-12].min())


def precision_at_k(labels: np.ndarray, scores: np.ndarray, k: int = 10) -> float:
    """Fraction of positives among the ``k`` highest scores (ties broken by a stable sort)."""
    y, s = _check(labels, scores)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(k, y.size)
    order = np.argsort(-s, kind="stable")[:k]
    return float(y[order].mean())


def detection_metrics(labels: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """``auc``, ``fpr_at_95tpr`` and ``precision_at_10`` in one dict."""
    return {
        "auc": auc(labels, scores),
        "fpr_at_95tpr": fpr_at_tpr(labels, scores, 0.95),
        "precision_at_10": precision_at_k(labels, scores, 10),
    }
