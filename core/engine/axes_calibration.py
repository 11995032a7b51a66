"""The calibration of the two-axis headline (:mod:`core.engine.axes`): the span level κ, the fitted axes and the
joint resolver of one model, as a small checked JSON file (no pickle). Fitting lives in
:mod:`core.methods.axes_fit`; ``scripts/validate_headline.py fit`` writes the embedded model's.

Version 2 (the answer span): the axes read the run at the located answer span; the file names its features
(keys of :data:`core.engine.axes.FEATURES`) and κ (``span_level``). A file of version 1 (features of the whole
answer's first 16 tokens, the first content word) is refused with a message saying how to recalibrate.

Which axes calibration a model's headline uses is its calibration record's
(:func:`core.engine.calibration_record.record_for`: by the model's identity and the resolved template)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.engine.threshold import THRESHOLD_DIR
from core.engine.threshold_checks import finite_number, json_fields
from core.io import read_user_file

logger = logging.getLogger(__name__)

AXES_FILE = THRESHOLD_DIR / "axes-embedded.json"
"""The embedded model's bundled axis calibration (``scripts/calibrate_axes.py``)."""
MAX_AXES_BYTES = 64 * 1024
VERSION = 2
KNOWN_FEATURES = (
    "span_llr",
    "ln_span_kl",
    "span_lp_parametric",
    "span_lp_retrieval",
    "span_entropy_parametric",
    "ln_max_kl",
    "ln_mean_kl",
    "ln_L",
    "in_context",
    "in_parametric",
    "not_in_parametric",
)
"""The observation names a calibration may use (the keys of :data:`core.engine.axes.FEATURES`)."""
RELIANCE_FEATURES = ("span_llr", "ln_span_kl")
"""Axis 1's default features: the span's log-likelihood ratio and its KL (chosen on calibration rows;
``assets/validation/provenance.json``)."""
SUPPORT_FEATURE = "span_lp_parametric"
JOINT_FEATURES = (*RELIANCE_FEATURES, SUPPORT_FEATURE, "in_parametric", "not_in_parametric", "in_context")
"""The joint resolver's default features: axis 1's, axis 2's log-probability and the span's three text
observations as 0/1."""
AGREEMENT_FEATURES = (*RELIANCE_FEATURES, "span_entropy_parametric", SUPPORT_FEATURE, "span_lp_retrieval")
"""The agreement resolver's features: how far the context moved the span, how unsure the model was without it, and
the span's log-probability on each path."""
MAX_SPAN_LEVEL = 50.0


def _vector(data: dict[str, Any], name: str, n: int) -> tuple[float, ...]:
    raw = data[name]
    if not isinstance(raw, (list, tuple)) or len(raw) != n:
        raise ValueError(f"{name!r} must be a list of {n} numbers")
    return tuple(finite_number(v, name) for v in raw)


def _band(data: dict[str, Any], name: str, cut_name: str) -> tuple[float, float]:
    raw = data[name]
    if not isinstance(raw, (list, tuple)) or len(raw) != 2:
        raise ValueError(f"{name!r} must be [low, high]")
    low, high = (finite_number(v, name) for v in raw)
    cut = finite_number(data[cut_name], cut_name)
    if not low <= cut <= high:
        raise ValueError(f"{name!r} must contain its threshold: {low} <= {cut} <= {high}")
    return low, high


def _logistic_fields(
    data: Any, what: str, prefix: str, need: Sequence[str], default: tuple[str, ...]
) -> tuple[tuple[str, ...], dict[str, tuple[float, ...]]]:
    """Check a logistic regression's JSON object (``what`` names it in errors, ``prefix`` its fields): every
    ``need`` entry there, its features (``default`` when absent) distinct names of :data:`KNOWN_FEATURES`; its
    ``mean``, ``scale`` (positive) and ``coef`` vectors.

    Returns:
        ``(features, {"mean": …, "scale": …, "coef": …})``.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be one JSON object")
    for name in need:
        if name not in data:
            raise ValueError(f"{what} needs a {name!r} entry")
    raw = data.get("features", default)
    if not isinstance(raw, (list, tuple)) or not raw or not all(isinstance(f, str) for f in raw):
        raise ValueError(f"'{prefix}features' must be a non-empty list of feature names")
    features = tuple(raw)
    unknown = [f for f in features if f not in KNOWN_FEATURES]
    if unknown or len(set(features)) != len(features):
        raise ValueError(f"'{prefix}features' must be distinct names of {list(KNOWN_FEATURES)}, got {list(features)}")
    vec = {name: _vector(data, name, len(features)) for name in ("mean", "scale", "coef")}
    if any(s <= 0 for s in vec["scale"]):
        raise ValueError(f"'{prefix}scale' must be positive")
    return features, vec


def _sigmoid(logit: float) -> float:
    return 1.0 / (1.0 + math.exp(-logit)) if logit > -700 else 0.0


@dataclass(frozen=True)
class StandardizedLogistic:
    """A logistic regression on standardized features, stored as plain numbers: P(read) = σ(intercept + coef ·
    (x − mean) / scale), x = the ``features`` of a run (a subclass names them)."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float

    def p_read(self, feats: dict[str, float]) -> float:
        """P(read) for a run's features (a dict with at least ``self.features``)."""
        x = np.array([feats[name] for name in self.features], dtype=np.float64)  # a subclass names them
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return _sigmoid(float(self.intercept + np.dot(np.asarray(self.coef), z)))


@dataclass(frozen=True)
class JointModel(StandardizedLogistic):
    """The joint resolver: a logistic regression on both axes' observations (:data:`JOINT_FEATURES`), P(read),
    consulted only where the decision table says *Inconclusive* — it decides when its probability lies outside
    its band (cut and band fitted on 5-fold cross-validated probabilities of the calibration rows), so
    *Inconclusive* is left for runs whose evidence is ambiguous taken together, not only axis by axis."""

    threshold: float
    band: tuple[float, float]
    features: tuple[str, ...] = JOINT_FEATURES
    prior: tuple[int, int] | None = None
    """For an agreement resolver fitted as a base rate (:func:`core.methods.axes_fit.fit_agreement`): ``(rows that
    followed the swapped context, rows)`` among its calibration rows; its coefficients are zero, so its P(read) is
    that rate (smoothed) whatever the observations. ``None`` for a fitted regression."""

    def probability(self, feats: dict[str, float]) -> float:
        """P(read) for the features of :func:`joint_features`."""
        return self.p_read(feats)

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self)

    @classmethod
    def from_dict(cls, data: Any, name: str = "joint") -> JointModel:
        need = ("mean", "scale", "coef", "intercept", "threshold", "band")
        features, vec = _logistic_fields(data, f"'{name}'", f"{name}.", need, JOINT_FEATURES)
        threshold = finite_number(data["threshold"], f"{name}.threshold")
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"'{name}.threshold' is a probability in (0, 1)")
        band = _band(data, "band", "threshold")
        intercept = finite_number(data["intercept"], f"{name}.intercept")
        prior = data.get("prior")
        if prior is not None:
            ok = isinstance(prior, list) and len(prior) == 2 and all(type(v) is int and v >= 0 for v in prior)
            if not ok or prior[0] > prior[1] or prior[1] == 0:
                raise ValueError(f"'{name}.prior' is [rows that followed the swap, rows], two counts")
            prior = (prior[0], prior[1])
        return cls(intercept=intercept, threshold=threshold, band=band, features=features, prior=prior, **vec)


@dataclass(frozen=True)
class AxesCalibration(StandardizedLogistic):
    """The fitted axes of one model (a small JSON file; :meth:`from_dict` checks every field).

    Attributes:
        model: the model's name (a calibration is used only for the model it names).
        span_level: κ, the per-token KL (nats) at which an answer word counts as context-sensitive.
        features: axis 1's observations (names of :data:`KNOWN_FEATURES`), in the order of the coefficients.
        mean, scale: their standardization before the logistic regression.
        coef, intercept: the logistic regression (P(read) = σ(intercept + coef · z)).
        reliance_threshold, reliance_band: the P(read) cut and the inconclusive band ``(low, high)`` around it.
        support_feature: axis 2's observation; support_threshold, support_band: its cut (nats) and band.
        source: how it was made; fitted_on: counts of the rows it was fitted on; provenance: what was chosen on
            which rows (:mod:`core.evaluation.provenance`).
        joint: the joint resolver of the table's *Inconclusive* cells (``None`` in a file without one).
        agreement: the agreement resolver (``None`` in a file without one): where the context and the no-context
            answer both hold the span and axis 1 is not *needed*, P(the answer follows the context), fitted on
            rows labeled by the swap test — the text cannot tell reading from recalling there.
    """

    model: str
    reliance_threshold: float
    reliance_band: tuple[float, float]
    support_threshold: float
    support_band: tuple[float, float]
    span_level: float | None = None
    source: str = "scripts/validate_headline.py fit"
    features: tuple[str, ...] = RELIANCE_FEATURES
    support_feature: str = SUPPORT_FEATURE
    fitted_on: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    joint: JointModel | None = None
    agreement: JointModel | None = None
    version: int = VERSION

    def reliance(self, feats: dict[str, float]) -> float:
        """P(read) of axis 1 for the values of :attr:`features`."""
        return self.p_read(feats)

    def to_dict(self) -> dict[str, Any]:
        out = json_fields(self)
        for name in ("joint", "agreement"):
            resolver = getattr(self, name)
            if resolver is None:
                out.pop(name)
            else:
                out[name] = resolver.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Any) -> AxesCalibration:
        """Read and check an axes file's object (``ValueError`` names the bad field)."""
        if isinstance(data, dict) and data.get("version", 1) != VERSION:
            raise ValueError(
                f"this axes calibration is of version {data.get('version', 1)!r}, made before the answer span; "
                f"this version reads version {VERSION}: recalibrate (python -m core calibrate-model)"
            )
        need = ("model", "mean", "scale", "coef", "intercept", "reliance_threshold", "reliance_band")
        need += ("support_threshold", "support_band", "span_level")
        features, vec = _logistic_fields(data, "An axes calibration", "", need, RELIANCE_FEATURES)
        bands = {
            name: _band(data, name, name.replace("band", "threshold")) for name in ("reliance_band", "support_band")
        }
        if not 0.0 < float(data["reliance_threshold"]) < 1.0:
            raise ValueError("'reliance_threshold' is a probability in (0, 1)")
        if not isinstance(data["model"], str) or not data["model"].strip():
            raise ValueError("'model' must be a non-empty string")
        level = data["span_level"]
        if level is not None:
            level = finite_number(level, "span_level")
            if not 0.0 <= level <= MAX_SPAN_LEVEL:
                raise ValueError(f"'span_level' is a KL in nats within [0, {MAX_SPAN_LEVEL:g}], got {level}")
        support = data.get("support_feature", SUPPORT_FEATURE)
        if support not in KNOWN_FEATURES:
            raise ValueError(f"'support_feature' must be one of {list(KNOWN_FEATURES)}, got {support!r}")
        extras = {}
        for name in ("fitted_on", "provenance"):
            extras[name] = data.get(name, {})
            if not isinstance(extras[name], dict):
                raise ValueError(f"{name!r} must be a JSON object")
        return cls(
            model=data["model"],
            intercept=finite_number(data["intercept"], "intercept"),
            reliance_threshold=float(data["reliance_threshold"]),
            support_threshold=float(data["support_threshold"]),
            span_level=level,
            source=str(data.get("source", "axes file"))[:2000],
            features=features,
            support_feature=support,
            joint=None if data.get("joint") is None else JointModel.from_dict(data["joint"]),
            agreement=None if data.get("agreement") is None else JointModel.from_dict(data["agreement"], "agreement"),
            **extras,
            **vec,
            **bands,
        )

    @classmethod
    def load(cls, path: str | Path) -> AxesCalibration:
        """An axes calibration from a JSON file of at most 64 KiB."""
        import json

        raw = read_user_file(path, MAX_AXES_BYTES, "axes calibration file")
        try:
            return cls.from_dict(json.loads(raw.decode("utf-8")))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ValueError(f"Axes calibration {path}: {exc}") from None


_LOADED: dict[str, tuple[float, AxesCalibration]] = {}


def cached_axes(path: Path) -> AxesCalibration | None:
    """The axes calibration in ``path`` (re-read when the file changes), ``None`` when there is no file.

    Raises:
        ValueError: the file is not a valid axes calibration.
    """
    if not path.is_file():
        return None
    mtime = path.stat().st_mtime
    cached = _LOADED.get(str(path))
    if cached is None or cached[0] != mtime:
        _LOADED[str(path)] = (mtime, AxesCalibration.load(path))
    return _LOADED[str(path)][1]


def bundled_axes() -> AxesCalibration | None:
    """The embedded model's bundled axes calibration (re-read when the file changes), ``None`` without one."""
    return cached_axes(AXES_FILE)
