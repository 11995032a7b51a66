"""RADAR's soft-vote ensemble, RDS and RCI on synthetic features."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.methods import radar


def _synthetic(n_per_class: int, seed: int, shift: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(2 * n_per_class, 37))
    y = np.array([1] * n_per_class + [0] * n_per_class)
    X[y == 1, :5] += shift  # recall rows differ in five features
    return X, y


def test_ensemble_trains_and_predicts_on_synthetic_features():
    X, y = _synthetic(15, seed=0)
    clf = radar.RadarClassifier.fit(X, y)
    X_test, y_test = _synthetic(20, seed=1)
    preds = clf.predict(X_test)
    accuracy = np.mean([(p.label == radar.RECALL) == bool(t) for p, t in zip(preds, y_test)])
    assert accuracy >= 0.9
    p_bar = clf.p_recall(X_test)
    for p, soft in zip(preds, p_bar):
        assert 0.0 <= p.p_recall <= 1.0
        assert p.p_recall == pytest.approx(float(soft))  # VotingClassifier soft vote = mean of the four p_j
        assert p.p_recall == pytest.approx(np.mean(list(p.probabilities.values())))
        assert set(p.votes) == {"random_forest", "gradient_boosting", "svm", "logistic_regression"}
        assert (p.label == radar.RECALL) == (np.mean(list(p.votes.values())) > 0.5)  # the paper's ŷ
        assert p.confidence == pytest.approx(p.p_recall if p.label == radar.RECALL else 1 - p.p_recall)
    again = radar.RadarClassifier.fit(X, y)  # fixed random_state: identical probabilities
    np.testing.assert_array_equal(again.p_recall(X_test), p_bar)


def test_the_members_are_named_and_titled_in_voting_order():
    steps = radar.build_ensemble().named_steps["ensemble"].estimators
    assert [name for name, _ in steps] == ["random_forest", "gradient_boosting", "svm", "logistic_regression"]
    assert [type(est).__name__ for _, est in steps] == [
        "RandomForestClassifier",
        "GradientBoostingClassifier",
        "CalibratedClassifierCV",
        "LogisticRegression",
    ]
    titles = ["Random forest", "Gradient boosting", "SVM (Platt-scaled)", "Logistic regression"]
    assert list(radar.ESTIMATOR_TITLES) == [name for name, _ in steps]
    assert list(radar.ESTIMATOR_TITLES.values()) == titles


def test_ensemble_rejects_bad_training_data():
    X, y = _synthetic(15, seed=0)
    with pytest.raises(ValueError):
        radar.RadarClassifier.fit(X[:, :10], y)
    with pytest.raises(ValueError):
        radar.RadarClassifier.fit(X, np.ones_like(y))
    X_bad = X.copy()
    X_bad[0, 0] = np.inf
    with pytest.raises(ValueError):
        radar.RadarClassifier.fit(X_bad, y)


def test_rds_and_rci_by_hand():
    X, y = _synthetic(15, seed=2)
    clf = radar.RadarClassifier.fit(X, y)
    x = X[3]
    mu, sd = X.mean(axis=0), X.std(axis=0)

    def score(names):
        idx = [radar.FEATURE_NAMES.index(n) for n in names]
        z = np.mean((x[idx] - mu[idx]) / sd[idx])
        return 1 / (1 + math.exp(-z))

    pred = clf.predict(x[None, :])[0]
    assert pred.rds == pytest.approx(score(radar.RDS_FEATURES), rel=1e-9)
    assert pred.rci == pytest.approx(score(radar.RCI_FEATURES), rel=1e-9)
    at_mean = clf.predict(mu[None, :])[0]
    assert at_mean.rds == pytest.approx(0.5) and at_mean.rci == pytest.approx(0.5)
