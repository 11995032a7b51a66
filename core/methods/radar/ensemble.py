"""RADAR's fitted ensemble as plain arrays: written once to NPZ, read back in milliseconds, no pickle.

A fitted :func:`~core.methods.radar.classifier.build_ensemble` pipeline (StandardScaler, then a soft vote of a
random forest, gradient boosting, a Platt-scaled RBF SVM and a logistic regression) is a handful of arrays:
the scaler's mean and scale, every tree's nodes (children, split feature, threshold, leaf values), the SVM's
support vectors, dual coefficients, intercept, γ and its sigmoid (a, b), and the logistic regression's weights.
:func:`ensemble_arrays` reads them off the fitted scikit-learn objects; :class:`StoredEnsemble` evaluates them
with numpy exactly as scikit-learn's ``predict_proba`` and ``predict`` do (trees compare float32 inputs with
float64 thresholds; the SVM's decision is Σ αᵢ K(svᵢ, x) + b; gradient boosting adds ``learning_rate`` × each
stage's leaf to the prior's log-odds), so a stored ensemble gives the refitted one's probabilities and votes
(the tests compare them on every bundled prompt).
"""

from __future__ import annotations

from typing import Any

import numpy as np

ESTIMATORS = ("random_forest", "gradient_boosting", "svm", "logistic_regression")
"""The ensemble's members in voting order (the names of :func:`~core.methods.radar.classifier.build_ensemble`)."""
FORMAT = 1
"""Version of the array layout (a stored file of another version is refitted instead)."""


def _expit(x: np.ndarray) -> np.ndarray:
    from scipy.special import expit

    return expit(x)


def _trees(prefix: str, trees: list[Any], values: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Concatenated node arrays of several trees (children re-based per tree) and each tree's first node."""
    offsets = np.cumsum([0] + [t.node_count for t in trees]).astype(np.int64)
    left, right = [], []
    for t, start in zip(trees, offsets[:-1], strict=True):
        left.append(np.where(t.children_left >= 0, t.children_left + start, -1))
        right.append(np.where(t.children_right >= 0, t.children_right + start, -1))
    return {
        f"{prefix}_offsets": offsets,
        f"{prefix}_left": np.concatenate(left).astype(np.int64),
        f"{prefix}_right": np.concatenate(right).astype(np.int64),
        f"{prefix}_feature": np.concatenate([t.feature for t in trees]).astype(np.int64),
        f"{prefix}_threshold": np.concatenate([t.threshold for t in trees]).astype(np.float64),
        f"{prefix}_value": np.concatenate(values).astype(np.float64),
    }


def ensemble_arrays(pipeline: Any) -> dict[str, np.ndarray]:
    """The arrays of a fitted :func:`~core.methods.radar.classifier.build_ensemble` pipeline.

    Raises:
        ValueError: a pipeline of another shape (other members, classes or calibration).
    """
    scaler, voter = pipeline[0], pipeline[-1]
    members = dict(zip([name for name, _ in voter.estimators], voter.estimators_, strict=True))
    if tuple(members) != ESTIMATORS or list(voter.classes_) != [0, 1]:
        raise ValueError(f"expected the members {ESTIMATORS} over the classes [0, 1]")
    forest, boosting, svm, logistic = (members[n] for n in ESTIMATORS)
    if len(svm.calibrated_classifiers_) != 1 or svm.method != "sigmoid":
        raise ValueError("expected one sigmoid-calibrated SVM (ensemble=False)")
    calibrated = svm.calibrated_classifiers_[0]
    svc, sigmoid = calibrated.estimator, calibrated.calibrators[0]
    rf_trees = [e.tree_ for e in forest.estimators_]
    gb_trees = [e.tree_ for e in boosting.estimators_[:, 0]]
    probe = np.zeros((1, scaler.mean_.shape[0]), dtype=np.float32)
    return {
        "format": np.array(FORMAT),
        "scaler_mean": np.asarray(scaler.mean_, dtype=np.float64),
        "scaler_scale": np.asarray(scaler.scale_, dtype=np.float64),
        **_trees("rf", rf_trees, [t.value[:, 0, :] for t in rf_trees]),
        **_trees("gb", gb_trees, [t.value[:, 0, 0] for t in gb_trees]),
        "gb_init": np.asarray(boosting._raw_predict_init(probe), dtype=np.float64).ravel()[:1],
        "gb_learning_rate": np.array(float(boosting.learning_rate)),
        "svm_support": np.asarray(svc.support_vectors_, dtype=np.float64),
        "svm_dual": np.asarray(svc.dual_coef_, dtype=np.float64).ravel(),
        "svm_intercept": np.asarray(svc.intercept_, dtype=np.float64).ravel(),
        "svm_gamma": np.array(float(svc._gamma)),
        "svm_sigmoid": np.array([float(sigmoid.a_), float(sigmoid.b_)]),
        "lr_coef": np.asarray(logistic.coef_, dtype=np.float64).ravel(),
        "lr_intercept": np.asarray(logistic.intercept_, dtype=np.float64).ravel(),
    }


class StoredEnsemble:
    """The ensemble evaluated from its arrays (:func:`ensemble_arrays`), with scikit-learn's arithmetic."""

    names = ESTIMATORS

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        missing = [k for k in ("scaler_mean", "rf_value", "gb_value", "svm_support", "lr_coef") if k not in arrays]
        if missing or int(arrays.get("format", -1)) != FORMAT:
            raise ValueError(f"not a RADAR ensemble of format {FORMAT} (missing {missing})")
        self.arrays = {k: np.asarray(v) for k, v in arrays.items()}

    def scale(self, X: np.ndarray) -> np.ndarray:
        a = self.arrays
        return (np.atleast_2d(np.asarray(X, dtype=np.float64)) - a["scaler_mean"]) / a["scaler_scale"]

    def _leaves(self, prefix: str, tree: int, X32: np.ndarray) -> np.ndarray:
        """The leaf each row of ``X32`` reaches in tree ``tree`` (x ≤ threshold goes left, as scikit-learn)."""
        a = self.arrays
        left, right = a[f"{prefix}_left"], a[f"{prefix}_right"]
        feature, threshold = a[f"{prefix}_feature"], a[f"{prefix}_threshold"]
        node = np.full(X32.shape[0], a[f"{prefix}_offsets"][tree], dtype=np.int64)
        rows = np.arange(X32.shape[0])
        while True:
            inner = left[node] >= 0
            if not inner.any():
                return node
            n = node[inner]
            go_left = X32[rows[inner], feature[n]].astype(np.float64) <= threshold[n]
            node[inner] = np.where(go_left, left[n], right[n])

    def _forest(self, X32: np.ndarray) -> np.ndarray:
        a = self.arrays
        n_trees = len(a["rf_offsets"]) - 1
        total = np.zeros((X32.shape[0], a["rf_value"].shape[1]))
        for t in range(n_trees):
            proba = a["rf_value"][self._leaves("rf", t, X32)].copy()
            norm = proba.sum(axis=1, keepdims=True)
            norm[norm == 0.0] = 1.0
            total += proba / norm
        return total / n_trees

    def _boosting(self, X32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = self.arrays
        raw = np.full(X32.shape[0], float(a["gb_init"][0]))
        rate = float(a["gb_learning_rate"])
        for t in range(len(a["gb_offsets"]) - 1):
            raw += rate * a["gb_value"][self._leaves("gb", t, X32)]
        p = _expit(raw)
        return np.stack([1.0 - p, p], axis=1), (raw >= 0).astype(np.int64)

    def _svm(self, Xs: np.ndarray) -> np.ndarray:
        a = self.arrays
        sq = ((Xs[:, None, :] - a["svm_support"][None, :, :]) ** 2).sum(axis=-1)
        decision = np.exp(-float(a["svm_gamma"]) * sq) @ a["svm_dual"] + a["svm_intercept"][0]
        slope, offset = a["svm_sigmoid"]
        p = _expit(-(slope * decision + offset))
        return np.stack([1.0 - p, p], axis=1)

    def _logistic(self, Xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = self.arrays
        decision = Xs @ a["lr_coef"] + a["lr_intercept"][0]
        p = _expit(decision)
        return np.stack([1.0 - p, p], axis=1), (decision > 0).astype(np.int64)

    def outputs(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each member's P(recall) and hard vote for each row of ``X`` (n, 37): two (n, 4) arrays."""
        Xs = self.scale(X)
        X32 = Xs.astype(np.float32)  # trees read float32 inputs, as scikit-learn's trees do
        forest = self._forest(X32)
        boosting, boosting_votes = self._boosting(X32)
        svm = self._svm(Xs)
        logistic, logistic_votes = self._logistic(Xs)
        probs = np.stack([forest[:, 1], boosting[:, 1], svm[:, 1], logistic[:, 1]], axis=1)
        votes = np.stack(
            [np.argmax(forest, axis=1), boosting_votes, np.argmax(svm, axis=1), logistic_votes], axis=1
        ).astype(np.int64)
        return probs, votes

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """The soft vote's (n, 2) probabilities (the mean of the members'), as ``VotingClassifier``'s."""
        p = self.outputs(X)[0].mean(axis=1)
        return np.stack([1.0 - p, p], axis=1)
