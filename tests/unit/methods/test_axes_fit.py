"""Fitting the headline's axes (core.methods.axes_fit): the cut and band, the stored logistic regression against
scikit-learn's own predictions, and the fitted calibration's checks."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score

from core.engine.axes_calibration import AxesCalibration
from core.methods.axes_fit import balanced_accuracy, best_cut, cut_and_band, fit_axes, fit_reliance

FEATURES = ("span_llr", "ln_span_kl", "span_entropy_parametric")


def _data(n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.5
    X = rng.normal(size=(n, 3))
    X[:, 0] += np.where(y, 2.0, -2.0)  # the span's LLR separates the classes, the others are noise
    return X, y


def test_balanced_accuracy_matches_sklearn():
    rng = np.random.default_rng(1)
    y, pred = rng.random(50) < 0.3, rng.random(50) < 0.5
    assert balanced_accuracy(pred, y) == pytest.approx(balanced_accuracy_score(y, pred))
    assert np.isnan(balanced_accuracy(pred, np.ones(50, bool)))


def test_cut_separates_and_band_holds_the_overlap():
    scores = np.array([0.1, 0.2, 0.3, 0.45, 0.55, 0.7, 0.8, 0.9, 0.5, 0.52])
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 1], bool)
    cut = best_cut(scores, y)
    assert balanced_accuracy(scores >= cut, y) == 1.0 and 0.5 < cut < 0.52
    cut, low, high = cut_and_band(scores, y, max_inside=0.2)
    assert low <= cut <= high
    # a perfectly separated set needs no band: the narrowest best band is the cut itself
    assert (low, high) == (cut, cut)
    noisy = np.array([0.1, 0.2, 0.35, 0.4, 0.6, 0.65, 0.8, 0.9])
    ny = np.array([0, 0, 1, 0, 1, 0, 1, 1], bool)
    cut, low, high = cut_and_band(noisy, ny, max_inside=0.5)
    inside = (noisy >= low) & (noisy <= high)
    assert 0 < inside.sum() <= 4 and balanced_accuracy(noisy[~inside] >= cut, ny[~inside]) == 1.0


def test_stored_coefficients_reproduce_sklearn_probabilities():
    X, y = _data()
    lr = fit_reliance(X, y)
    Z = (X - lr["mean"]) / lr["scale"]
    ref = LogisticRegression(C=1.0, max_iter=1000).fit(Z, y.astype(int)).predict_proba(Z)[:, 1]
    cal = AxesCalibration(
        model="m",
        mean=tuple(lr["mean"]),
        scale=tuple(lr["scale"]),
        coef=tuple(lr["coef"]),
        intercept=lr["intercept"],
        reliance_threshold=0.5,
        reliance_band=(0.5, 0.5),
        support_threshold=-3.0,
        support_band=(-3.0, -3.0),
        features=FEATURES,
    )
    ours = [cal.reliance(dict(zip(cal.features, row))) for row in X]
    assert np.allclose(ours, ref, atol=1e-9)
    assert lr["cv_probability"].shape == (len(y),) and lr["coef"][0] > 0


def test_fit_axes_writes_a_checked_calibration():
    X, y = _data()
    rng = np.random.default_rng(2)
    lp = np.where(~y, -1.0, -8.0) + rng.normal(scale=1.5, size=y.size)
    cal = fit_axes(X, y, lp, ~y, model="m", source="test", fitted_on={"rows": int(y.size)}, span_level=1.5,
                   features=FEATURES)  # fmt: skip
    assert cal.features == FEATURES and cal.span_level == 1.5 and cal.version == 2
    again = AxesCalibration.from_dict(cal.to_dict())
    assert again == cal
    assert cal.reliance_band[0] <= cal.reliance_threshold <= cal.reliance_band[1]
    assert -8.0 < cal.support_threshold < -1.0
    inside = (lp >= cal.support_band[0]) & (lp <= cal.support_band[1])
    assert inside.mean() <= 0.1 + 1e-9  # at most 10 % of the rows inside the band
