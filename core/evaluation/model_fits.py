"""Every per-model artifact fitted from one model's own behavior-labeled rows, and its held-out figures.

The input is what ``calibrate-model`` (:mod:`core.evaluation.model_calibration`) stored per scored row
(:class:`RowRecord`): the validation row, its :class:`~core.engine.result.DualPathResult` at the app's default
settings, its swap test (rows whose context agrees with memory), every cheap detector's score, and the per-row
features of the fitted detectors (the Lookback Lens' per-head mean ratios, ReDeEP's mean ECS per head and PKS per
layer, the combined detector's features). A row's label is its behavior (:func:`core.evaluation.headline_fit.
behavior_of`: the text for conflict, on-topic and invented rows, the swap test where context and memory agree):
*read* is the clean / grounded class, *recalled* the memorized one.

Fitted on the **calibration** rows only (:func:`fit_all`):

* RePCS' τ and τ(L) — the α-quantile of Z over the read rows, the quantile regression on the answer's length
  (:func:`core.methods.repcs.fit_threshold`; a constant τ alone when too few read rows per length bucket);
* the headline's axes calibration — :func:`core.evaluation.headline_fit.fit_calibration` (κ, axis 1's features,
  both axes and the joint resolver, with provenance);
* ReDeEP's heads, layers, α and β (:func:`core.methods.redeep.fit_choice`) and the table they were chosen on;
* the Lookback Lens classifier (:func:`core.methods.lookback.fit_lookback`);
* the combined detector (:func:`core.detectors.combined.fit_combined`): its Lookback column is the classifier's
  **out-of-fold** P(recalled), so the stack never sees a probability fitted on the row itself; ReDeEP's two columns
  use heads and layers chosen on the same rows (as the bundled build does: optimistic for those two);
* the per-detector thresholds — RePCS Algorithm 1 (:func:`core.detectors.thresholds.alpha_threshold`) for every
  scored detector over the read rows, with the in-sample FPR/FNR.

:func:`held_out` measures all of it on the **report** rows, which no fit saw (the grouped split of
:mod:`core.evaluation.constructions`): the headline against behavior beside the text-only rule and axis 1 alone
(with Wilson 95 % intervals), per construction; τ's FPR / FNR / share inconclusive; each detector's AUC with a
bootstrap CI.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from core.detectors.combined import FEATURES, MISSING_OK, fit_combined
from core.detectors.registry import GROUNDED_HIGH, MEMORIZED_HIGH, get
from core.detectors.thresholds import CALIBRATE_MODEL, DEFAULT_ALPHA, alpha_threshold
from core.engine.axes_calibration import AxesCalibration
from core.engine.result import DualPathResult
from core.engine.swap import SwapTest
from core.engine.threshold import Threshold
from core.engine.verdict import INCONCLUSIVE, READ, RECALLED, decide
from core.evaluation.constructions import AGREEING, CALIBRATION, REPORT, ValidationRow
from core.evaluation.headline_fit import Scored, behavior_of, fit_calibration, measure
from core.evaluation.length_rates import wilson_interval
from core.maths.metrics import auc, auc_bootstrap_ci
from core.methods.lookback import LookbackModel, fit_lookback
from core.methods.redeep import CalibrationTable, ReDeEPChoice, fit_choice
from core.methods.redeep.forward import DEFAULT_K_PERCENT
from core.methods.repcs import fit_threshold

logger = logging.getLogger(__name__)

LIVE_EXCLUDED = ("lookback", "combined", "redeep", "redeep_ecs", "redeep_pks")
"""Cheap detectors not scored while the rows are scored: their artifacts are fitted from these rows (their scores
on the rows come from the stored features and the fitted artifacts, :func:`derived_scores`)."""
LATE_FEATURES = ("redeep_ecs", "redeep_pks", "lookback")
"""The combined detector's features that depend on an artifact fitted here (filled in by :func:`fit_all`)."""
LABEL_Y = {READ: 0, RECALLED: 1}


@dataclass
class RowRecord:
    """One scored row as ``calibrate-model`` stores it (one JSON line of ``scored.jsonl``).

    Attributes:
        key: the row's identity (:func:`core.evaluation.headline_fit.row_key`).
        row: the validation row; result: its run at the app's default settings (parametric answer generated).
        scores: every live-scored detector's raw score (``None`` where it failed; ``errors`` says why).
        lookback: the Lookback Lens' ``(L · H,)`` per-head mean ratios (``None``: a one-token answer).
        ecs, pks: ReDeEP's mean ECS ``(L, H)`` and mean PKS ``(L,)`` over the answer (``None`` where refused).
        combined: the combined detector's features computable before any fit (name → value, ``None`` missing).
        swap: the swap test (rows whose context agrees with memory), ``None`` when not run.
    """

    key: str
    row: ValidationRow
    result: DualPathResult
    scores: dict[str, float | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    lookback: list[float] | None = None
    ecs: list[list[float]] | None = None
    pks: list[float] | None = None
    combined: dict[str, float | None] = field(default_factory=dict)
    swap: SwapTest | None = None

    @property
    def scored(self) -> Scored:
        return Scored(self.row, self.result, self.swap)

    @property
    def label(self) -> str | None:
        """``read`` / ``recalled`` by behavior, else ``None`` (not decided)."""
        label = behavior_of(self.scored)
        return label if label in LABEL_Y else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "row": self.row.to_dict(),
            "result": self.result.to_dict(),
            "scores": self.scores,
            "errors": self.errors,
            "lookback": self.lookback,
            "ecs": self.ecs,
            "pks": self.pks,
            "combined": self.combined,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], swap: SwapTest | None = None) -> RowRecord:
        return cls(
            key=str(data["key"]),
            row=ValidationRow.from_dict(data["row"]),
            result=DualPathResult.from_dict(data["result"]),
            scores=dict(data.get("scores") or {}),
            errors=dict(data.get("errors") or {}),
            lookback=data.get("lookback"),
            ecs=data.get("ecs"),
            pks=data.get("pks"),
            combined=dict(data.get("combined") or {}),
            swap=swap,
        )


@dataclass
class Fitted:
    """What :func:`fit_all` fitted (``None`` where a fit was refused: ``notes`` says why)."""

    tau: Threshold | None = None
    axes: AxesCalibration | None = None
    redeep: ReDeEPChoice | None = None
    redeep_table: CalibrationTable | None = None
    lookback: LookbackModel | None = None
    combined: Any = None
    detectors: dict[str, Any] | None = None
    notes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelIdentity:
    """The model the artifacts are fitted for: its name, cache key, resolved template, layout and settings."""

    name: str
    slug: str
    template: str
    n_layers: int
    n_heads: int
    settings: dict[str, Any]
    trained_on: list[dict[str, Any]] = field(default_factory=list)


def labeled(records: Sequence[RowRecord], split: str) -> list[RowRecord]:
    """The records of ``split`` whose behavior is decided (read / recalled)."""
    return [r for r in records if r.row.split == split and r.label is not None]


def _y(records: Sequence[RowRecord]) -> np.ndarray:
    return np.array([LABEL_Y[r.label] for r in records if r.label is not None], dtype=int)  # type: ignore[index]


def _scored_len(r: RowRecord) -> int:
    return int(min(r.result.score_window, r.result.n_tokens))


def fit_tau(train: Sequence[RowRecord], who: ModelIdentity, alpha: float = DEFAULT_ALPHA) -> Threshold:
    """RePCS' τ on the read rows (clean) and recalled rows (memorized) of ``train``: τ(L) when each length bucket
    has enough read rows, else the constant τ alone (``extra["length_tau_refused"]`` says why).

    Raises:
        ValueError: no read row with a scored token.
    """
    read = [r for r in train if r.label == READ and _scored_len(r) > 0]
    recalled = [r for r in train if r.label == RECALLED and _scored_len(r) > 0]
    if not read:
        raise ValueError("no read calibration row: τ cannot be set")
    z_clean = np.array([r.result.repcs_score for r in read], dtype=np.float64)
    z_mem = np.array([r.result.repcs_score for r in recalled], dtype=np.float64)
    gamma = max(float(r.result.max_abs_log_ratio) for r in [*read, *recalled])
    T = int(who.settings.get("score_window", 64))
    source = f"python -m core calibrate-model on {len(read)} read / {len(recalled)} recalled calibration rows"
    common = {"T": T, "model": who.name, "alpha": alpha, "source": source}
    refused = None
    try:
        th = fit_threshold(z_clean, z_mem, gamma, n_scored_clean=np.array([_scored_len(r) for r in read]), **common)
    except ValueError as exc:
        refused = str(exc)
        th = fit_threshold(z_clean, z_mem, gamma, **common)
    th.extra = {
        "template": who.template,
        "max_new_tokens": int(who.settings.get("max_new_tokens", T)),
        "origin": CALIBRATE_MODEL,
        "rates": "in-sample on the calibration rows (fpr/fnr: constant τ)",
    }
    if refused:
        th.extra["length_tau_refused"] = refused
    return th


def every_layer(n_layers: int) -> Any:
    """What :func:`core.detectors.shared.redeep_trace_for` reads of a ReDeEP choice (its k and layers): the default k,
    every layer — the per-row table a choice is then fitted on."""
    return SimpleNamespace(k_percent=DEFAULT_K_PERCENT, layers=list(range(n_layers)))


def redeep_table(records: Sequence[RowRecord]) -> tuple[CalibrationTable, list[RowRecord]]:
    """ReDeEP's calibration table of the labeled records with ECS and PKS, and those records."""
    usable = [r for r in records if r.ecs is not None and r.pks is not None and r.label is not None]
    if not usable:
        raise ValueError("no row with ReDeEP's ECS and PKS")
    table = CalibrationTable(
        np.array([r.ecs for r in usable], dtype=np.float64),
        np.array([r.pks for r in usable], dtype=np.float64),
        _y(usable),
    )
    return table, usable


def _trained_on(who: ModelIdentity, n: int, what: str) -> list[dict[str, Any]]:
    return [{**t, "rows": n, "used_for": what} for t in who.trained_on] or [{"rows": n, "used_for": what}]


def fit_all(records: Sequence[RowRecord], who: ModelIdentity, ov: np.ndarray | None = None) -> Fitted:
    """Fit every artifact on the calibration rows of ``records`` (see the module docstring). A fit that cannot be
    made (too few rows of a class, a model without attention weights …) is left ``None`` with its reason in
    ``notes``; the others are still fitted.

    Args:
        ov: ReDeEP's OV copying scores of every head (``None``: refused or not computed), stored with the choice.
    """
    train = labeled(records, CALIBRATION)
    out = Fitted()
    try:
        out.tau = fit_tau(train, who)
    except ValueError as exc:
        out.notes["tau"] = str(exc)
    try:
        rows = [r for r in records if r.row.split == CALIBRATION]
        by_text = [r for r in train if r.row.relation != AGREEING]
        if len({r.label for r in train}) < 2 or not by_text:
            raise ValueError("the axes need read and recalled calibration rows, some labeled by their text")
        cal = fit_calibration([r.scored for r in rows], who.name)
        source = f"python -m core calibrate-model on {cal.fitted_on.get('rows', '?')} calibration rows"
        out.axes = replace(cal, source=source)
    except (ValueError, IndexError, TypeError) as exc:  # too few rows with a located span, a fold of one class …
        logger.warning("the axes calibration was not fitted: %s", exc)
        out.notes["axes"] = f"{type(exc).__name__}: {exc}"
    lookback_oof: dict[str, float] = {}
    try:
        usable = [r for r in train if r.lookback is not None]
        if not usable:
            raise ValueError("no row with lookback ratios")
        X = np.array([r.lookback for r in usable], dtype=np.float64)
        out.lookback, oof = fit_lookback(
            X,
            _y(usable),
            n_layers=who.n_layers,
            n_heads=who.n_heads,
            model=who.name,
            model_slug=who.slug,
            template=who.template,
            max_new_tokens=int(who.settings.get("max_new_tokens", 64)),
            trained_on=_trained_on(who, len(usable), "Lookback Lens classifier"),
        )
        lookback_oof = {r.key: float(p) for r, p in zip(usable, oof)}
    except ValueError as exc:
        out.notes["lookback"] = str(exc)
    try:
        table, usable = redeep_table(train)
        out.redeep_table = table
        out.redeep = fit_choice(
            table,
            model=who.name,
            model_slug=who.slug,
            template=who.template,
            k_percent=DEFAULT_K_PERCENT,
            ov=ov,
            ov_refusal=None if ov is not None else "not computed",
            trained_on=_trained_on(who, len(usable), "ReDeEP heads, layers, α, β"),
        )
    except ValueError as exc:
        out.notes["redeep"] = str(exc)
    try:
        X, y, used = combined_table(train, out, lookback_oof)
        out.combined, _ = fit_combined(
            X,
            y,
            list(FEATURES),
            model=who.name,
            model_slug=who.slug,
            template=who.template,
            T=int(who.settings.get("score_window", 64)),
            trained_on=_trained_on(who, len(used), "combined detector (Lookback column out of fold)"),
        )
    except ValueError as exc:
        out.notes["combined"] = str(exc)
    try:
        out.detectors = detector_thresholds(train, out, who)
    except ValueError as exc:
        out.notes["detectors"] = str(exc)
    return out


def late_features(r: RowRecord, fitted: Fitted, lookback_p: float | None = None) -> dict[str, float]:
    """The combined detector's features that need a fitted artifact: ReDeEP's two means over the fitted choice and
    the Lookback classifier's P(recalled) (``lookback_p`` when given, e.g. out of fold; NaN: a one-token answer)."""
    out: dict[str, float] = {}
    if fitted.redeep is not None and r.ecs is not None and r.pks is not None:
        ecs, pks = np.asarray(r.ecs, dtype=np.float64), np.asarray(r.pks, dtype=np.float64)
        heads_l, heads_h = [h[0] for h in fitted.redeep.heads], [h[1] for h in fitted.redeep.heads]
        out["redeep_ecs"] = float(ecs[heads_l, heads_h].mean())
        out["redeep_pks"] = float(pks[fitted.redeep.layers].mean())
    if lookback_p is not None:
        out["lookback"] = float(lookback_p)
    elif fitted.lookback is not None and r.lookback is not None:
        out["lookback"] = float(fitted.lookback.probability(np.asarray(r.lookback, dtype=np.float64)))
    else:
        out["lookback"] = math.nan
    return out


def combined_row(r: RowRecord, fitted: Fitted, lookback_p: float | None = None) -> np.ndarray | None:
    """The combined detector's transformed feature vector of one record (``None`` when a feature is missing)."""
    values = {**r.combined, **late_features(r, fitted, lookback_p)}
    x = []
    for name in FEATURES:
        v = values.get(name)
        if v is None or math.isnan(float(v)):
            if name not in MISSING_OK:
                return None
            v = math.nan
        x.append(float(v))
    return np.asarray(x, dtype=np.float64)


def combined_table(
    train: Sequence[RowRecord], fitted: Fitted, lookback_oof: dict[str, float]
) -> tuple[np.ndarray, np.ndarray, list[RowRecord]]:
    """The combined detector's training table: one row per labeled record with every feature (the Lookback
    column out of fold; a missing Lookback value becomes the column's mean, as the model imputes it)."""
    if fitted.redeep is None:
        raise ValueError("no ReDeEP choice: the combined detector needs its two features")
    rows, used = [], []
    for r in train:
        x = combined_row(r, fitted, lookback_oof.get(r.key, math.nan))
        if x is not None:
            rows.append(x)
            used.append(r)
    if not rows:
        raise ValueError("no row with every combined-detector feature")
    X = np.array(rows)
    if np.isnan(X).any():
        X = np.where(np.isnan(X), np.nanmean(X, axis=0), X)
    return X, _y(used), used


def derived_scores(r: RowRecord, fitted: Fitted) -> dict[str, float]:
    """The scores of the detectors whose artifact was fitted here (:data:`LIVE_EXCLUDED`), as the detectors
    compute them with the stored artifacts."""
    out: dict[str, float] = {}
    late = late_features(r, fitted)
    if fitted.redeep is not None and "redeep_ecs" in late:
        out["redeep_ecs"], out["redeep_pks"] = late["redeep_ecs"], late["redeep_pks"]
        if r.ecs is not None and r.pks is not None:
            out["redeep"] = float(fitted.redeep.score(np.asarray(r.ecs), np.asarray(r.pks)))
    if not math.isnan(late.get("lookback", math.nan)):
        out["lookback"] = late["lookback"]
    if fitted.combined is not None:
        x = combined_row(r, fitted)
        if x is not None:
            out["combined"] = float(fitted.combined.probability(x))
    return out


def all_scores(r: RowRecord, fitted: Fitted) -> dict[str, float]:
    """Every detector's score of a record: the live ones and the derived ones (finite values only)."""
    out = {k: float(v) for k, v in r.scores.items() if v is not None and math.isfinite(float(v))}
    out.update({k: v for k, v in derived_scores(r, fitted).items() if math.isfinite(v)})
    return out


def detector_thresholds(train: Sequence[RowRecord], fitted: Fitted, who: ModelIdentity) -> dict[str, Any]:
    """The per-detector calibration document (the bundled file's form, ``origin: calibrate-model``): for every
    detector with a score on the calibration rows, RePCS Algorithm 1 over the read rows and the in-sample FPR /
    FNR on the read and recalled rows."""
    scores = [all_scores(r, fitted) for r in train]
    y = _y(train)
    names = sorted({n for s in scores for n in s})
    detectors: dict[str, Any] = {}
    for name in names:
        detector = get(name)
        if detector is None or detector.higher_means not in (MEMORIZED_HIGH, GROUNDED_HIGH):
            continue
        values = np.array([s.get(name, np.nan) for s in scores], dtype=np.float64)
        clean, memorized = values[(y == 0) & np.isfinite(values)], values[(y == 1) & np.isfinite(values)]
        if clean.size == 0:
            continue
        tau = alpha_threshold(clean, detector.higher_means)
        high = detector.higher_means == MEMORIZED_HIGH
        flag_clean = clean > tau if high else clean < tau
        flag_mem = memorized > tau if high else memorized < tau
        detectors[name] = {
            "threshold": round(float(tau), 6),
            "higher_means": detector.higher_means,
            "fpr": round(float(flag_clean.mean()), 6),
            "fnr": round(float((~flag_mem).mean()), 6) if memorized.size else None,
            "n_clean": int(clean.size),
            "n_memorized": int(memorized.size),
        }
    if not detectors:
        raise ValueError("no detector has a score on a read calibration row")
    return {
        "model": who.name,
        "origin": CALIBRATE_MODEL,
        "source": "python -m core calibrate-model on the calibration rows (read = clean, recalled = memorized)",
        "alpha": DEFAULT_ALPHA,
        "settings": who.settings,
        "template": who.template,
        "n_clean": int((y == 0).sum()),
        "n_memorized": int((y == 1).sum()),
        "detectors": detectors,
    }


# -- held-out figures ---------------------------------------------------------------------------------------------


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
        verdicts = [decide(r.result.repcs_score, _scored_len(r), tau).verdict for r in rows]
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
    y = _y(records)
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
