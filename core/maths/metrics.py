"""Detection metrics (scikit-learn), with the positive class = *memorized* and higher score = more likely
memorized (RePCS §V: ROC-AUC, FPR at 95 % TPR, Precision@k)."""

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
    """The lowest false-positive rate among ROC operating points whose TPR ≥ ``tpr_target``.

    Every operating point counts: ``roc_curve(..., drop_intermediate=False)``, one point per distinct score
    (the rule "positive iff score ≥ t"). scikit-learn's default ``drop_intermediate=True`` drops points that
    are collinear with their neighbours; with tied scores it can drop the very point that first reaches the
    target TPR and report a higher FPR (e.g. 1.000 where the exact value is 0.769).
    """
    y, s = _check(labels, scores)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
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


MIN_BOOTSTRAP = 10
"""Fewest bootstrap resamples :func:`auc_bootstrap_ci` accepts (the CLI's ``--bootstrap`` uses the same bound)."""
MAX_BOOTSTRAP = 10_000
"""Most resamples: the resample index alone takes ``n_boot × rows × 8`` bytes (10,000 × 5,000 rows ≈ 381 MiB)."""


def auc_bootstrap_ci(
    labels: np.ndarray,
    scores: np.ndarray,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 42,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the ROC-AUC (CRM §3: "ROC-AUC with 95% bootstrap CIs").

    Rows are resampled with replacement ``n_boot`` times (``numpy.random.default_rng(seed)``); resamples that
    miss a class are dropped. Each resample's AUC is the Mann–Whitney statistic
    ``(Σ ranks of positives − n₁(n₁+1)/2) / (n₁ n₀)`` with average ranks for ties — equal to
    ``roc_auc_score`` on that resample — computed for all resamples at once.

    Returns:
        ``(low, high)``: the ``(1 − confidence)/2`` and ``(1 + confidence)/2`` quantiles of the resampled AUCs.
    """
    from scipy.stats import rankdata

    y, s = _check(labels, scores)
    if not MIN_BOOTSTRAP <= n_boot <= MAX_BOOTSTRAP:
        raise ValueError(f"n_boot must be between {MIN_BOOTSTRAP} and {MAX_BOOTSTRAP:,}, got {n_boot}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, y.size, size=(n_boot, y.size))
    yb, sb = y[idx], s[idx]
    n1 = yb.sum(axis=1)
    n0 = y.size - n1
    ok = (n1 > 0) & (n0 > 0)
    if not ok.any():
        raise ValueError("no bootstrap resample contains both classes (too few rows of one class)")
    ranks = rankdata(sb[ok], axis=1)
    n1, n0 = n1[ok].astype(np.float64), n0[ok].astype(np.float64)
    aucs = ((ranks * yb[ok]).sum(axis=1) - n1 * (n1 + 1) / 2.0) / (n1 * n0)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(aucs, [tail, 1.0 - tail])
    return float(low), float(high)


def roc_points(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fpr, tpr, thresholds)`` of the ROC curve (``sklearn.metrics.roc_curve``, positive class = 1).

    Every operating point is kept (``drop_intermediate=False``: one point per distinct score), so a threshold
    read off these points is exact; the curve drawn is the same either way. The first threshold is ``+inf``
    in scikit-learn; it is replaced by ``nan`` here so the arrays are JSON-safe
    once converted (callers drop or label it).
    """
    y, s = _check(labels, scores)
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    thr = thr.astype(np.float64)
    thr[~np.isfinite(thr)] = np.nan
    return fpr, tpr, thr
