"""The shared standardized logistic regression (core.methods.logistic): fit, checks, P and τ's wording."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from core.methods.logistic import LogisticParams, fit_logistic, protocol


def _rows(n: int = 80, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.array([0, 1] * (n // 2))
    X = rng.normal(size=(n, 4))
    X[:, 1] += 1.2 * y
    X[:, 3] = 2.0  # a constant feature: scale 1, no effect
    return X, y


def test_fit_matches_an_independent_scikit_learn_pipeline() -> None:
    X, y = _rows()
    params, oof = fit_logistic(X, y, 4, alpha=0.1, n_boot=50)
    folds = StratifiedKFold(5, shuffle=True, random_state=42)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=5000))
    want_oof = cross_val_predict(pipe, X, y, cv=folds, method="predict_proba")[:, 1]
    np.testing.assert_allclose(oof, want_oof, rtol=1e-6, atol=1e-9)
    full = pipe.fit(X, y)
    np.testing.assert_allclose(params.probabilities(X), full.predict_proba(X)[:, 1], rtol=1e-6, atol=1e-9)
    assert params.scale[3] == 1.0 and params.coef[3] == pytest.approx(0.0, abs=1e-9)
    assert params.tau == pytest.approx(np.quantile(want_oof[y == 0], 0.9))
    assert params.fpr_oof == pytest.approx(np.mean(want_oof[y == 0] > params.tau))
    assert params.fnr_oof == pytest.approx(np.mean(want_oof[y == 1] <= params.tau))
    assert (params.n_memorized, params.n_grounded) == (40, 40)
    assert params.auc_oof_ci[0] <= params.auc_oof <= params.auc_oof_ci[1]
    assert set(params.params()) == {f.name for f in dataclasses.fields(LogisticParams)}
    assert "StratifiedKFold(5" in protocol("4 features") and "4 features" in protocol("4 features")


@pytest.mark.parametrize(
    ("X", "y", "d", "alpha", "match"),
    [
        (np.zeros((10, 2)), np.array([0, 1] * 5), 3, 0.05, "X must be"),
        (np.full((10, 2), np.nan), np.array([0, 1] * 5), 2, 0.05, "finite"),
        (np.zeros((8, 2)), np.array([0] * 4 + [1] * 4), 2, 0.05, "rows of each label"),
        (np.zeros((10, 2)), np.array([0, 1] * 5), 2, 1.5, "alpha"),
    ],
)
def test_fit_refuses_bad_input(X, y, d, alpha, match) -> None:
    with pytest.raises(ValueError, match=match):
        fit_logistic(X, y, d, alpha=alpha)


def test_check_probabilities_and_tau_source() -> None:
    params = LogisticParams(
        mean=[1.0, 0.0], scale=[2.0, 1.0], coef=[0.5, -1.0], intercept=0.25, tau=0.6, alpha=0.05,
        n_memorized=3, n_grounded=7, fpr_oof=0.1, fnr_oof=0.2, auc_oof=0.9, auc_oof_ci=[0.8, 1.0],
    )  # fmt: skip
    params.check("m", 2)
    z = 0.25 + 0.5 * (3.0 - 1.0) / 2.0 - 1.0 * 0.5
    assert params.probabilities(np.array([3.0, 0.5]))[0] == pytest.approx(1 / (1 + np.exp(-z)))
    assert params.probabilities(np.array([[3.0, 0.5], [1.0, 0.0]])).shape == (2,)
    with pytest.raises(ValueError, match="expected 2 features"):
        params.probabilities(np.zeros(3))
    with pytest.raises(ValueError, match="one value per head"):
        params.check("m", 3, "head")
    with pytest.raises(ValueError, match="scale"):
        dataclasses.replace(params, scale=[0.0, 1.0]).check("m", 2)
    with pytest.raises(ValueError, match="non-finite"):
        dataclasses.replace(params, intercept=float("inf")).check("m", 2)
    assert params.tau_source("P(x)", "clean rows") == (
        "the 0.95-quantile of the out-of-fold P(x) over 7 clean rows (out-of-fold FPR 10.0%, FNR 20.0%)"
    )
