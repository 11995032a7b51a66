"""Detectors that need a model fitted on labeled rows, scored by cross-validation (CRM §2–§3).

CRM evaluates its feature vectors "with logistic regression … under 5-fold stratified CV (seed 42)". Here a
fitted detector gives per-row *features* (``Detector.features``); evaluation collects them for every scored
row and :func:`cross_validated_scores` returns, for each row, P(memorized) from a
``StandardScaler → LogisticRegression`` pipeline trained on the **other** folds only
(``sklearn.model_selection.cross_val_predict``), so no row is ever scored by a model that saw its label.

Registered here:

* ``crm_l2_lr`` — logistic regression over the CRM level-2 statistics of KL_t (appendix P.2: KL-mean, KL-max,
  KL-var, early and late means, trend), computed from the result alone; an answer not longer than the split
  has no late mean (``has_late = 0``, ``late = 0``: :func:`core.methods.crm.maths.l2_feature_vector`).
* ``crm_lr_cv`` — logistic regression over the per-layer LTS features (CRM eq. 1, level 3:
  LTS_ℓ = ⟨h_ℓ^c − h_ℓ^0, v_ℓ⟩ at the last prompt token along PC1, for the layers kept by the variance-ratio
  > 0.01 rule), fitted by cross-validation on the evaluated rows themselves. It uses
  :func:`core.detectors.crm.basis_for` and :func:`core.detectors.crm.displacement_for` (the CRM detectors'
  per-row cache, so the displacement is computed once per row). :mod:`core.detectors.crm`'s own ``crm_lr`` is
  the same regression fitted once on
  the bundled calibration prompts; ``crm_lr_cv`` needs no bundled fit but only says something about the
  evaluated set.

What they can and cannot conclude: a cross-validated AUC says how separable the two labeled classes are *on
this data set* with these features; it does not certify any single generation (CRM §5).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from core.detectors.crm import basis_for, displacement_for
from core.detectors.registry import MEMORIZED_HIGH, PROMPT_STATES, Detector, DetectorInput, register
from core.methods.crm.maths import L2_FEATURE_NAMES, l2_feature_vector
from core.methods.crm.store import CRM_BASIS

logger = logging.getLogger(__name__)

N_SPLITS = 5
SEED = 42
L2_FEATURES = L2_FEATURE_NAMES
LTS_DIRECTION = "pc1"


def cross_validated_scores(
    features: np.ndarray, labels: np.ndarray, *, n_splits: int = N_SPLITS, seed: int = SEED
) -> np.ndarray:
    """Out-of-fold P(memorized) for every row (stratified k-fold, shuffled with ``seed``).

    Args:
        features: ``(n, d)`` finite feature matrix.
        labels: ``(n,)`` with 1 = memorized, 0 = grounded.
        n_splits: folds; reduced to the size of the smaller class when that is smaller (at least 2).

    Returns:
        ``(n,)`` probabilities; row i comes from the model fitted on the folds that do not contain i.

    Raises:
        ValueError: shape mismatch, non-finite features, or fewer than 2 rows of either class.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels).astype(int)
    if x.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"features must be (n, d) with n = len(labels), got {x.shape} and {y.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("features must be finite")
    smaller = int(min((y == 0).sum(), (y == 1).sum()))
    if smaller < 2:
        raise ValueError("cross-validation needs at least 2 rows of each label")
    folds = StratifiedKFold(n_splits=min(n_splits, smaller), shuffle=True, random_state=seed)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    return cross_val_predict(model, x, y, cv=folds, method="predict_proba")[:, 1]


def _fitted(name: str, **fields: Any) -> None:
    """Register a cross-validated detector (higher = memorized); it has no single-row score."""

    def score(inp: DetectorInput) -> float:
        raise ValueError(f"{name} is fitted by cross-validation during an evaluation; it has no single-row score")

    register(Detector(name=name, higher_means=MEMORIZED_HIGH, score=score, needs_fit=True, **fields))


def l2_features(inp: DetectorInput) -> np.ndarray:
    """CRM level-2 statistics of KL_t over the window, shape ``(7,)``
    (:func:`core.methods.crm.maths.l2_feature_vector`: when the answer is not longer than the split there is no
    late mean, encoded as ``late = 0`` with the indicator ``has_late = 0``, never as a copy of the early mean)."""
    return l2_feature_vector(inp.result.kl_stats)


_fitted(
    "crm_l2_lr",
    label="CRM L2 statistics, logistic regression (5-fold CV)",
    cost="free",
    source="CRM appendix P.2 + §3 (stratified 5-fold CV, seed 42)",
    features=l2_features,
    page="Layer trajectories",
)


def lts_features(inp: DetectorInput) -> np.ndarray:
    """Per-layer LTS features of one row along PC1 over the kept layers (CRM eq. 1, Φ_L3), shape ``(|L|,)``.

    Raises:
        ValueError: when no CRM basis exists for this model and template.
    """
    basis = basis_for(inp)
    lts = np.asarray(basis.lts(displacement_for(inp), LTS_DIRECTION), dtype=np.float64)
    return lts[list(basis.kept_layers)] if len(basis.kept_layers) else lts


_fitted(
    "crm_lr_cv",
    label="CRM L3 LTS (PC1), logistic regression, 5-fold CV on these rows",
    cost="forward",
    source="CRM eq. 1, appendix P.3 + §3 (stratified 5-fold CV, seed 42)",
    features=lts_features,
    reads=frozenset({PROMPT_STATES}),
    artifact=CRM_BASIS,
    page="Layer trajectories",
)
