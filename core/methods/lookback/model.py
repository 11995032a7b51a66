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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.io import JsonRecord
from core.methods.logistic import LogisticParams, fit_logistic, protocol
from core.model import artifacts
from core.model.handle import ModelHandle
from core.model.prompts import resolve_template

MODEL_VERSION = 1
DEFAULT_ALPHA = 0.05


@dataclass
class LookbackModel(JsonRecord, LogisticParams):
    """The stored classifier (the regression's fields and P(recalled): :class:`~core.methods.logistic.LogisticParams`).

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
    max_new_tokens: int = 64
    mean_tau: float | None = None
    trained_on: list[dict[str, Any]] = field(default_factory=list)
    protocol: str = ""
    version: int = MODEL_VERSION

    def __post_init__(self) -> None:
        self.check(self.KIND, int(self.n_layers) * int(self.n_heads), "head (n_layers × n_heads)")

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

    :func:`core.methods.logistic.fit_logistic`: out-of-fold P(recalled) by ``cross_val_predict`` over
    ``StratifiedKFold(5, shuffle=True, random_state=42)`` of ``StandardScaler → LogisticRegression(C=1)``; τ = the
    (1 − α)-quantile of it over the read rows; then the final model on every row. ``mean_tau`` is the α-quantile
    of the plain mean ratio over the read rows.

    Args:
        X: ``(n, L · H)`` span features; ``y``: ``(n,)`` 1 = recalled (memorized), 0 = read (grounded).

    Returns:
        ``(model, out-of-fold probabilities (n,))``.

    Raises:
        ValueError: shapes, non-finite features, fewer than 5 rows of a class, α outside (0, 1).
    """
    d = n_layers * n_heads
    fit, oof = fit_logistic(X, y, d, alpha=alpha, n_boot=n_boot)
    read_means = np.asarray(X, dtype=np.float64)[np.asarray(y).astype(int) == 0].mean(axis=1)
    fitted = LookbackModel(
        model=model,
        model_slug=model_slug,
        template=template,
        n_layers=int(n_layers),
        n_heads=int(n_heads),
        **fit.params(),
        max_new_tokens=int(max_new_tokens),
        mean_tau=float(np.quantile(read_means, alpha)),
        trained_on=list(trained_on or []),
        protocol=protocol(f"the {d} per-head mean lookback ratios"),
    )
    return fitted, oof
