"""The held-out figures of a calibration: everything fitted, measured on the **report** rows, which no fit saw (the
grouped split of :mod:`core.evaluation.constructions`): the headline against behavior beside the text-only rule and
axis 1 alone (with Wilson 95 % intervals), per construction; τ's FPR / FNR / share inconclusive; each detector's AUC
with a bootstrap CI (:func:`held_out`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.detectors.registry import GROUNDED_HIGH, MEMORIZED_HIGH, get
from core.engine.axes_calibration import AxesCalibration
from core.engine.threshold import Threshold
from core.engine.verdict import INCONCLUSIVE, READ, RECALLED, decide
from core.evaluation.calibrate.fits import all_scores
from core.evaluation.calibrate.records import Fitted, RowRecord, label_array, scored_len
from core.evaluation.constructions import REPORT
from core.evaluation.headline_fit import measure
from core.evaluation.length_rates import wilson_interval
from core.maths.metrics import auc, auc_bootstrap_ci


def _ci(k: int, n: int) -> list[float] | None:
    ci = wilson_interval(k, n)
    return None if ci is None else [round(ci[0], 4), round(ci[1], 4)]


def with_intervals(entry: dict[str, Any]) -> dict[str, Any]:
    """An :func:`core.evaluation.validity.agreement` entry with Wilson 95 % intervals: ``match_ci``,
    ``undecided_ci`` and each behavior's ``match_ci``."""
    n = int(entry["n"])
    out = dict(entry)
    out["match_ci"] = _ci(int(entry["match"]), n)
    undecided = round((entry.get("undecided_rate") or 0.0) * n)
    out["undecided_ci"] = _ci(int(undecided), n)
    out["per_behavior"] = {
        b: {**sub, "match_ci": _ci(int(sub["match"]), int(sub["n"]))} for b, sub in entry["per_behavior"].items()
    }
    return out


def headline_figures(records: Sequence[RowRecord], axes: AxesCalibration) -> dict[str, Any]:
    """:func:`core.evaluation.headline_fit.measure` of ``records`` under ``axes``, every agreement with its
    intervals."""
    figures = measure([r.scored for r in records], axes)
    for key in ("headline", "text_only", "axis1", "text_wrong", "swap_agreeing"):
        if key in figures:
            figures[key] = with_intervals(figures[key])
    return figures


def tau_figures(records: Sequence[RowRecord], tau: Threshold) -> dict[str, Any]:
    """τ on labeled records: FPR (read rows called recalled), FNR (recalled rows not called recalled), and the share
    of each class left inconclusive, with Wilson intervals."""
    out: dict[str, Any] = {"mode": tau.mode}
    for label, wrong, name in ((READ, RECALLED, "fpr"), (RECALLED, READ, "fnr")):
        rows = [r for r in records if r.label == label]
        verdicts = [decide(r.result.repcs_score, scored_len(r), tau).verdict for r in rows]
        n = len(verdicts)
        k = sum(v == wrong for v in verdicts) if name == "fpr" else sum(v != RECALLED for v in verdicts)
        undecided = sum(v == INCONCLUSIVE for v in verdicts)
        out[name] = {"n": n, "rate": round(k / n, 4) if n else None, "ci": _ci(k, n)}
        out[f"inconclusive_{label}"] = {"n": n, "rate": round(undecided / n, 4) if n else None, "ci": _ci(undecided, n)}
    return out


def detector_aucs(records: Sequence[RowRecord], fitted: Fitted, n_boot: int = 500) -> dict[str, Any]:
    """Each detector's AUC against behavior on ``records`` (positive class: recalled; a detector where higher
    means grounded is negated), with a bootstrap 95 % CI; a detector with fewer than 2 rows of a class has none."""
    scores = [all_scores(r, fitted) for r in records]
    y = label_array(records)
    out: dict[str, Any] = {}
    for name in sorted({n for s in scores for n in s}):
        detector = get(name)
        if detector is None or detector.higher_means not in (MEMORIZED_HIGH, GROUNDED_HIGH):
            continue
        values = np.array([s.get(name, np.nan) for s in scores], dtype=np.float64)
        keep = np.isfinite(values)
        yy, vv = y[keep], values[keep] * (1.0 if detector.higher_means == MEMORIZED_HIGH else -1.0)
        if min(int((yy == 0).sum()), int((yy == 1).sum())) < 2:
            continue
        low, high = auc_bootstrap_ci(yy, vv, n_boot=n_boot)
        out[name] = {"auc": round(float(auc(yy, vv)), 4), "ci": [round(low, 4), round(high, 4)], "n": int(keep.sum())}
    return out


def held_out(
    records: Sequence[RowRecord], fitted: Fitted, bundled_axes: AxesCalibration | None = None
) -> dict[str, Any]:
    """The figures of the report rows (never fitted on): the headline per construction and over all, τ, every
    detector's AUC; with ``bundled_axes`` (the embedded model) the bundled calibration's headline on the same rows."""
    report = [r for r in records if r.row.split == REPORT]
    out: dict[str, Any] = {"rows": len(report), "labeled": len([r for r in report if r.label is not None])}
    if fitted.axes is not None and report:
        out["headline"] = headline_figures(report, fitted.axes)
        out["by_construction"] = {
            name: headline_figures([r for r in report if r.row.construction == name], fitted.axes)["headline"]
            for name in sorted({r.row.construction for r in report})
        }
    if bundled_axes is not None and report:
        out["bundled_headline"] = headline_figures(report, bundled_axes)
    lab = [r for r in report if r.label is not None]
    if fitted.tau is not None and lab:
        out["tau"] = tau_figures(lab, fitted.tau)
    if lab:
        out["detectors"] = detector_aucs(lab, fitted)
    return out
