"""The combined detector: a stacked logistic regression over the cheap detectors' scores, calibrated like RePCS.

**Features** (:data:`FEATURES`; every one from the run's result or one extra forward pass, no extra
generation): RePCS Z and the CRM level-2 statistics of KL_t (mean, max, variance, trend) over the first
:attr:`CombinedModel.T` answer tokens of ``result.token_kl`` (the combined model's own T, so the features do
not change with the run's window as long as the answer was generated that far), CRM LTS (mean supervised-direction
z-score, :mod:`core.detectors.crm`), the context-text baselines (log-perplexity, zlib ratio, Min-20% and
Min-20%++, :mod:`core.detectors.baselines`) and RADAR's recall probability for the query
(:mod:`core.detectors.radar`) and ReDeEP's two scores over the model's chosen heads and layers (ECS, PKS:
:mod:`core.detectors.redeep`; one traced forward; the ReDeEP score itself is their linear combination, so it
adds nothing as a third feature). Heavy-tailed non-negative KL features enter as ``log1p``; each feature is then
standardized (``StandardScaler``) and combined by ``LogisticRegression`` (L2, C = 1).

**Two detectors** are registered:

* ``combined`` — the model fitted once on bundled labeled data and stored as a small JSON file (coefficients,
  scaler, feature names, τ; no pickles) under ``assets/combined/`` (``scripts/build_combined.py`` rebuilds it;
  for the embedded model it is trained on the calibration sets ``assets/calibration/clean.csv`` and
  ``memorized.csv``, never on the probe set). Its score is P(memorized); its verdict flags *recalled* when
  P > τ, with τ the (1 − α)-quantile of the **out-of-fold** P over the clean (grounded) training rows — RePCS
  Alg. 1's calibration on clean rows, with the achieved out-of-fold FPR/FNR stored next to it.
* ``combined_cv`` — "combined (cross-validated on this data)": the same features refit during an evaluation
  out of fold on the evaluated rows (stratified 5-fold, seed 42, :mod:`core.detectors.fitted`), so no row is
  scored by a model that saw its label. It says how separable *this* data is with these features; the bundled
  ``combined`` says how a model fitted elsewhere transfers to it.

What it can and cannot conclude: the combination is only as honest as its training data. The calibration sets
were screened with the model under test (memorized rows kept only when the model answered without context),
and their grounded rows are invented facts, so context-familiarity features (perplexity, Min-K%) can learn to
recognise invented names; the per-feature coefficients are stored and shown so a reviewer can see what it
leans on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.detectors import keys
from core.detectors.baselines import context_stats
from core.detectors.crm import basis_for, displacement_for
from core.detectors.lookback import map_for
from core.detectors.lookback import score as lookback_score
from core.detectors.lookback import score_mean as lookback_mean
from core.detectors.radar import score as radar_score
from core.detectors.redeep import score_ecs, score_pks
from core.detectors.registry import MEMORIZED_HIGH, READS, Details, Detector, DetectorInput, available, declare
from core.detectors.thresholds import bundled_calibration, own_threshold
from core.io import JsonRecord
from core.maths.divergence import kl_statistics
from core.methods.baselines import min_k_plus_plus, min_k_prob, zlib_ratio
from core.methods.crm import SUPERVISED, supervised_score
from core.methods.logistic import LogisticParams, fit_logistic, protocol
from core.model import artifacts
from core.model.calibration_store import missing_artifact
from core.model.handle import ModelHandle
from core.model.prompts import resolve_template

NAME = "combined"
CV_NAME = "combined_cv"
MODEL_VERSION = 1
DEFAULT_T = 64
DEFAULT_SPLIT = 32
DEFAULT_ALPHA = 0.05
MIN_K = 20


def _kl_window(inp: DetectorInput, T: int) -> np.ndarray:
    kl = np.asarray(inp.result.token_kl, dtype=np.float64)[:T]
    if kl.size == 0:
        raise ValueError("the retrieval answer is empty: no KL to combine")
    return kl


def _kl_stat(name: str) -> Callable[[DetectorInput, int], float]:
    def value(inp: DetectorInput, T: int) -> float:
        stats = kl_statistics(_kl_window(inp, T), DEFAULT_SPLIT)
        return float(stats[name] or 0.0)

    return value


def _z(inp: DetectorInput, T: int) -> float:
    return float(_kl_window(inp, T).sum())


def _crm_lts(inp: DetectorInput, T: int) -> float:
    basis = basis_for(inp)
    return supervised_score(basis, basis.lts(displacement_for(inp), SUPERVISED))


def _log_ppl(inp: DetectorInput, T: int) -> float:
    return float(-np.mean(context_stats(inp)["logprob"]))


def _zlib(inp: DetectorInput, T: int) -> float:
    return zlib_ratio(context_stats(inp)["logprob"], inp.result.context)


def _min_k(inp: DetectorInput, T: int) -> float:
    return min_k_prob(context_stats(inp)["logprob"], MIN_K)


def _min_kpp(inp: DetectorInput, T: int) -> float:
    s = context_stats(inp)
    return min_k_plus_plus(s["logprob"], s["mu"], s["sigma"], MIN_K)


def _radar(inp: DetectorInput, T: int) -> float:
    return float(radar_score(inp))


def _redeep_ecs(inp: DetectorInput, T: int) -> float:
    return score_ecs(inp)


def _redeep_pks(inp: DetectorInput, T: int) -> float:
    return score_pks(inp)


def _one_token(inp: DetectorInput) -> bool:
    """A one-token answer has no lookback ratio (the row's cached map, one traced forward if none yet)."""
    return map_for(inp).lr.shape[-1] < 2


def _lookback(inp: DetectorInput, T: int) -> float:
    return math.nan if _one_token(inp) else lookback_score(inp)


def _lookback_mean(inp: DetectorInput, T: int) -> float:
    return math.nan if _one_token(inp) else lookback_mean(inp)


FEATURES: dict[str, tuple[Callable[[DetectorInput, int], float], str, str]] = {
    "z": (_z, "log1p", "RePCS Z = Σ_{t<T} KL_t (repcs)"),
    "kl_mean": (_kl_stat("mean"), "log1p", "mean KL_t (repcs_mean; CRM L2 KL-mean)"),
    "kl_max": (_kl_stat("max"), "log1p", "max KL_t (max_token_kl; CRM L2 KL-max)"),
    "kl_var": (_kl_stat("var"), "log1p", "variance of KL_t (CRM L2 KL-var)"),
    "kl_trend": (_kl_stat("trend"), "none", "slope of KL_t against t (CRM L2 KL-trend)"),
    "crm_lts": (_crm_lts, "none", "CRM LTS, mean supervised z-score (crm_lts)"),
    "log_ppl": (_log_ppl, "none", "log-perplexity of the context (ppl)"),
    "zlib": (_zlib, "none", "zlib ratio of the context (zlib)"),
    "min_k_20": (_min_k, "none", "Min-20% Prob of the context (min_k_20)"),
    "min_kpp_20": (_min_kpp, "none", "Min-20%++ of the context (min_kpp_20)"),
    "radar": (_radar, "none", "RADAR recall probability of the query (radar)"),
    "redeep_ecs": (_redeep_ecs, "none", "ReDeEP ECS, mean over the chosen copying heads (redeep_ecs)"),
    "redeep_pks": (_redeep_pks, "none", "ReDeEP PKS, mean over the chosen knowledge layers (redeep_pks)"),
    "lookback": (_lookback, "none", "Lookback Lens P(recalled), the bundled classifier (lookback)"),
    "lookback_mean": (_lookback_mean, "none", "mean lookback ratio over heads and answer tokens (lookback_mean)"),
}
"""Feature name → (raw value from a row, transform, what it is). The order is the feature vector's order."""


def _declared(detector: Detector) -> Callable[[DetectorInput, int], float]:
    def value(inp: DetectorInput, T: int) -> float:
        return float(detector.score(inp))

    return value


def candidates() -> dict[str, tuple[Callable[[DetectorInput, int], float], str, str]]:
    """Every feature the combined detector can combine, in the feature vector's order: its own
    (:data:`FEATURES`), then the score of every registered single-row detector declared with ``combine=True``
    (``Detector.combine``: a detector registered in a notebook joins here), untransformed."""
    out = dict(FEATURES)
    for detector in available().values():
        if detector.combine and detector.single_row and detector.name not in out:
            out[detector.name] = (_declared(detector), "none", f"{detector.label} ({detector.name})")
    return out


def cv_candidates() -> tuple[str, ...]:
    """``combined_cv``'s features: :data:`CV_FEATURES` and the declared candidates (:func:`candidates`)."""
    return CV_FEATURES + tuple(name for name in candidates() if name not in FEATURES)


MISSING_OK = ("lookback", "lookback_mean")
"""Features a row may lack (NaN: a one-token answer has no lookback ratio); the bundled model then uses the
feature's training mean, so it adds nothing to the sum."""
CV_FEATURES = tuple(f for f in FEATURES if f != "lookback")
"""``combined_cv``'s features: all but the Lookback classifier's P, which needs a classifier fitted elsewhere
(the embedded model's is bundled; other models have none unless built)."""

TRANSFORMS: dict[str, Callable[[float], float]] = {"none": float, "log1p": lambda v: math.log1p(max(float(v), 0.0))}


def raw_features(inp: DetectorInput, names: Sequence[str] = tuple(FEATURES), T: int = DEFAULT_T) -> np.ndarray:
    """The named features of one row, transformed (``log1p`` for the KL magnitudes), shape ``(len(names),)``.

    Raises:
        ValueError: an unknown feature name, a failing base detector (e.g. no CRM basis for this model), or a
            non-finite value (NaN is kept for the features of :data:`MISSING_OK`).
    """
    known = candidates()
    out = []
    for name in names:
        if name not in known:
            raise ValueError(f"unknown combined-detector feature {name!r}; known: {', '.join(known)}")
        fn, transform, _ = known[name]
        out.append(TRANSFORMS[transform](fn(inp, T)))
    x = np.asarray(out, dtype=np.float64)
    bad = [n for n, v in zip(names, x) if not math.isfinite(v) and not (math.isnan(v) and n in MISSING_OK)]
    if bad:
        raise ValueError(f"non-finite combined-detector features: {', '.join(bad)}")
    return x


@dataclass
class CombinedModel(JsonRecord, LogisticParams):
    """The bundled stacked logistic regression, as stored in its JSON file.

    P(memorized | x) = σ(b + Σ_j w_j (x_j − m_j) / s_j) over :attr:`features` (transformed as in
    :data:`FEATURES`); ``recalled`` when P > :attr:`tau`. The regression's fields (mean, scale, coef,
    intercept, τ, α, the out-of-fold FPR/FNR/AUC with its CI) are :class:`~core.methods.logistic.LogisticParams`.

    Attributes:
        model: the language model's display name; ``model_slug``: its cache key; ``template``: the resolved
            prompt template; ``T``: the answer tokens the KL features sum over.
        features: the feature names, in the order of the vector.
        trained_on: the training files (path, rows, label, sha256); ``protocol``: how it was fitted.
    """

    KIND = "combined model"
    VERSION = MODEL_VERSION

    model: str
    model_slug: str
    template: str
    T: int
    features: list[str]
    trained_on: list[dict[str, Any]] = field(default_factory=list)
    protocol: str = ""
    version: int = MODEL_VERSION

    def __post_init__(self) -> None:
        self.check(self.KIND, len(self.features))
        known = candidates()
        unknown = [f for f in self.features if f not in known]
        if unknown:
            raise ValueError(f"combined model: unknown features {', '.join(unknown)}")

    def imputed(self, x: np.ndarray) -> np.ndarray:
        """``x`` with a missing feature (NaN) replaced by its training mean, so it adds nothing."""
        v = np.asarray(x, dtype=np.float64)
        if v.shape != (len(self.features),):
            raise ValueError(f"expected {len(self.features)} features, got shape {v.shape}")
        return np.where(np.isnan(v), np.asarray(self.mean), v)

    def probability(self, x: np.ndarray) -> float:
        """P(memorized) of one transformed feature vector ``(d,)`` (NaN: :meth:`imputed`)."""
        return float(self.probabilities(self.imputed(x))[0])


def bundled_model_path(template_key: str) -> Path:
    """``assets/combined/embedded-<template>.json``: the embedded model's combined detector."""
    return COMBINED_MODEL.bundled("", template_key)  # type: ignore[misc]


COMBINED_MODEL = artifacts.per_template("combined-detector", CombinedModel.load, "combined")
"""The combined detector per (model, resolved template): bundled for the embedded model, else built and cached."""


def cache_model_path(handle: ModelHandle, template_key: str) -> Path:
    """``<cache_dir>/combined/<slug>/<template>.json``: a combined detector built for another model."""
    return artifacts.cache_path(COMBINED_MODEL, handle, template_key)


def load_model_for(handle: ModelHandle, template: str) -> CombinedModel | None:
    """The combined model of this language model and (resolved) template, or ``None`` when none was built
    (the artifact store's lookup: :func:`core.model.artifacts.find`)."""
    return artifacts.find(COMBINED_MODEL, handle, resolve_template(template, handle.tokenizer).key)


def _model(inp: DetectorInput) -> CombinedModel:
    model = load_model_for(inp.handle, inp.result.template)
    if model is None:
        raise ValueError(missing_artifact("combined detector", inp.handle, inp.result.template))
    return model


def score(inp: DetectorInput) -> float:
    """P(memorized) from the bundled stacked regression; details (features, τ, verdict) in ``inp.cache``."""
    model = _model(inp)
    raw = raw_features(inp, model.features, model.T)
    x = model.imputed(raw)
    p = model.probability(x)
    inp.cache[keys.COMBINED_DETAILS] = {
        "p_memorized": p,
        "tau": model.tau,
        "alpha": model.alpha,
        "verdict": "recalled" if p > model.tau else "read",
        "fpr_oof": model.fpr_oof,
        "fnr_oof": model.fnr_oof,
        "T": model.T,
        "features": {f: (None if math.isnan(v) else float(v)) for f, v in zip(model.features, raw)},
        "contributions": {
            f: float(c * (v - m) / s) for f, c, v, m, s in zip(model.features, model.coef, x, model.mean, model.scale)
        },
        "trained_on": [t.get("path") for t in model.trained_on],
    }
    return p


def cv_features(inp: DetectorInput) -> np.ndarray:
    """The features of :func:`cv_candidates` (:data:`CV_FEATURES` and the declared candidates) for the
    out-of-fold refit on the evaluated rows.

    Raises:
        ValueError: as :func:`raw_features`, and for a one-token answer (no lookback ratio to refit on).
    """
    x = raw_features(inp, cv_candidates(), DEFAULT_T)
    if np.isnan(x).any():
        raise ValueError("a one-token answer has no lookback ratio (its only token precedes every answer token)")
    return x


# -- fitting (used by scripts/build_combined.py; pure: arrays in, model out) ------------------------------------


def fit_combined(
    X: np.ndarray,
    y: np.ndarray,
    names: Sequence[str],
    *,
    model: str,
    model_slug: str,
    template: str,
    T: int = DEFAULT_T,
    alpha: float = DEFAULT_ALPHA,
    trained_on: list[dict[str, Any]] | None = None,
    n_boot: int = 1000,
) -> tuple[CombinedModel, np.ndarray]:
    """Fit the stacked regression on labeled rows and calibrate τ out of fold
    (:func:`core.methods.logistic.fit_logistic`).

    Out-of-fold P(memorized) for every row from ``cross_val_predict`` (``StratifiedKFold(5, shuffle=True,
    random_state=42)`` over ``StandardScaler → LogisticRegression(C=1)``); τ = the (1 − α)-quantile of the
    out-of-fold P over the grounded rows (so ≈ α of clean rows are flagged); achieved FPR/FNR and AUC (with a
    bootstrap CI) on the same out-of-fold scores; then the final model on every row.

    Args:
        X: ``(n, d)`` transformed features; ``y``: ``(n,)`` 1 = memorized.
        names: the ``d`` feature names (keys of :data:`FEATURES`).

    Returns:
        ``(model, out-of-fold probabilities (n,))``.

    Raises:
        ValueError: shapes, non-finite features, fewer than 5 rows of a class, α outside (0, 1).
    """
    fit, oof = fit_logistic(X, y, len(names), alpha=alpha, n_boot=n_boot)
    fitted = CombinedModel(
        **fit.params(),
        model=model,
        model_slug=model_slug,
        template=template,
        T=int(T),
        features=list(names),
        trained_on=list(trained_on or []),
        protocol=protocol(f"{len(names)} features"),
    )
    return fitted, oof


def own_tau(inp: DetectorInput) -> tuple[float, str] | None:
    """``(τ, where it came from)`` of the combined model for this row's model and template, or ``None``."""
    model = load_model_for(inp.handle, inp.result.template)
    return None if model is None else (model.tau, model.tau_source("P(memorized)", "clean calibration rows"))


def _cv_score(inp: DetectorInput) -> float:
    raise ValueError(f"{CV_NAME} is fitted by cross-validation during an evaluation; it has no single-row score")


DETAILS = Details(
    keys.COMBINED_DETAILS,
    {
        "p_memorized": "the stacked regression's P(memorized) (the score)",
        "tau": "its calibrated τ",
        "alpha": "α of that τ",
        "verdict": "recalled when P > τ, else read",
        "fpr_oof": "out-of-fold FPR at τ on the training rows",
        "fnr_oof": "out-of-fold FNR at τ",
        "T": "the answer tokens the KL features sum over",
        "features": "each feature's value before standardizing (null when missing)",
        "contributions": "each feature's term in the logit, w_j (x_j − m_j) / s_j",
        "trained_on": "the training files",
    },
)

declare(
    {
        "name": NAME,
        "label": "Combined: stacked LR over the cheap detectors (bundled fit)",
        "score": score,
        "source": "Stacked logistic regression over RePCS Z, CRM L2/LTS, context baselines, RADAR, ReDeEP and the "
        "Lookback Lens; fitted on assets/calibration/, τ at α on out-of-fold clean rows",
        "short": "combined",
        "thresholds": (own_threshold(own_tau), bundled_calibration),
        "artifact": COMBINED_MODEL,
        "details": DETAILS,
    },
    {
        "name": CV_NAME,
        "label": "Combined (cross-validated on this data)",
        "source": "The combined features but the Lookback classifier's P, refit out of fold on the evaluated rows "
        "(stratified 5-fold, seed 42)",
        "score": _cv_score,
        "needs_fit": True,
        "features": cv_features,
    },
    higher_means=MEMORIZED_HIGH,
    cost="forward",
    reads=frozenset(READS),
)
