"""Fitting the two axes of the headline (:mod:`core.engine.axes`) on behavior-labeled calibration rows.

* Axis 1: scikit-learn's :class:`~sklearn.linear_model.LogisticRegression` on the standardized observations at the
  span (label 1 = the model's answer was read from the context: by behavior on conflict rows, by the swap test on
  rows whose context agrees with memory), stored as plain coefficients; its cut and inconclusive band are fitted on
  5-fold cross-validated probabilities, so the band reflects held-out, not in-sample, errors.
* Axis 2: a cut on the span's parametric log-probability (label 1 = the answer is what the model says without the
  context) and its band.
* The joint resolver: the same logistic regression on both axes' observations (:data:`JOINT_FEATURES`), with its
  cut and band on cross-validated probabilities; the headline consults it only where the decision table says
  *Inconclusive*.
* The agreement resolver: the same logistic regression (:data:`AGREEMENT_FEATURES`) on the rows whose span is in
  the context and in the no-context answer, labeled by the swap test; the headline consults it there when axis 1
  is not *needed* (the text cannot tell reading from recalling when context and memory agree). Where too few of
  those rows kept the model's own answer to fit a regression, it is their base rate (:func:`fit_agreement`).

A cut is the score that maximizes balanced accuracy; the band is the narrowest interval around it, holding at most
``max_inside`` of the rows, that maximizes the balanced accuracy of the rows outside it (:func:`cut_and_band`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict

from core.engine.axes_calibration import (
    AGREEMENT_FEATURES,
    JOINT_FEATURES,
    RELIANCE_FEATURES,
    SUPPORT_FEATURE,
    AxesCalibration,
    JointModel,
)

MAX_INSIDE = 0.10
"""At most this share of calibration rows may fall inside a band."""
SEED = 0


def balanced_accuracy(pred: np.ndarray, y: np.ndarray) -> float:
    """Mean of the two classes' recalls (``nan`` when a class is absent)."""
    pred, y = np.asarray(pred, bool), np.asarray(y, bool)
    if y.all() or not y.any():
        return float("nan")
    return float(0.5 * ((pred[y]).mean() + (~pred[~y]).mean()))


def best_cut(scores: np.ndarray, y: np.ndarray) -> float:
    """The score ``c`` maximizing the balanced accuracy of ``score >= c`` ⇒ class 1 (midpoints between sorted
    distinct scores; ties go to the smallest such midpoint)."""
    s = np.unique(np.asarray(scores, np.float64))
    if s.size < 2:
        raise ValueError("need at least two distinct scores to place a cut")
    cands = (s[:-1] + s[1:]) / 2.0
    accs = [balanced_accuracy(scores >= c, y) for c in cands]
    return float(cands[int(np.nanargmax(accs))])


def cut_and_band(scores: np.ndarray, y: np.ndarray, max_inside: float = MAX_INSIDE) -> tuple[float, float, float]:
    """``(cut, low, high)``: :func:`best_cut` and the band around it that leaves the most balanced-accurate
    decisive rows with at most ``max_inside`` of the rows inside (ties → the narrowest band)."""
    scores, y = np.asarray(scores, np.float64), np.asarray(y, bool)
    cut = best_cut(scores, y)
    below = np.sort(scores[scores < cut])[::-1]
    above = np.sort(scores[scores >= cut])
    limit = int(np.floor(max_inside * scores.size))
    best = (balanced_accuracy(scores >= cut, y), 0.0, cut, cut)
    for i in range(min(limit, below.size) + 1):
        for j in range(min(limit - i, above.size) + 1):
            if i == j == 0:
                continue
            low = (below[i - 1] + below[i]) / 2 if 0 < i < below.size else (below[i - 1] if i else cut)
            high = (above[j - 1] + above[j]) / 2 if 0 < j < above.size else (above[j - 1] if j else cut)
            outside = (scores < low) | (scores > high)
            acc = balanced_accuracy(scores[outside] >= cut, y[outside])
            width = high - low
            if np.isfinite(acc) and (acc > best[0] + 1e-12 or (abs(acc - best[0]) <= 1e-12 and width < best[1])):
                best = (acc, width, low, high)
    return cut, float(min(best[2], cut)), float(max(best[3], cut))


def fit_reliance(X: np.ndarray, y: np.ndarray, seed: int = SEED) -> dict[str, Any]:
    """The logistic regression of axis 1: standardization, coefficients, and 5-fold CV probabilities."""
    X, y = np.asarray(X, np.float64), np.asarray(y, int)
    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale[scale < 1e-6] = 1.0  # a constant column (the stored scale is rounded to 6 decimals)
    Z = (X - mean) / scale
    model = LogisticRegression(C=1.0, max_iter=1000)
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=seed)
    cv = cross_val_predict(model, Z, y, cv=folds, method="predict_proba")[:, 1]
    model.fit(Z, y)
    return {
        "mean": mean,
        "scale": scale,
        "coef": model.coef_[0],
        "intercept": float(model.intercept_[0]),
        "cv_probability": cv,
    }


def _r6(v: float) -> float:
    return round(float(v), 6)


def _stored(lr: dict[str, Any]) -> dict[str, Any]:
    """The fields of a :class:`~core.engine.axes_calibration.StandardizedLogistic` from :func:`fit_reliance`'s
    output, rounded to 6 decimals as stored."""
    return {
        "mean": tuple(_r6(v) for v in lr["mean"]),
        "scale": tuple(_r6(v) for v in lr["scale"]),
        "coef": tuple(_r6(v) for v in lr["coef"]),
        "intercept": _r6(lr["intercept"]),
    }


def fit_joint(
    joint_X: np.ndarray, read: np.ndarray, max_inside: float = MAX_INSIDE, features: tuple[str, ...] = JOINT_FEATURES
) -> JointModel:
    """The joint resolver from ``joint_X`` (columns ``features``) and ``read`` labels."""
    if joint_X.shape[1] != len(features):
        raise ValueError(f"joint_X needs {len(features)} columns ({', '.join(features)})")
    lr = fit_reliance(joint_X, read)
    cut, low, high = cut_and_band(lr["cv_probability"], np.asarray(read, bool), max_inside)
    return JointModel(**_stored(lr), threshold=_r6(cut), band=(_r6(low), _r6(high)), features=features)


MIN_AGREEMENT_ROWS = 10
"""The fewest agreeing rows of each behavior the agreement resolver's regression is fitted on; with fewer of one
behavior (but at least this many rows) it is the rows' base rate, when that is decisive (:func:`fit_agreement`)."""
PRIOR_BAND = (0.35, 0.65)
"""The agreement base rate's inconclusive band: a base rate inside it decides nothing."""


def fit_agreement(
    X: np.ndarray, read: np.ndarray, max_inside: float = MAX_INSIDE, features: tuple[str, ...] = AGREEMENT_FEATURES
) -> JointModel | None:
    """The agreement resolver from the agreeing rows' observations ``X`` and their swap-test labels ``read``: a
    regression (:func:`fit_joint`) when each behavior has :data:`MIN_AGREEMENT_ROWS` rows; else, with at least that
    many rows, their base rate — P(read) = (followed + 1) / (rows + 2), the same for every run — which decides
    only outside :data:`PRIOR_BAND` (too few rows kept the model's own answer to learn from the observations, but
    the model's habit where context and memory agree is known); else none."""
    read = np.asarray(read, bool)
    followed, n = int(read.sum()), int(read.size)
    if min(followed, n - followed) >= MIN_AGREEMENT_ROWS:
        return fit_joint(X, read, max_inside, features)
    if n < MIN_AGREEMENT_ROWS:
        return None
    rate = (followed + 1) / (n + 2)
    k = len(features)
    return JointModel(
        mean=(0.0,) * k,
        scale=(1.0,) * k,
        coef=(0.0,) * k,
        intercept=_r6(np.log(rate / (1 - rate))),
        threshold=0.5,
        band=PRIOR_BAND,
        features=features,
        prior=(followed, n),
    )


def fit_axes(
    reliance_X: np.ndarray,
    read: np.ndarray,
    support_score: np.ndarray,
    supported: np.ndarray,
    *,
    model: str,
    source: str,
    fitted_on: dict[str, Any],
    span_level: float | None,
    features: tuple[str, ...] = RELIANCE_FEATURES,
    support_feature: str = SUPPORT_FEATURE,
    max_inside: float = MAX_INSIDE,
    joint_X: np.ndarray | None = None,
    joint_features: tuple[str, ...] = JOINT_FEATURES,
    agreement_X: np.ndarray | None = None,
    agreement_read: np.ndarray | None = None,
    agreement_features: tuple[str, ...] = AGREEMENT_FEATURES,
    provenance: dict[str, Any] | None = None,
) -> AxesCalibration:
    """An :class:`AxesCalibration` from calibration rows: axis 1 from ``reliance_X`` (columns ``features``) and
    ``read`` labels; axis 2 from ``support_score`` (the ``support_feature``) and ``supported`` labels; the joint
    resolver from ``joint_X`` (columns ``joint_features``, the rows of axis 1) when given; the agreement resolver from
    ``agreement_X`` (columns ``agreement_features``) and its own ``agreement_read`` labels when given
    (:func:`fit_agreement`)."""
    lr = fit_reliance(reliance_X, read)
    r_cut, r_low, r_high = cut_and_band(lr["cv_probability"], np.asarray(read, bool), max_inside)
    s_cut, s_low, s_high = cut_and_band(support_score, np.asarray(supported, bool), max_inside)
    joint = None
    if joint_X is not None:
        joint = fit_joint(np.asarray(joint_X, np.float64), read, max_inside, joint_features)
    agreement = None
    if agreement_X is not None and agreement_read is not None:
        agreement = fit_agreement(np.asarray(agreement_X, np.float64), agreement_read, max_inside, agreement_features)
    return AxesCalibration(
        **_stored(lr),
        model=model,
        reliance_threshold=_r6(r_cut),
        reliance_band=(_r6(r_low), _r6(r_high)),
        support_threshold=_r6(s_cut),
        support_band=(_r6(s_low), _r6(s_high)),
        span_level=None if span_level is None else _r6(span_level),
        source=source,
        features=tuple(features),
        support_feature=support_feature,
        fitted_on=fitted_on,
        provenance=provenance or {},
        joint=joint,
        agreement=agreement,
    )
