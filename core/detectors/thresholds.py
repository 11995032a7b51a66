"""Where a detector's threshold comes from, and how its score becomes a verdict: the rules declarations name.

A declaration lists its threshold's sources in order (:attr:`core.detectors.registry.Detector.thresholds`); the
first that finds one wins (:func:`detector_threshold`). The shared rules live here:

* :func:`bundled_calibration` — the per-detector calibration of the model: bundled
  (``assets/thresholds/detectors-<slug>.json``, written by ``scripts/calibrate_detectors.py``), else the model's own
  from ``python -m core calibrate-model`` (its calibration folder, :mod:`core.model.calibration_store`): RePCS
  Algorithm 1 applied to each detector — the α-quantile of its score over the clean (context-dependent, or read)
  calibration rows, on the memorized side — with the achieved FPR/FNR. A declaration that names no rule has this
  one;
* :func:`decision_boundary` — a fitted probability's own rule, p = 0.5, in the declaration's words;
* a family's own rules sit in its module (the run's τ for RePCS, a classifier's calibrated τ for the combined
  detector and the Lookback Lens, the calibration table of ReDeEP's choice, CRM's basis for the L2 norm).

None found: the verdict is ``"uncalibrated"`` ("No threshold"). A verdict is ``"recalled"`` when the score lies on
the memorized side of the threshold (below it for a detector where higher means grounded, as RePCS' Z < τ; above
it otherwise), else ``"read"`` (:func:`verdict_for`, the default :attr:`~core.detectors.registry.Detector.reading`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from core.detectors.registry import (
    GROUNDED_HIGH,
    MEMORIZED_HIGH,
    Detector,
    DetectorInput,
    DetectorThreshold,
    ThresholdRule,
)
from core.engine import DualPathSettings, calibration_record
from core.engine.verdict import READ, RECALLED, UNCALIBRATED
from core.io import asset_path
from core.model import calibration_store
from core.model.handle import ModelHandle

THRESHOLD_DIR = asset_path("thresholds")
DEFAULT_ALPHA = 0.05
"""α of every threshold this project calibrates for a detector (RePCS Algorithm 1's default)."""
NO_THRESHOLD = "no threshold calibrated for this detector and model"


DETECTOR_THRESHOLDS = calibration_record.DETECTOR_THRESHOLDS
"""The per-detector calibration's artifact kind (:data:`core.engine.calibration_record.DETECTOR_THRESHOLDS`):
bundled by the model's slug, else the model's own from ``calibrate-model`` in its calibration folder."""
CALIBRATE_MODEL = "calibrate-model"
"""The ``origin`` of a per-detector calibration written by ``python -m core calibrate-model``."""


def bundled_path(handle: ModelHandle) -> Path:
    """Where the bundled per-detector calibration of ``handle``'s model lives."""
    return DETECTOR_THRESHOLDS.bundled(handle.slug, "")  # type: ignore[misc]


def bundled_thresholds(handle: ModelHandle, template: str = "") -> dict[str, Any] | None:
    """The per-detector calibration of the handle's model — bundled, else its own from ``calibrate-model`` for the
    resolved ``template`` — or ``None``: the ``detectors`` of the model's calibration record
    (:func:`core.engine.calibration_record.record_for`, by its identity and template)."""
    return calibration_record.record_for(handle, template or "auto").detectors


def _bundled_source(data: dict[str, Any], entry: dict[str, Any], settings: DualPathSettings) -> str:
    n_clean, n_mem = data.get("n_clean", "?"), data.get("n_memorized", "?")
    alpha = float(data.get("alpha", 0.05))
    if data.get("origin") == CALIBRATE_MODEL:
        parts = [f"calibrated for this model (calibrate-model): {alpha:.0%}-quantile over {n_clean} read rows"]
        words = f"{n_clean} read and {n_mem} recalled calibration rows"
    else:
        parts = [f"bundled calibration: {alpha:.0%}-quantile over {n_clean} clean prompts"]
        words = f"{n_clean} clean and {n_mem} memorized prompts"
    fpr, fnr = entry.get("fpr"), entry.get("fnr")
    if fpr is not None and fnr is not None:
        parts.append(f"FPR {fpr:.0%} / FNR {fnr:.0%} on {words}")
    calibrated = data.get("settings") or {}
    window = calibrated.get("score_window")
    if window is not None and int(window) != int(settings.score_window):
        parts.append(f"calibrated at T = {window}, this run used T = {settings.score_window}")
    return " · ".join(parts)


def bundled_calibration(detector: Detector, inp: DetectorInput) -> DetectorThreshold | None:
    """The detector's entry in the model's bundled per-detector calibration, with where it came from."""
    data = bundled_thresholds(inp.handle, inp.result.template)
    entry = (data or {}).get("detectors", {}).get(detector.name)
    if isinstance(entry, dict) and isinstance(entry.get("threshold"), (int, float)):
        return DetectorThreshold(float(entry["threshold"]), _bundled_source(data or {}, entry, inp.settings))
    return None


def decision_boundary(words: str, value: float = 0.5) -> ThresholdRule:
    """The rule of a detector whose score is a fitted probability: its own decision boundary, described by
    ``words`` (e.g. "the logistic regression's decision boundary, P(memorized) = 0.5")."""

    def rule(detector: Detector, inp: DetectorInput) -> DetectorThreshold:
        return DetectorThreshold(value, words)

    return rule


def own_threshold(find: Any) -> ThresholdRule:
    """A rule from a function of the row alone, ``find(inp) -> (value, source) | None`` (a classifier's own τ)."""

    def rule(detector: Detector, inp: DetectorInput) -> DetectorThreshold | None:
        found = find(inp)
        if found is None:
            return None
        value, source = found
        return DetectorThreshold(None if value is None else float(value), str(source))

    return rule


DEFAULT_RULES: tuple[ThresholdRule, ...] = (bundled_calibration,)
"""The rules of a declaration that names none."""


def rules_of(detector: Detector) -> tuple[ThresholdRule, ...]:
    """The detector's threshold rules, in order (:data:`DEFAULT_RULES` when it names none)."""
    return DEFAULT_RULES if detector.thresholds is None else tuple(detector.thresholds)


def detector_threshold(detector: Detector, inp: DetectorInput) -> DetectorThreshold:
    """The threshold of ``detector`` for this example and where it came from: the first of its rules that finds
    one, else none ("no threshold calibrated")."""
    for rule in rules_of(detector):
        found = rule(detector, inp)
        if found is not None:
            return found
    return DetectorThreshold(None, no_threshold_words(detector, inp))


def no_threshold_words(detector: Detector, inp: DetectorInput) -> str:
    """Why a detector has no threshold for this model: for a model without its own per-detector calibration,
    which artifact is missing and the one step that builds it."""
    if bundled_thresholds(inp.handle, inp.result.template) is not None:
        return NO_THRESHOLD
    what = getattr(detector.artifact, "name", None) or "per-detector calibration"
    return f"{NO_THRESHOLD}. " + calibration_store.missing_artifact(
        what.replace("-", " "), inp.handle, inp.result.template
    )


def alpha_threshold(clean_scores: Any, higher_means: str, alpha: float = DEFAULT_ALPHA) -> float:
    """RePCS Algorithm 1 for any detector: the α-quantile of the clean prompts' scores on the memorized side
    (the α-quantile when higher means grounded, the (1 − α)-quantile when higher means memorized), so about
    a share α of clean prompts is flagged.

    Raises:
        ValueError: no finite clean score, α outside (0, 1), or an unknown direction.
    """
    scores = np.asarray(clean_scores, dtype=np.float64).ravel()
    scores = scores[np.isfinite(scores)]
    if scores.size == 0:
        raise ValueError("need at least one finite clean score")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if higher_means not in (MEMORIZED_HIGH, GROUNDED_HIGH):
        raise ValueError(f"higher_means must be 'memorized' or 'grounded', got {higher_means!r}")
    return float(np.quantile(scores, alpha if higher_means == GROUNDED_HIGH else 1.0 - alpha))


def verdict_for(score: float | None, threshold: float | None, higher_means: str) -> str:
    """``"recalled"`` when ``score`` is on the memorized side of ``threshold``, ``"read"`` on the other side
    (a tie counts as read, as RePCS flags only Z < τ), ``"uncalibrated"`` without a score or threshold.

    Raises:
        ValueError: ``higher_means`` is neither ``"memorized"`` nor ``"grounded"``.
    """
    if higher_means not in (MEMORIZED_HIGH, GROUNDED_HIGH):
        raise ValueError(f"higher_means must be 'memorized' or 'grounded', got {higher_means!r}")
    if score is None or threshold is None or not (math.isfinite(score) and math.isfinite(threshold)):
        return UNCALIBRATED
    memorized_side = score > threshold if higher_means == MEMORIZED_HIGH else score < threshold
    return RECALLED if memorized_side else READ


def side_of_threshold(
    detector: Detector, inp: DetectorInput, score: float | None, threshold: DetectorThreshold
) -> tuple[str, DetectorThreshold]:
    """The default reading: the side of the threshold the score lies on (:func:`verdict_for`)."""
    return verdict_for(score, threshold.value, detector.higher_means), threshold


def read_verdict(
    detector: Detector, inp: DetectorInput, score: float | None, threshold: DetectorThreshold
) -> tuple[str, DetectorThreshold]:
    """The detector's verdict on ``score`` under ``threshold`` by its own reading (the side by default)."""
    return (detector.reading or side_of_threshold)(detector, inp, score, threshold)
