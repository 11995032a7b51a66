"""The Lookback Lens classifier: a logistic regression over the per-head mean lookback ratios, stored as JSON.

P(recalled | x) = σ(b + Σ_j w_j (x_j − m_j) / s_j) over the ``L · H`` span features of
:func:`core.methods.lookback.maths.span_features` (Chuang et al. 2024, §3: "a linear classifier … on the
lookback ratio features"). The fit (:func:`fit_lookback`) is ``StandardScaler → LogisticRegression(C = 1, L2)``
(scikit-learn); the stored file holds the scaler's mean and scale, the coefficients and intercept, τ and the
out-of-fold figures — no pickles. τ is the (1 − α)-quantile of the out-of-fold P over the *read* (grounded)
training rows, so ≈ α of read rows are flagged (the combined detector's rule).

Files are per (model, resolved template) through the artifact store (:data:`LOOKBACK_MODEL`): bundled for the
embedded model under ``assets/lookback/``, else cached after ``scripts/build_lookback.py --model …``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.io import JsonRecord
from core.model import artifacts
from core.model.handle import ModelHandle
from core.model.prompts import resolve_template

MODEL_VERSION = 1
DEFAULT_ALPHA = 0.05
N_SPLITS = 5
SEED = 42
C = 1.0


@dataclass
class LookbackModel(JsonRecord):
    """The stored classifier.

    Attributes:
        model, model_slug, template: the language model, its cache key and the resolved prompt template.
        n_layers, n_heads: the feature layout (feature ``ℓ · n_heads + h`` is head h of layer ℓ).
        mean, scale, coef, intercept: the standardized logistic regression (``L · H`` each).
        tau, alpha: the (1 − α)-quantile of the out-of-fold P(recalled) over the read training rows.
        fpr_oof, fnr_oof, auc_oof, auc_oof_ci: out-of-fold figures on the training rows.
        max_new_tokens: the answer length cap of the training runs.
        mean_tau: the α-quantile of the plain mean ratio (every head and answer token) over the read training
            rows — the ``lookback_mean`` detector's threshold (lower = recalled).
        trained_on: the training files (path, split, rows, sha256); ``protocol``: how it was fitted.
    """

    KIND = "lookback model"
    VERSION = MODEL_VERSION

    model: str
    model_slug: str
    template: str
    n_layers: int
    n_heads: int
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
    max_new_tokens: int = 64
    mean_tau: float | None = None
    trained_on: list[dict[str, Any]] = field(default_factory=list)
    protocol: str = ""
    version: int = MODEL_VERSION

    def __post_init__(self) -> None:
        d = int(self.n_layers) * int(self.n_heads)
        if d <= 0 or not (len(self.mean) == len(self.scale) == len(self.coef) == d):
            raise ValueError("lookback model: mean, scale and coef must each have n_layers × n_heads values")
        if not all(math.isfinite(float(v)) for v in [*self.mean, *self.coef, self.intercept, self.tau]):
            raise ValueError("lookback model: non-finite parameters")
        if any(float(s) <= 0 for s in self.scale):
            raise ValueError("lookback model: every scale must be > 0")

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """P(recalled) of feature rows ``(k, L · H)`` (or one row ``(L · H,)``) → ``(k,)``."""
        v = np.atleast_2d(np.asarray(x, dtype=np.float64))
        if v.shape[1] != len(self.coef):
            raise ValueError(f"expected {len(self.coef)} lookback features, got shape {np.shape(x)}")
        z = self.intercept + ((v - np.asarray(self.mean)) / np.asarray(self.scale)) @ np.asarray(self.coef)
        return 1.0 / (1.0 + np.exp(-np.clip(z, -700, 700)))

    def probability(self, x: np.ndarray) -> float:
        """P(recalled) of one feature vector ``(L · H,)``."""
        return float(self.probabilities(np.asarray(x).reshape(1, -1))[0])

    def head_weights(self) -> np.ndarray:
        """``(L, H)``: each head's standardized coefficient (negative: looking back at the context means read)."""
        return np.asarray(self.coef, dtype=np.float64).reshape(self.n_layers, self.n_heads)


def bundled_model_path(template_key: str) -> Path:
    """``assets/lookback/embedded-<template>.json``: the embedded model's Lookback Lens classifier."""
    return LOOKBACK_MODEL.bundled("", template_key)  # type: ignore[misc]


LOOKBACK_MODEL = artifacts.per_template("lookback-lens", LookbackModel.load, "lookback")
"""The Lookback Lens classifier per (model, resolved template): bundled for the embedded model, else cached."""


def cache_model_path(handle: ModelHandle, template_key: str) -> Path:
    """``<cache_dir>/lookback/<slug>/<template>.json``: a classifier built for another model."""
    return artifacts.cache_path(LOOKBACK_MODEL, handle, template_key)


def model_for(handle: ModelHandle, template: str) -> LookbackModel | None:
    """The classifier of this language model and (resolved) template, or ``None`` when none was built."""
    return artifacts.find(LOOKBACK_MODEL, handle, resolve_template(template, handle.tokenizer).key)


def fit_lookback(
    X: np.ndarray,
    y: np.ndarray,
    *,
    n_layers: int,
    n_heads: int,
    model: str,
    model_slug: str,
    template: str,
    alpha: float = DEFAULT_ALPHA,
    max_new_tokens: int = 64,
    trained_on: list[dict[str, Any]] | None = None,
    n_boot: int = 1000,
) -> tuple[LookbackModel, np.ndarray]:
    """Fit the classifier on labeled rows; τ, FPR/FNR and AUC (bootstrap CI) from out-of-fold scores.

    Out-of-fold P(recalled) by ``cross_val_predict`` over ``StratifiedKFold(5, shuffle=True, random_state=42)``
    of ``StandardScaler → LogisticRegression(C=1)``; τ = the (1 − α)-quantile of it over the read rows; then the
    final model on every row.

    Args:
        X: ``(n, L · H)`` span features; ``y``: ``(n,)`` 1 = recalled (memorized), 0 = read (grounded).

    Returns:
        ``(model, out-of-fold probabilities (n,))``.

    Raises:
        ValueError: shapes, non-finite features, fewer than 5 rows of a class, α outside (0, 1).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from core.maths.metrics import auc, auc_bootstrap_ci

    x = np.asarray(X, dtype=np.float64)
    labels = np.asarray(y).astype(int)
    d = n_layers * n_heads
    if x.ndim != 2 or x.shape != (labels.shape[0], d):
        raise ValueError(f"X must be (n, {d}) with n = len(y), got {x.shape} and {labels.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("lookback features must be finite")
    if min(int((labels == 0).sum()), int((labels == 1).sum())) < N_SPLITS:
        raise ValueError(f"need at least {N_SPLITS} rows of each label")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    pipe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000))
    folds = StratifiedKFold(n_splits=N_SPLITS, shuffle=True, random_state=SEED)
    oof = cross_val_predict(pipe, x, labels, cv=folds, method="predict_proba")[:, 1]
    tau = float(np.quantile(oof[labels == 0], 1.0 - alpha))
    pipe.fit(x, labels)
    scaler, lr = pipe.named_steps["standardscaler"], pipe.named_steps["logisticregression"]
    low, high = auc_bootstrap_ci(labels, oof, n_boot=n_boot, seed=SEED)
    scale = [float(v) if v > 0 else 1.0 for v in scaler.scale_]
    fitted = LookbackModel(
        model=model,
        model_slug=model_slug,
        template=template,
        n_layers=int(n_layers),
        n_heads=int(n_heads),
        mean=[float(v) for v in scaler.mean_],
        scale=scale,
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
        max_new_tokens=int(max_new_tokens),
        mean_tau=float(np.quantile(x[labels == 0].mean(axis=1), alpha)),
        trained_on=list(trained_on or []),
        protocol=(
            f"StandardScaler + LogisticRegression(C={C}, L2) over the {d} per-head mean lookback ratios; "
            f"out-of-fold P(recalled) by cross_val_predict(StratifiedKFold({N_SPLITS}, shuffle, seed {SEED})); "
            f"tau = the {1 - alpha:g}-quantile of the out-of-fold P over the read rows; final model on every row."
        ),
    )
    return fitted, oof
