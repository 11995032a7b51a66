"""Lookback Lens detectors: how much the heads looked back at the context while the answer was produced.

LR_t^{ℓ,h} = A_ctx / (A_ctx + A_new) per head and answer token (Chuang et al. 2024, eq. 1), from one
teacher-forced forward of the retrieval prompt + answer (:mod:`core.methods.lookback`); the first answer token
has no ratio (no earlier answer token) and is skipped, so a one-token answer fails with a stated reason.

* ``lookback`` — P(recalled) of the logistic regression over the ``L · H`` per-head mean ratios, fitted once on
  the behavior set's calibration split (``assets/lookback/``, ``scripts/build_lookback.py``), or on a model's own
  rows by ``python -m core calibrate-model``; for a model without a fit it refuses, naming the one step that builds
  one. Higher = recalled. Its τ (the 0.95-quantile of
  the out-of-fold P over read calibration rows) is the agreement view's threshold.
* ``lookback_cv`` — the same regression refit out of fold on the evaluated rows (:mod:`core.detectors.fitted`):
  how separable *this* data is with these features; runs on any model.
* ``lookback_mean`` — the ratio averaged over every head and answer token, no fit (higher = read): the
  model-free summary, on any model.

What they can and cannot conclude: built for contextual hallucination in 7B chat models; on a small model the
heads that look back may be few and the regression leans on whichever heads separate its calibration rows. A
score says how this run's attention compares with the calibration rows', not where the answer came from.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.detectors import keys
from core.detectors.registry import (
    GROUNDED_HIGH,
    MEMORIZED_HIGH,
    RETRIEVAL_TRACE,
    Details,
    DetectorInput,
    ThresholdRule,
    declare,
)
from core.detectors.shared import lookback_map_for
from core.detectors.thresholds import bundled_calibration, own_threshold
from core.methods.lookback import LookbackMap, LookbackModel, model_for, span_features
from core.methods.lookback.maths import head_mean_curve
from core.methods.lookback.model import LOOKBACK_MODEL
from core.model.calibration_store import missing_artifact

NAME = "lookback"
CV_NAME = "lookback_cv"
MEAN_NAME = "lookback_mean"
SOURCE = "Lookback Lens (Chuang et al., EMNLP 2024) eq. 1 + §3 linear classifier"


def map_for(inp: DetectorInput) -> LookbackMap:
    """The row's lookback map (from the row's shared traced forward, :mod:`core.detectors.shared`), cached per row."""
    if keys.LOOKBACK_MAP not in inp.cache:
        inp.cache[keys.LOOKBACK_MAP] = lookback_map_for(inp)
    return inp.cache[keys.LOOKBACK_MAP]


def features(inp: DetectorInput) -> np.ndarray:
    """The ``(L · H,)`` per-head mean lookback ratios of the row (``ValueError`` for a one-token answer)."""
    return span_features(map_for(inp).lr)


def classifier_for(inp: DetectorInput) -> LookbackModel:
    """This model's Lookback Lens classifier for the row's template (``ValueError`` when none was built)."""
    model = model_for(inp.handle, inp.result.template)
    if model is None:
        raise ValueError(
            missing_artifact("Lookback Lens classifier", inp.handle, inp.result.template)
            + " lookback_cv and lookback_mean need none."
        )
    return model


def score(inp: DetectorInput) -> float:
    """P(recalled) of the bundled classifier; details (τ, verdict, the most-weighted heads) in ``inp.cache``."""
    model = classifier_for(inp)
    x = features(inp)
    p = model.probability(x)
    weights = model.head_weights()
    top = np.argsort(-np.abs(weights).ravel())[:5]
    inp.cache[keys.LOOKBACK_DETAILS] = {
        "p_recalled": p,
        "tau": model.tau,
        "verdict": "recalled" if p > model.tau else "read",
        "mean_lookback_ratio": float(np.mean(x)),
        "top_heads": [
            {"layer": int(i // model.n_heads), "head": int(i % model.n_heads), "coef": float(weights.ravel()[i])}
            for i in top
        ],
    }
    return p


def score_mean(inp: DetectorInput) -> float:
    """The lookback ratio averaged over every head and every answer token with a ratio (higher = read)."""
    curve = head_mean_curve(map_for(inp).lr)
    if not np.isfinite(curve).any():
        raise ValueError("a one-token answer has no lookback ratio (its only token precedes every answer token)")
    return float(np.nanmean(curve))


def _cv_score(inp: DetectorInput) -> float:
    raise ValueError(f"{CV_NAME} is fitted by cross-validation during an evaluation; it has no single-row score")


def classifier_tau(model: LookbackModel) -> tuple[float, str] | None:
    """``lookback``'s τ: the classifier's own, and where it came from."""
    return model.tau, (
        f"the {1 - model.alpha:g}-quantile of the out-of-fold P(recalled) over {model.n_grounded} read "
        f"calibration rows (out-of-fold FPR {model.fpr_oof:.1%}, FNR {model.fnr_oof:.1%})"
    )


def mean_tau(model: LookbackModel) -> tuple[float, str] | None:
    """``lookback_mean``'s τ: the α-quantile of its value over the classifier's read calibration rows."""
    if model.mean_tau is None:
        return None
    return model.mean_tau, (
        f"the {model.alpha:g}-quantile of the mean lookback ratio over {model.n_grounded} read calibration rows"
    )


def from_classifier(tau: Callable[[LookbackModel], tuple[float, str] | None]) -> ThresholdRule:
    """A threshold rule that reads ``tau`` of this model's classifier file (none without a classifier)."""

    def find(inp: DetectorInput) -> tuple[float, str] | None:
        model = model_for(inp.handle, inp.result.template)
        return None if model is None else tau(model)

    return own_threshold(find)


DETAILS = Details(
    keys.LOOKBACK_DETAILS,
    {
        "p_recalled": "the classifier's P(recalled) (the score)",
        "tau": "its calibrated τ",
        "verdict": "recalled when P > τ, else read",
        "mean_lookback_ratio": "the per-head mean ratio averaged over heads",
        "top_heads": "the five most-weighted heads (layer, head, coefficient)",
    },
)

declare(
    {
        "name": NAME,
        "label": "Lookback Lens: LR over per-head lookback ratios (bundled fit)",
        "higher_means": MEMORIZED_HIGH,
        "score": score,
        "source": SOURCE + "; fitted on the calibration split of assets/behavior/",
        "short": "Lookback Lens",
        "thresholds": (from_classifier(classifier_tau), bundled_calibration),
        "details": DETAILS,
    },
    {
        "name": CV_NAME,
        "label": "Lookback Lens, logistic regression, 5-fold CV on these rows",
        "higher_means": MEMORIZED_HIGH,
        "score": _cv_score,
        "source": SOURCE + " (stratified 5-fold CV, seed 42)",
        "needs_fit": True,
        "features": features,
        "artifact": None,
    },
    {
        "name": MEAN_NAME,
        "label": "Lookback ratio, mean over heads and answer tokens",
        "higher_means": GROUNDED_HIGH,
        "score": score_mean,
        "source": "Lookback Lens (Chuang et al., EMNLP 2024) eq. 1, averaged (no fit)",
        "short": "lookback ratio",
        "thresholds": (from_classifier(mean_tau), bundled_calibration),
    },
    cost="forward",
    reads=frozenset({RETRIEVAL_TRACE}),
    artifact=LOOKBACK_MODEL,
    page="Attention",
)
