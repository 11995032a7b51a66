"""Every per-model artifact fitted on the **calibration** rows of one model's own behavior-labeled rows.

The input is what the calibration stored per scored row (:class:`~core.evaluation.calibrate.records.RowRecord`):
the validation row, its :class:`~core.engine.result.DualPathResult` at the app's default settings, its swap test
(rows whose context agrees with memory), every cheap detector's score, and the per-row features of the fitted
detectors (the Lookback Lens' per-head mean ratios, ReDeEP's mean ECS per head and PKS per layer, the combined
detector's features). Two groups, fitted in two stages (:mod:`core.evaluation.calibrate.stages`):

**The headline's** (:func:`fit_headline`): RePCS' τ and τ(L) — the α-quantile of Z over the read rows, the quantile
regression on the answer's length (:func:`core.methods.repcs.fit_threshold`; a constant τ alone when too few read
rows per length bucket); the headline's axes calibration (:func:`core.evaluation.headline_fit.fit_calibration`:
κ, axis 1's features, both axes and the joint resolver, with provenance).

**The detectors'** (:func:`fit_detectors`): ReDeEP's heads, layers, α and β (:func:`core.methods.redeep.fit_choice`)
and the table they were chosen on; the Lookback Lens classifier (:func:`core.methods.lookback.fit_lookback`); the
combined detector (:func:`core.detectors.combined.fit_combined`: its Lookback column is the classifier's **out-of-
fold** P(recalled), so the stack never sees a probability fitted on the row itself; ReDeEP's two columns use heads
and layers chosen on the same rows, as the bundled build does: optimistic for those two); the per-detector
thresholds — RePCS Algorithm 1 (:func:`core.detectors.thresholds.alpha_threshold`) for every scored detector over
the read rows, with the in-sample FPR/FNR.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from core.detectors.combined import FEATURES, MISSING_OK, fit_combined
from core.detectors.registry import GROUNDED_HIGH, MEMORIZED_HIGH, get
from core.detectors.thresholds import CALIBRATE_MODEL, DEFAULT_ALPHA, alpha_threshold
from core.engine.threshold import Threshold
from core.engine.verdict import READ, RECALLED
from core.evaluation.calibrate.records import (
    Fitted,
    ModelIdentity,
    RowRecord,
    label_array,
    labeled,
    scored_len,
)
from core.evaluation.constructions import CALIBRATION, labeled_by_swap
from core.evaluation.headline_fit import fit_calibration
from core.methods.lookback import fit_lookback
from core.methods.redeep import CalibrationTable, fit_choice
from core.methods.redeep.forward import DEFAULT_K_PERCENT
from core.methods.repcs import fit_threshold

logger = logging.getLogger(__name__)

SWAP_LEVEL = 1.0
"""κ (nats) at which the swap test locates the span to swap, before κ is fitted (as the bundled pipeline); the κ of
a calibration whose rows are all labeled by swap tests."""


def fit_tau(train: Sequence[RowRecord], who: ModelIdentity, alpha: float = DEFAULT_ALPHA) -> Threshold:
    """RePCS' τ on the read rows (clean) and recalled rows (memorized) of ``train``: τ(L) when each length bucket
    has enough read rows, else the constant τ alone (``extra["length_tau_refused"]`` says why).

    Raises:
        ValueError: no read row with a scored token.
    """
    read = [r for r in train if r.label == READ and scored_len(r) > 0]
    recalled = [r for r in train if r.label == RECALLED and scored_len(r) > 0]
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
        th = fit_threshold(z_clean, z_mem, gamma, n_scored_clean=np.array([scored_len(r) for r in read]), **common)
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


def ecs_only() -> Any:
    """The same at no layer: ECS of every head from the row's shared pass, no PKS (its every-layer logit lens is the
    costly part: the ``redeep-pks`` stage computes it after the headline's fits, :func:`.score.read_pks`)."""
    return SimpleNamespace(k_percent=DEFAULT_K_PERCENT, layers=[])


def redeep_table(records: Sequence[RowRecord]) -> tuple[CalibrationTable, list[RowRecord]]:
    """ReDeEP's calibration table of the labeled records with ECS and PKS, and those records."""
    usable = [r for r in records if r.ecs is not None and r.pks is not None and r.label is not None]
    if not usable:
        raise ValueError("no row with ReDeEP's ECS and PKS")
    table = CalibrationTable(
        np.array([r.ecs for r in usable], dtype=np.float64),
        np.array([r.pks for r in usable], dtype=np.float64),
        label_array(usable),
    )
    return table, usable


def _trained_on(who: ModelIdentity, n: int, what: str) -> list[dict[str, Any]]:
    return [{**t, "rows": n, "used_for": what} for t in who.trained_on] or [{"rows": n, "used_for": what}]


def fit_headline(records: Sequence[RowRecord], who: ModelIdentity) -> Fitted:
    """The headline's artifacts — τ and τ(L), the axes calibration — fitted on the calibration rows of ``records``.
    A fit that cannot be made (too few rows of a class …) is left ``None`` with its reason in ``notes``."""
    train = labeled(records, CALIBRATION)
    out = Fitted()
    try:
        out.tau = fit_tau(train, who)
    except ValueError as exc:
        out.notes["tau"] = str(exc)
    try:
        rows = [r for r in records if r.row.split == CALIBRATION]
        by_text = [r for r in train if not labeled_by_swap(r.row)]
        if len({r.label for r in train}) < 2:
            raise ValueError("the axes need read and recalled calibration rows")
        # κ is chosen on rows labeled by their text; rows all labeled by swap tests (a user's own traffic) take the
        # κ their swap tests located the span at
        scored = [r.scored for r in rows]
        cal = fit_calibration(scored, who.name) if by_text else fit_calibration(scored, who.name, level=SWAP_LEVEL)
        source = f"python -m core calibrate-model on {cal.fitted_on.get('rows', '?')} calibration rows"
        out.axes = replace(cal, source=source)
    except (ValueError, IndexError, TypeError) as exc:  # too few rows with a located span, a fold of one class …
        logger.warning("the axes calibration was not fitted: %s", exc)
        out.notes["axes"] = f"{type(exc).__name__}: {exc}"
    return out


def _fit_lookback(train: Sequence[RowRecord], who: ModelIdentity, out: Fitted) -> dict[str, float]:
    """The Lookback Lens classifier into ``out``; returns its out-of-fold P(recalled) per row key."""
    try:
        usable = [r for r in train if r.lookback is not None]
        if not usable:
            raise ValueError("no row with lookback ratios")
        X = np.array([r.lookback for r in usable], dtype=np.float64)
        out.lookback, oof = fit_lookback(
            X,
            label_array(usable),
            n_layers=who.n_layers,
            n_heads=who.n_heads,
            model=who.name,
            model_slug=who.slug,
            template=who.template,
            max_new_tokens=int(who.settings.get("max_new_tokens", 64)),
            trained_on=_trained_on(who, len(usable), "Lookback Lens classifier"),
        )
        return {r.key: float(p) for r, p in zip(usable, oof)}
    except ValueError as exc:
        out.notes["lookback"] = str(exc)
        return {}


def _fit_redeep(train: Sequence[RowRecord], who: ModelIdentity, out: Fitted, ov: np.ndarray | None) -> None:
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


def fit_detectors(
    records: Sequence[RowRecord], who: ModelIdentity, fitted: Fitted, ov: np.ndarray | None = None
) -> Fitted:
    """The detectors' artifacts fitted on the calibration rows of ``records`` into ``fitted`` (returned): the
    Lookback classifier, ReDeEP's choice, the combined detector (its Lookback column out of fold) and the
    per-detector thresholds; a fit that cannot be made is left ``None`` with its reason in ``notes``.

    Args:
        ov: ReDeEP's OV copying scores of every head (``None``: refused or not computed), stored with the choice.
    """
    train = labeled(records, CALIBRATION)
    out = fitted
    lookback_oof = _fit_lookback(train, who, out)
    _fit_redeep(train, who, out, ov)
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


def fit_all(records: Sequence[RowRecord], who: ModelIdentity, ov: np.ndarray | None = None) -> Fitted:
    """:func:`fit_headline` then :func:`fit_detectors` (every artifact, as one call)."""
    return fit_detectors(records, who, fit_headline(records, who), ov)


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
    return X, label_array(used), used


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
    y = label_array(train)
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
