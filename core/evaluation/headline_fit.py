"""Fit the headline's calibration on calibration rows only, record what was chosen on which rows, and measure it.

The inputs are scored rows: a :class:`~core.evaluation.constructions.ValidationRow`, its
:class:`~core.engine.result.DualPathResult` (the app's default settings, the parametric answer generated) and, for
rows whose context agrees with memory, its swap test (:mod:`core.engine.swap`).

Labels (:func:`row_label`): a conflict, on-topic or invented row is labeled by what the answer with the context
names (:func:`core.engine.matching.behavior_label`); a row whose context agrees with memory cannot be labeled from
the text (the answer names what both say), so its label is the swap test's: *read* when the answer follows the
swap, *recalled* when it keeps the original, none otherwise.

:func:`fit_calibration` makes every choice on the rows it is given and nowhere else — the span level κ (the level
whose spans name a row's object most often), axis 1's features (the candidate set with the best grouped
cross-validated headline agreement), whether to use the agreement resolver (the same figure, with and without it),
both axes, the joint resolver — and returns the calibration with its
provenance: each choice, the candidates it was chosen among, the figure it was chosen by, and a digest of the rows
it was made on. :func:`measure` scores a set of rows with a calibration, beside the text-only rule and axis 1
alone (:mod:`core.evaluation.validity`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core.engine.axes import feature_values, headline, observe, reliance_axis
from core.engine.axes_calibration import AGREEMENT_FEATURES, JOINT_FEATURES, AxesCalibration
from core.engine.matching import behavior_label, find_spans, split_aliases
from core.engine.result import DualPathResult
from core.engine.swap import SwapTest
from core.engine.verdict import READ, RECALLED
from core.evaluation.constructions import ValidationRow, labeled_by_swap, norm_text, row_groups
from core.evaluation.validity import axis1_verdict, text_only_verdict, validity_figures

SPAN_LEVELS = (0.5, 1.0, 2.0, 3.0, 4.0, 6.0)
"""The grid κ is chosen from (nats)."""
FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "span_llr": ("span_llr",),
    "span_llr+kl": ("span_llr", "ln_span_kl"),
    "span_llr+kl+lp": ("span_llr", "ln_span_kl", "span_lp_parametric"),
    "span_llr+kl+entropy": ("span_llr", "ln_span_kl", "span_entropy_parametric"),
    "whole_answer_kl": ("ln_max_kl", "ln_mean_kl", "ln_L"),
}
"""The candidates for axis 1's features (the last is the previous headline's: the whole answer's first tokens)."""
DEFAULT_FEATURES = FEATURE_SETS["span_llr+kl"]
"""Axis 1's features while κ is chosen (and when features are not chosen)."""
CV_FOLDS = 5


@dataclass
class Scored:
    """One scored row: the row, its result and its swap test (``None`` when not run)."""

    row: ValidationRow
    result: DualPathResult
    swap: SwapTest | None = None


def row_key(row: ValidationRow) -> str:
    """A row's identity: a digest of its construction, normalized query and context (for provenance)."""
    text = f"{row.construction}\n{norm_text(row.query)}\n{norm_text(row.context)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def behavior_of(s: Scored) -> str | None:
    """The behavior label of a row's answer: by the text for conflict, on-topic and invented rows, by the swap
    test for rows whose context agrees with memory (``None``: not decided)."""
    if labeled_by_swap(s.row):
        return s.swap.outcome if s.swap is not None and s.swap.decided else None
    label, _ = behavior_label(s.result.retrieval.answer, s.row.answer_context, s.row.answer_memory)
    return label


row_label = behavior_of


def knows_answer(s: Scored) -> bool:
    """Axis 2's label: the answer names the remembered object and so does the model's own no-context answer."""
    memory = split_aliases(s.row.answer_memory)
    return (
        bool(memory)
        and bool(find_spans(s.result.retrieval.answer, memory))
        and bool(find_spans(s.result.parametric.answer, memory))
    )


def _span_hit(s: Scored, level: float) -> bool:
    span = observe(s.result, level).span
    objects = split_aliases(s.row.answer_context) + split_aliases(s.row.answer_memory)
    return span is not None and any(find_spans(o, [span.word]) for o in objects)


def _digest(rows: Sequence[Scored]) -> dict[str, Any]:
    keys = sorted(row_key(s.row) for s in rows)
    return {"n": len(keys), "sha256": hashlib.sha256("\n".join(keys).encode()).hexdigest()}


def _fit_with(
    rows: Sequence[Scored], level: float | None, features: tuple[str, ...], model: str, agreement: bool = False
) -> AxesCalibration:
    from core.methods.axes_fit import fit_axes

    X, read, joint = [], [], []
    support, supported = [], []
    agree_X, agree_read = [], []
    for s in rows:
        label = behavior_of(s)
        obs = observe(s.result, level)
        if agreement and label in (READ, RECALLED) and obs.in_context and obs.in_parametric:
            agree_feats = feature_values(obs, AGREEMENT_FEATURES)
            if agree_feats is not None:
                agree_X.append([agree_feats[f] for f in AGREEMENT_FEATURES])
                agree_read.append(label == READ)
        if label in (READ, RECALLED):
            feats = feature_values(obs, features)
            joint_feats = feature_values(obs, JOINT_FEATURES)
            if feats is not None and joint_feats is not None:
                X.append([feats[f] for f in features])
                joint.append([joint_feats[f] for f in JOINT_FEATURES])
                read.append(label == READ)
            if obs.lp_parametric is not None:
                support.append(obs.lp_parametric)
                supported.append(knows_answer(s))
    return fit_axes(
        np.asarray(X),
        np.asarray(read),
        np.asarray(support),
        np.asarray(supported),
        model=model,
        source="scripts/validate_headline.py fit on calibration rows (assets/validation)",
        fitted_on={"rows": len(X), "read": int(sum(read)), "recalled": int(len(read) - sum(read))},
        span_level=level,
        features=features,
        joint_X=np.asarray(joint),
        **_agreement_data(agree_X, agree_read),
    )


def _agreement_data(X: list[list[float]], read: list[bool]) -> dict[str, Any]:
    """The agreement resolver's fit arguments when there are :data:`MIN_AGREEMENT_ROWS` agreeing rows, else none
    (:func:`core.methods.axes_fit.fit_agreement` decides between a regression and the rows' base rate)."""
    from core.methods.axes_fit import MIN_AGREEMENT_ROWS

    if len(read) < MIN_AGREEMENT_ROWS:
        return {}
    return {"agreement_X": np.asarray(X), "agreement_read": np.asarray(read)}


def _grouped_folds(rows: Sequence[Scored], k: int = CV_FOLDS) -> list[int]:
    """A fold per row, whole groups (shared question or subject) in one fold."""
    groups = row_groups([s.row for s in rows])
    names = sorted(set(groups))
    fold_of = {g: i % k for i, g in enumerate(names)}
    return [fold_of[g] for g in groups]


def cv_agreement(
    rows: Sequence[Scored], level: float | None, features: tuple[str, ...], model: str, agreement: bool = False
) -> float:
    """The headline's balanced match rate with behavior on ``rows`` — the mean of its match rate on the read rows
    and on the recalled rows — each fold's rows judged by a calibration fitted on the other folds (whole subject /
    question groups per fold). Balanced, because the bars hold for each behavior and the calibration rows' mix of
    behaviors is not the user's: the budget is filled with the short behavior's rows
    (:mod:`core.evaluation.calibrate.fill`)."""
    folds = _grouped_folds(rows)
    verdicts, labels = [], []
    for f in range(CV_FOLDS):
        train = [s for s, g in zip(rows, folds) if g != f]
        test = [s for s, g in zip(rows, folds) if g == f]
        cal = _fit_with(train, level, features, model, agreement)
        for s in test:
            label = behavior_of(s)
            if label in (READ, RECALLED):
                verdicts.append(headline(s.result, cal).verdict)
                labels.append(label)
    rates = [np.mean([v == b for v, b in zip(verdicts, labels) if b == behavior]) for behavior in set(labels)]
    return float(np.mean(rates)) if rates else float("nan")


def choose_level(rows: Sequence[Scored], model: str) -> tuple[float, dict[str, Any]]:
    """κ for ``rows``: the level of :data:`SPAN_LEVELS` whose headline agrees with behavior most often under
    grouped cross-validation (:func:`cv_agreement`, axis 1 on :data:`DEFAULT_FEATURES`), on the rows labeled by
    their text (conflict, on-topic, invented: not those whose label is the swap test's, which is run at the
    span κ locates). Ties go to the smallest level. Returns ``(κ, the record of the choice)``."""
    labeled = [s for s in rows if behavior_of(s) is not None and not labeled_by_swap(s.row)]
    scores = {level: cv_agreement(labeled, level, DEFAULT_FEATURES, model) for level in SPAN_LEVELS}
    level = max(SPAN_LEVELS, key=lambda k: (round(scores[k], 4), -k))
    hits = {str(k): round(float(np.mean([_span_hit(s, k) for s in labeled])), 4) for k in SPAN_LEVELS}
    record = {
        "what": "span level κ (nats)",
        "chosen": level,
        "candidates": {str(k): round(v, 4) for k, v in scores.items()},
        "by": f"headline agreement with behavior (balanced: the mean of the read and recalled rows' rates), "
        f"{CV_FOLDS}-fold cross-validation grouped by subject/question, on the rows labeled by their text",
        "span_names_an_object": hits,
        "rows": _digest(labeled),
    }
    return level, record


def fit_calibration(
    rows: Sequence[Scored], model: str, *, choose_features: bool = True, level: float | None = None
) -> AxesCalibration:
    """The calibration of ``rows`` (every choice made on them alone; see the module docstring), with its
    provenance: κ (:func:`choose_level`, unless ``level`` is given — e.g. the κ the swap tests were run at, chosen
    by :func:`choose_level` on the same rows), axis 1's features (grouped cross-validation), both axes, the joint
    resolver.

    Raises:
        ValueError: a row of the report split among ``rows``.
    """
    report = [s for s in rows if s.row.split != "calibration"]
    if report:
        raise ValueError(f"{len(report)} report rows given to the fit; it fits on calibration rows only")
    fitted = [s for s in rows if behavior_of(s) is not None]
    if level is None:
        level, record = choose_level(rows, model)
    else:
        record = {"what": "span level κ (nats)", "chosen": level, "by": "given (chosen by choose_level on these rows)",
                  "rows": _digest([s for s in fitted if not labeled_by_swap(s.row)])}  # fmt: skip
    choices: list[dict[str, Any]] = [record]
    features, agreement = DEFAULT_FEATURES, False
    if choose_features:
        scores = {
            (name, flag): cv_agreement(rows, level, feats, model, flag)
            for name, feats in FEATURE_SETS.items()
            for flag in (False, True)
        }
        # ties: fewer features, then no resolver
        name, agreement = max(scores, key=lambda c: (round(scores[c], 4), -len(FEATURE_SETS[c[0]]), not c[1]))
        features = FEATURE_SETS[name]
        choices.append(
            {
                "what": "axis 1 features, and the agreement resolver (where the span is in the context and in the "
                "no-context answer; labeled by the swap test)",
                "chosen": {"features": list(features), "agreement_resolver": agreement},
                "candidates": {
                    f"{n} {'with' if f else 'without'} the resolver": round(v, 4) for (n, f), v in scores.items()
                },
                "by": f"headline agreement with behavior (balanced), {CV_FOLDS}-fold cross-validation grouped by "
                "subject/question",
                "rows": _digest(fitted),
            }
        )
    cal = _fit_with(rows, level, features, model, agreement)
    choices.append({"what": "both axes, their cuts and bands, the resolvers", "rows": _digest(fitted)})
    provenance = {"choices": choices, "fitted_rows": sorted(row_key(s.row) for s in fitted)}
    return replace(cal, provenance=provenance)


def verdict_rows(rows: Sequence[Scored], cal: AxesCalibration) -> list[dict[str, Any]]:
    """Per row: its behavior, the headline's verdict, the text-only rule's and axis 1 alone's, and the swap test's
    outcome (the input of :func:`core.evaluation.validity.validity_figures`)."""
    out = []
    for s in rows:
        res = s.result
        head = headline(res, cal)
        obs = observe(res, cal.span_level)
        rel = reliance_axis(obs, cal)
        out.append(
            {
                "construction": s.row.construction,
                "relation": s.row.relation,
                "split": s.row.split,
                "behavior": behavior_of(s),
                "headline": head.verdict,
                "text_only": text_only_verdict(res.query, res.context, res.retrieval.answer, res.parametric.answer),
                "axis1": axis1_verdict(rel.state),
                "swap": s.swap.outcome if s.swap is not None else None,
                "span": None if obs.span is None else obs.span.text,
            }
        )
    return out


def measure(rows: Sequence[Scored], cal: AxesCalibration) -> dict[str, Any]:
    """:func:`~core.evaluation.validity.validity_figures` of ``rows`` under ``cal``."""
    return validity_figures(verdict_rows(rows, cal))
