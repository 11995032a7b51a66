"""Detection metrics of every detector over scored records, and the JSON report of an evaluation.

Per detector (positive class *memorized*; each score oriented so that higher = more likely memorized, e.g. −Z
for RePCS): ROC-AUC with a percentile-bootstrap 95% CI, FPR at 95% TPR, Precision@10 and the ROC points.
Detectors that need a fit are scored out of fold first (:func:`core.detectors.fitted.cross_validated_scores`:
stratified 5-fold, seed 42), so no row is scored by a model trained on its label. The RePCS Table IV
robustness table (:func:`core.evaluation.robustness.robustness_table`) is added when noisy scores exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.detectors import Detector
from core.detectors.fitted import cross_validated_scores
from core.engine import DualPathSettings
from core.engine.threshold import Threshold
from core.engine.verdict import MEMORIZED
from core.evaluation.calibration import pac_summary
from core.evaluation.data import SEED
from core.evaluation.length_rates import length_report
from core.evaluation.robustness import robustness_table
from core.maths.metrics import auc_bootstrap_ci, detection_metrics, roc_points

N_BOOT = 1000


def _labels(records: Sequence[dict[str, Any]]) -> np.ndarray:
    return np.array([1 if r.get("label") == MEMORIZED else 0 for r in records], dtype=int)


def detector_metrics(
    labels: np.ndarray, raw: Sequence[float | None], det: Detector, *, n_boot: int = N_BOOT, seed: int = SEED
) -> dict[str, Any]:
    """AUC, bootstrap 95% CI, FPR@95%TPR, Precision@10 and the ROC points of one detector over the rows with
    a score. Metrics are ``None`` (with a ``note``) when the scored rows miss a class."""
    y = np.asarray(labels, dtype=int)
    values = np.array([np.nan if v is None else float(v) for v in raw], dtype=np.float64)
    keep = np.isfinite(values)
    entry: dict[str, Any] = {
        "label": det.label,
        "higher_means": det.higher_means,
        "cost": det.cost,
        "source": det.source,
        "n": int(keep.sum()),
        "auc": None,
        "auc_ci": None,
        "fpr_at_95tpr": None,
        "precision_at_10": None,
    }
    yk = y[keep]
    if yk.size == 0 or yk.min() == yk.max():
        entry["note"] = "needs scored rows of both labels"
        return entry
    oriented = np.array([det.oriented(v) for v in values[keep]])
    entry.update(detection_metrics(yk, oriented))
    entry["auc_ci"] = list(auc_bootstrap_ci(yk, oriented, n_boot=n_boot, seed=seed))
    fpr, tpr, _ = roc_points(yk, oriented)
    entry["roc"] = {"fpr": fpr.tolist(), "tpr": tpr.tolist()}
    return entry


def summarize(
    records: Sequence[dict[str, Any]],
    detectors: dict[str, Detector],
    *,
    n_boot: int = N_BOOT,
    seed: int = SEED,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Metrics of every detector over labeled records, and the records with the fitted detectors' scores.

    Fitted detectors (``features``) are scored by :func:`core.detectors.fitted.cross_validated_scores` over
    the records that have features: each row's score comes from a model trained on the other folds.

    Returns:
        ``(summary, rows)``: ``summary = {"detectors": {name: {...}}, "robustness": [...] | None}``; ``rows``
        are shallow copies of ``records`` whose ``scores`` include the cross-validated values.
    """
    rows = [{**r, "scores": dict(r.get("scores", {}))} for r in records]
    y = _labels(rows)
    out: dict[str, Any] = {}
    for name, det in detectors.items():
        note = None
        if det.needs_fit and det.features is not None:
            idx = [i for i, r in enumerate(rows) if name in r.get("features", {})]
            try:
                if not idx:
                    raise ValueError("no row has features")
                probs = cross_validated_scores(np.array([rows[i]["features"][name] for i in idx]), y[idx], seed=seed)
                for i, p in zip(idx, probs):
                    rows[i]["scores"][name] = float(p)
            except ValueError as exc:
                note = f"not fitted: {exc}"
        entry = detector_metrics(y, [r["scores"].get(name) for r in rows], det, n_boot=n_boot, seed=seed)
        if det.needs_fit and det.features is not None:
            entry["cross_validated"] = "stratified 5-fold, seed 42 (out-of-fold probabilities)"
        if note:
            entry["note"] = note
        errors = [r["errors"][name] for r in rows if name in r.get("errors", {})]
        if errors:
            entry["errors"] = len(errors)
            entry["first_error"] = errors[0]
        out[name] = entry
    return {"detectors": out, "robustness": robustness_summary(rows, n_boot=n_boot, seed=seed)}, rows


def robustness_summary(
    records: Sequence[dict[str, Any]], *, n_boot: int = N_BOOT, seed: int = SEED
) -> list[dict[str, Any]] | None:
    """RePCS Table IV over the records that carry noisy scores (``None`` when none do or a class is missing)."""
    noisy = [r for r in records if r.get("noisy_z")]
    if not noisy:
        return None
    sigmas = noisy[0]["noisy_z"]["sigma"]
    noisy = [r for r in noisy if r["noisy_z"]["sigma"] == sigmas]
    y = _labels(noisy)
    if y.min() == y.max():
        return None
    z = {float(s): np.array([r["noisy_z"]["z"][j] for r in noisy], dtype=np.float64) for j, s in enumerate(sigmas)}
    return robustness_table(y, z, n_boot=n_boot, seed=seed)


def build_report(
    model: str,
    settings: DualPathSettings,
    threshold: Threshold | None,
    threshold_source: str | None,
    summary: dict[str, Any],
    rows: list[dict[str, Any]],
) -> dict[str, Any]:
    """The JSON document of ``python -m core evaluate`` (also the Evaluate page's JSON download)."""
    return {
        "n": len(rows),
        "model": model,
        "settings": settings.to_dict(),
        "threshold": None if threshold is None else float(threshold.tau),
        "threshold_source": threshold_source,
        "positive_class": MEMORIZED,
        "detectors": summary["detectors"],
        "robustness": summary["robustness"],
        # RePCS Thm III.4's n with γ as Lemma III.3 uses it and with the effective T (core.evaluation.calibration)
        "pac": pac_summary(rows, settings.score_window),
        # FPR/FNR per answer length (Wilson 95% CIs) for the constant τ and τ(L), and τ(L)'s inconclusive shares
        "tau_mode": None if threshold is None else threshold.mode,
        "length_buckets": length_report(rows, threshold, settings.score_window),
        "rows": rows,
    }
