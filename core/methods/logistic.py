"""A standardized logistic regression calibrated out of fold, stored as plain numbers (no pickle).

The combined detector (:mod:`core.detectors.combined`) and the Lookback Lens classifier
(:mod:`core.methods.lookback.model`) are both ``StandardScaler → LogisticRegression(C, L2)`` (scikit-learn) with
τ set on out-of-fold scores; this module fits one (:func:`fit_logistic`), checks stored parameters
and evaluates them (:class:`LogisticParams`, which a stored model inherits):

P(positive | x) = σ(b + Σ_j w_j (x_j − m_j) / s_j)

τ is the (1 − α)-quantile of the out-of-fold P over the negative (grounded / read) rows, so ≈ α of them are
flagged; FPR, FNR and AUC (with a bootstrap 95 % CI) are measured on the same out-of-fold scores, then the final
model is fitted on every row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

N_SPLITS = 5
SEED = 42
C = 1.0


@dataclass
class LogisticParams:
    """A fitted standardized logistic regression and its out-of-fold calibration: the fields a stored model
    (a :class:`~core.io.JsonRecord` dataclass that inherits them) keeps.

    Attributes:
        mean, scale, coef, intercept: the scaler and the regression (one value per feature; a constant
            feature's scale is stored as 1).
        tau, alpha: the (1 − α)-quantile of the out-of-fold P over the negative rows.
        n_memorized, n_grounded: rows of each label (1, 0).
        fpr_oof, fnr_oof, auc_oof, auc_oof_ci: out-of-fold figures at τ, AUC with its bootstrap 95 % CI.
    """

    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    tau: float
    alpha: float
    n_memorized: int
    n_grounded: int
    fpr_oof: float
    fnr_oof: float
    auc_oof: float
    auc_oof_ci: list[float]

    def check(self, kind: str, d: int, layout: str = "features") -> None:
        """Raise ``ValueError`` unless mean, scale and coef have ``d > 0`` values each, every parameter is finite
        and every scale is > 0; ``kind`` names the model and ``layout`` what ``d`` counts in the message."""
        if d <= 0 or not (len(self.mean) == len(self.scale) == len(self.coef) == d):
            raise ValueError(f"{kind}: mean, scale and coef must each have one value per {layout} ({d})")
        if not all(math.isfinite(float(v)) for v in [*self.mean, *self.coef, self.intercept, self.tau]):
            raise ValueError(f"{kind}: non-finite parameters")
        if any(float(s) <= 0 for s in self.scale):
            raise ValueError(f"{kind}: every scale must be > 0")

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """P(positive) of feature rows ``(k, d)`` (or one row ``(d,)``) → ``(k,)``, float64."""
        v = np.atleast_2d(np.asarray(x, dtype=np.float64))
        if v.shape[1] != len(self.coef):
            raise ValueError(f"expected {len(self.coef)} features, got shape {np.shape(x)}")
        z = self.intercept + ((v - np.asarray(self.mean)) / np.asarray(self.scale)) @ np.asarray(self.coef)
        return 1.0 / (1.0 + np.exp(-np.clip(z, -700, 700)))

    def tau_source(self, what: str, rows: str) -> str:
        """Where τ came from, in words: ``what`` is the score (``P(memorized)``), ``rows`` the negative rows."""
        return (
            f"the {1 - self.alpha:g}-quantile of the out-of-fold {what} over {self.n_grounded} {rows} "
            f"(out-of-fold FPR {self.fpr_oof:.1%}, FNR {self.fnr_oof:.1%})"
        )

    def params(self) -> dict[str, Any]:
        """This class's fields of a model, as keyword arguments of another model record."""
        return {f.name: getattr(self, f.name) for f in fields(LogisticParams)}


def protocol(what: str) -> str:
    """How :func:`fit_logistic` fitted a model over ``what`` (stored next to it)."""
    return (
        f"StandardScaler + LogisticRegression(C={C}, L2) over {what}; out-of-fold P by cross_val_predict("
        f"StratifiedKFold({N_SPLITS}, shuffle, seed {SEED})); tau = the (1 - alpha)-quantile of the out-of-fold P "
        "over the grounded (read) rows; FPR/FNR/AUC on those out-of-fold scores; final model fitted on every row."
    )


def _checked(X: np.ndarray, y: np.ndarray, d: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(X, dtype=np.float64)
    labels = np.asarray(y).astype(int)
    if x.ndim != 2 or x.shape != (labels.shape[0], d):
        raise ValueError(f"X must be (n, {d}) with n = len(y), got {x.shape} and {labels.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("features must be finite")
    if min(int((labels == 0).sum()), int((labels == 1).sum())) < N_SPLITS:
        raise ValueError(f"need at least {N_SPLITS} rows of each label")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return x, labels


def fit_logistic(
    X: np.ndarray, y: np.ndarray, d: int, *, alpha: float, n_boot: int = 1000
) -> tuple[LogisticParams, np.ndarray]:
    """Fit ``StandardScaler → LogisticRegression(C=1)`` on labeled rows and calibrate τ out of fold.

    Args:
        X: ``(n, d)`` features; ``y``: ``(n,)`` 1 = memorized / recalled, 0 = grounded / read; ``d``: the
            number of features the model has.
        alpha: the target false-positive rate on the negative rows.
        n_boot: bootstrap resamples of the AUC's CI (seed 42).

    Returns:
        ``(parameters, out-of-fold P of every row (n,))``.

    Raises:
        ValueError: shapes, non-finite features, fewer than 5 rows of a class, α outside (0, 1).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from core.maths.metrics import auc, auc_bootstrap_ci

    x, labels = _checked(X, y, d, alpha)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000))
    folds = StratifiedKFold(n_splits=N_SPLITS, shuffle=True, random_state=SEED)
    oof = cross_val_predict(pipe, x, labels, cv=folds, method="predict_proba")[:, 1]
    tau = float(np.quantile(oof[labels == 0], 1.0 - alpha))
    pipe.fit(x, labels)
    scaler, lr = pipe.named_steps["standardscaler"], pipe.named_steps["logisticregression"]
    low, high = auc_bootstrap_ci(labels, oof, n_boot=n_boot, seed=SEED)
    fitted = LogisticParams(
        mean=[float(v) for v in scaler.mean_],
        scale=[float(v) if v > 0 else 1.0 for v in scaler.scale_],
        coef=[float(v) for v in lr.coef_[0]],
        intercept=float(lr.intercept_[0]),
        tau=tau,
        alpha=float(alpha),
        n_memorized=int((labels == 1).sum()),
        n_grounded=int((labels == 0).sum()),
        fpr_oof=float((oof[labels == 0] > tau).mean()),
        fnr_oof=float((oof[labels == 1] <= tau).mean()),
        auc_oof=float(auc(labels, oof)),
        auc_oof_ci=[float(low), float(high)],
    )
    return fitted, oof
