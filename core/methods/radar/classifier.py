"""RADAR's classifier (§2.3): StandardScaler + a soft-vote ensemble of RF, GB, SVM and LR, plus RDS and RCI.

The ensemble is fitted on a model's own features of the 30 bundled training prompts, stored as plain arrays
(:mod:`~core.methods.radar.ensemble`, NPZ: no pickles) and kept in memory per (model, feature content): the
embedded model's ships in ``assets/radar/ensemble/``, any other model's is written to the user cache the first
time it is fitted, so a process reads it in milliseconds instead of refitting. RDS and RCI
(appendix C) are only described in words in the paper; :data:`~core.methods.radar.features.RDS_FORMULA` and
:data:`~core.methods.radar.features.RCI_FORMULA` give the formulas used here.
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.io import EMBEDDED_SLUG, atomic_write_bytes
from core.methods.radar.ensemble import ESTIMATORS, StoredEnsemble, ensemble_arrays
from core.methods.radar.features import FEATURE_NAMES, RCI_FEATURES, RDS_FEATURES
from core.methods.radar.prompts import RADAR_DIR, REASONING, RECALL, TRAIN
from core.methods.radar.store import FeatureTable, feature_table_for
from core.model import artifacts
from core.model.handle import ModelHandle
from core.model.progress import Progress

logger = logging.getLogger(__name__)


def build_ensemble(random_state: int = 0) -> Any:
    """StandardScaler + soft-vote ensemble of RF, GB, SVM and LR (§2.3), as a scikit-learn Pipeline.

    The SVM's probabilities come from Platt scaling over 5 stratified folds, as ``SVC(probability=True)``
    computes them; scikit-learn 1.9 deprecates that flag in favor of exactly this
    ``CalibratedClassifierCV(SVC(), method="sigmoid", ensemble=False)``.
    """
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier, VotingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    members = (
        RandomForestClassifier(n_estimators=200, random_state=random_state),
        GradientBoostingClassifier(random_state=random_state),
        CalibratedClassifierCV(SVC(kernel="rbf", random_state=random_state), method="sigmoid", cv=5, ensemble=False),
        LogisticRegression(max_iter=5000),
    )
    voter = VotingClassifier(estimators=list(zip(ESTIMATORS, members, strict=True)), voting="soft")
    return Pipeline([("scaler", StandardScaler()), ("ensemble", voter)])


ESTIMATOR_TITLES = dict(
    zip(ESTIMATORS, ("Random forest", "Gradient boosting", "SVM (Platt-scaled)", "Logistic regression"), strict=True)
)
"""How a page names each member of the ensemble (keys: :data:`~core.methods.radar.ensemble.ESTIMATORS`)."""


def _sigmoid(x: float) -> float:
    return float(1.0 / (1.0 + math.exp(-x))) if x >= 0 else float(math.exp(x) / (1.0 + math.exp(x)))


@dataclass(frozen=True)
class RadarPrediction:
    """The ensemble's reading of one prompt (§2.3).

    Attributes:
        p_recall: p̄ = (1/M) Σ_j p_j, the mean of the four classifiers' recall probabilities (soft vote).
        label: the paper's ŷ = 1[(1/M) Σ_j ŷ_j > 1/2] — a strict majority of hard votes (2–2 → reasoning).
        confidence: p̄ if ŷ = recall else 1 − p̄ (the paper's "conf").
        soft_label: recall iff p̄ > 1/2 (scikit-learn's soft vote).
        probabilities: each classifier's p_j.
        votes: each classifier's hard label ŷ_j (1 = recall).
        rds, rci: Recall Detection Score and Reasoning Complexity Index (see :data:`RDS_FORMULA`).
    """

    p_recall: float
    label: str
    confidence: float
    soft_label: str
    probabilities: dict[str, float]
    votes: dict[str, int]
    rds: float
    rci: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RadarClassifier:
    """The fitted ensemble plus the training-set statistics RDS and RCI are normalized with.

    ``pipeline`` is the scikit-learn pipeline just fitted, or a :class:`StoredEnsemble` read from its arrays;
    both give the same probabilities and votes.
    """

    def __init__(self, pipeline: Any, mean: np.ndarray, std: np.ndarray, n_train: int) -> None:
        self.pipeline = pipeline
        self.mean = mean
        self.std = std
        self.n_train = n_train

    @classmethod
    def fit(cls, X: np.ndarray, y: np.ndarray, random_state: int = 0) -> RadarClassifier:
        """Fit on features ``X`` (n, 37) and labels ``y`` (1 = recall, 0 = reasoning)."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.int64)
        if X.ndim != 2 or X.shape[1] != len(FEATURE_NAMES):
            raise ValueError(f"X must have shape (n, {len(FEATURE_NAMES)}), got {X.shape}")
        if y.shape != (X.shape[0],) or set(np.unique(y).tolist()) != {0, 1}:
            raise ValueError("y must hold one 0/1 label per row, with both classes present")
        if int(np.bincount(y).min()) < 5:
            raise ValueError("need at least 5 examples of each class (the SVM's Platt scaling uses 5 folds)")
        if not np.isfinite(X).all():
            raise ValueError("X holds non-finite values")
        pipeline = build_ensemble(random_state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=UserWarning)
            pipeline.fit(X, y)
        std = X.std(axis=0)
        return cls(pipeline, X.mean(axis=0), np.where(std > 0, std, 1.0), int(X.shape[0]))

    @classmethod
    def from_table(cls, table: FeatureTable, random_state: int = 0) -> RadarClassifier:
        """Fit on the training rows of a :class:`FeatureTable`."""
        _, X = table.split(TRAIN)
        return cls.fit(X, table.labels(TRAIN), random_state)

    def p_recall(self, X: np.ndarray) -> np.ndarray:
        """p̄ for each row of ``X`` (n, 37)."""
        return self.pipeline.predict_proba(np.atleast_2d(X))[:, 1]

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The ensemble and the RDS/RCI statistics as plain arrays (:func:`ensemble_arrays`)."""
        arrays = (
            dict(self.pipeline.arrays) if isinstance(self.pipeline, StoredEnsemble) else ensemble_arrays(self.pipeline)
        )
        return {**arrays, "train_mean": self.mean, "train_std": self.std, "n_train": np.array(self.n_train)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> RadarClassifier:
        """The classifier of :meth:`to_arrays` (``ValueError`` for arrays of another layout)."""
        stored = StoredEnsemble(arrays)
        mean, std = np.asarray(arrays["train_mean"], np.float64), np.asarray(arrays["train_std"], np.float64)
        if mean.shape != (len(FEATURE_NAMES),) or std.shape != mean.shape:
            raise ValueError(f"expected {len(FEATURE_NAMES)} training means and deviations")
        return cls(stored, mean, std, int(arrays["n_train"]))

    def _outputs(self, X: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Member names, each member's P(recall) (n, M) and hard votes (n, M)."""
        if isinstance(self.pipeline, StoredEnsemble):
            probs, votes = self.pipeline.outputs(X)
            return list(self.pipeline.names), probs, votes
        scaled = self.pipeline[:-1].transform(X)
        voter = self.pipeline[-1]
        names = [name for name, _ in voter.estimators]
        probs = np.stack([est.predict_proba(scaled)[:, 1] for est in voter.estimators_], axis=1)  # (n, M)
        votes = np.stack([est.predict(scaled) for est in voter.estimators_], axis=1).astype(np.int64)
        return names, probs, votes

    def _z(self, X: np.ndarray, names: Sequence[str]) -> np.ndarray:
        idx = [FEATURE_NAMES.index(n) for n in names]
        return (np.atleast_2d(X)[:, idx] - self.mean[idx]) / self.std[idx]

    def rds(self, X: np.ndarray) -> np.ndarray:
        """Recall Detection Score per row: sigmoid of the mean training-set z-score of :data:`RDS_FEATURES`."""
        return np.array([_sigmoid(float(z)) for z in self._z(X, RDS_FEATURES).mean(axis=1)])

    def rci(self, X: np.ndarray) -> np.ndarray:
        """Reasoning Complexity Index per row: the same over :data:`RCI_FEATURES`."""
        return np.array([_sigmoid(float(z)) for z in self._z(X, RCI_FEATURES).mean(axis=1)])

    def predict(self, X: np.ndarray) -> list[RadarPrediction]:
        """The paper's prediction for each row of ``X`` (n, 37)."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        names, probs, votes = self._outputs(X)
        p_bar = probs.mean(axis=1)
        rds, rci = self.rds(X), self.rci(X)
        out = []
        for i in range(X.shape[0]):
            recall = bool(votes[i].mean() > 0.5)
            out.append(
                RadarPrediction(
                    p_recall=float(p_bar[i]),
                    label=RECALL if recall else REASONING,
                    confidence=float(p_bar[i] if recall else 1.0 - p_bar[i]),
                    soft_label=RECALL if p_bar[i] > 0.5 else REASONING,
                    probabilities={n: float(p) for n, p in zip(names, probs[i], strict=True)},
                    votes={n: int(v) for n, v in zip(names, votes[i], strict=True)},
                    rds=float(rds[i]),
                    rci=float(rci[i]),
                )
            )
        return out


def cross_validated_accuracy(X: np.ndarray, y: np.ndarray, folds: int = 5, random_state: int = 0) -> float:
    """Stratified k-fold accuracy of the soft-vote ensemble on the training set (the paper's 96.7 %)."""
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=random_state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        scores = cross_val_score(build_ensemble(random_state), X, y, cv=cv, scoring="accuracy")
    return float(np.mean(scores))


_CLASSIFIERS: dict[tuple[str, str], RadarClassifier] = {}
"""Ensembles by (model name, feature-content hash). Dict reads and writes are atomic; two threads loading or
fitting the same table at once both get an identical (deterministic) classifier."""

ENSEMBLE_DIR = RADAR_DIR / "ensemble"
EMBEDDED_ENSEMBLE_PATH = ENSEMBLE_DIR / f"{EMBEDDED_SLUG}.npz"
"""The embedded model's fitted ensemble (arrays only), written by ``scripts/build_radar_assets.py``."""


def table_digest(table: FeatureTable) -> str:
    """A short hash of a feature table's values: what a stored ensemble or report was made from."""
    return hashlib.sha1(np.ascontiguousarray(table.X, dtype=np.float64).tobytes()).hexdigest()[:16]


def _read_ensemble(path: Path) -> tuple[str, RadarClassifier]:
    """``(digest of the features it was fitted on, the classifier)`` of a stored ensemble (NPZ, no pickle)."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    return str(arrays.get("digest")), RadarClassifier.from_arrays(arrays)


RADAR_ENSEMBLE = artifacts.ArtifactKind(
    name="radar-ensemble",
    read=_read_ensemble,
    bundled=lambda slug, digest: EMBEDDED_ENSEMBLE_PATH,
    cache=lambda slug, digest: Path("radar") / f"ensemble-{digest}.npz",
    fresh=lambda stored, handle, digest: None if stored[0] == digest else "fitted on other features",
)
"""A fitted ensemble, keyed by the digest of the features it was fitted on (:func:`table_digest`): the embedded
model's bundled one, else the user cache's (:func:`core.model.artifacts.find_by_content`)."""


def cached_ensemble_path(digest: str) -> Path:
    """Where an ensemble fitted on features of this digest is kept in the user cache."""
    return artifacts.content_cache_path(RADAR_ENSEMBLE, digest)


def save_classifier(clf: RadarClassifier, path: Path, *, digest: str, model: str) -> Path:
    """Write the classifier's arrays (and what they were fitted on) as an NPZ (atomically; no pickle)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **clf.to_arrays(), digest=np.array(digest), model=np.array(model))
    return atomic_write_bytes(path, buffer.getvalue())


def read_classifier(path: Path, digest: str) -> RadarClassifier | None:
    """The classifier stored at ``path`` if it was fitted on features of ``digest``, else ``None``."""
    try:
        stored, clf = _read_ensemble(path)
    except artifacts.UNREADABLE as exc:
        logger.warning("RADAR ensemble %s not used: %s", path, exc)
        return None
    return clf if stored == digest else None


def classifier_for(
    handle: ModelHandle, *, compute: bool = True, progress: Progress | None = None
) -> RadarClassifier | None:
    """The ensemble for this model, from its cached features (extracting them first if needed and ``compute``);
    read from its stored arrays when there are some, else fitted once; kept in memory per model and features."""
    table = feature_table_for(handle, compute=compute, progress=progress)
    if table is None:
        return None
    return classifier_from_table(table)


def classifier_from_table(table: FeatureTable, *, store: bool = True) -> RadarClassifier:
    """The ensemble of a table's training rows: in memory, else stored (the bundled one for the embedded
    model's features, else the user cache's), else fitted and (with ``store``) written to the user cache.

    Memoized per (model, content hash); a stored ensemble is used only for features with the same hash.
    """
    digest = table_digest(table)
    model = str(table.meta.get("model"))
    key = (model, digest)
    clf = _CLASSIFIERS.get(key)
    if clf is not None:
        return clf
    if (stored := artifacts.find_by_content(RADAR_ENSEMBLE, digest)) is not None:
        return _CLASSIFIERS.setdefault(key, stored[1])
    clf = _CLASSIFIERS.setdefault(key, RadarClassifier.from_table(table))
    if store:
        try:
            save_classifier(clf, cached_ensemble_path(digest), digest=digest, model=model)
        except OSError as exc:  # a read-only cache only costs a refit in the next process
            logger.warning("RADAR ensemble not cached: %s", exc)
    return clf
