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
from core.detectors.radar import score as radar_score
from core.detectors.redeep import score_ecs, score_pks
from core.detectors.registry import MEMORIZED_HIGH, Detector, DetectorInput, register
from core.io import JsonRecord
from core.maths.divergence import kl_statistics
from core.methods.baselines import min_k_plus_plus, min_k_prob, zlib_ratio
from core.methods.crm import SUPERVISED, supervised_score
from core.model import artifacts
from core.model.handle import ModelHandle
from core.model.prompts import resolve_template

NAME = "combined"
CV_NAME = "combined_cv"
MODEL_VERSION = 1
DEFAULT_T = 64
DEFAULT_SPLIT = 32
DEFAULT_ALPHA = 0.05
N_SPLITS = 5
SEED = 42
C = 1.0
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
}
"""Feature name → (raw value from a row, transform, what it is). The order is the feature vector's order."""

TRANSFORMS: dict[str, Callable[[float], float]] = {"none": float, "log1p": lambda v: math.log1p(max(float(v), 0.0))}


def raw_features(inp: DetectorInput, names: Sequence[str] = tuple(FEATURES), T: int = DEFAULT_T) -> np.ndarray:
    """The named features of one row, transformed (``log1p`` for the KL magnitudes), shape ``(len(names),)``.

    Raises:
        ValueError: an unknown feature name, a failing base detector (e.g. no CRM basis for this model), or a
            non-finite value.
    """
    out = []
    for name in names:
        if name not in FEATURES:
            raise ValueError(f"unknown combined-detector feature {name!r}; known: {', '.join(FEATURES)}")
        fn, transform, _ = FEATURES[name]
        out.append(TRANSFORMS[transform](fn(inp, T)))
    x = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        bad = [n for n, v in zip(names, x) if not math.isfinite(v)]
        raise ValueError(f"non-finite combined-detector features: {', '.join(bad)}")
    return x


@dataclass
class CombinedModel(JsonRecord):
    """The bundled stacked logistic regression, as stored in its JSON file.

    P(memorized | x) = σ(b + Σ_j w_j (x_j − m_j) / s_j) over :attr:`features` (transformed as in
    :data:`FEATURES`); ``recalled`` when P > :attr:`tau`.

    Attributes:
        model: the language model's display name; ``model_slug``: its cache key; ``template``: the resolved
            prompt template; ``T``: the answer tokens the KL features sum over.
        features, mean, scale, coef, intercept: the standardized logistic regression.
        tau, alpha: the (1 − α)-quantile of the out-of-fold P over the clean training rows.
        fpr_oof, fnr_oof: achieved out-of-fold error rates of τ on the training rows; ``auc_oof``,
            ``auc_oof_ci``: out-of-fold AUC with its bootstrap 95% CI.
        trained_on: the training files (path, rows, label, sha256); ``protocol``: how it was fitted.
    """

    KIND = "combined model"
    VERSION = MODEL_VERSION

    model: str
    model_slug: str
    template: str
    T: int
    features: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    tau: float
    alpha: float
    n_memorized: int
    n_grounded: int
    fpr_oof: float
    fnr_oof: float
    auc_oof: float
    auc_oof_ci: list[float]
    trained_on: list[dict[str, Any]] = field(default_factory=list)
    protocol: str = ""
    version: int = MODEL_VERSION

    def __post_init__(self) -> None:
        d = len(self.features)
        if not (len(self.mean) == len(self.scale) == len(self.coef) == d) or d == 0:
            raise ValueError("combined model: features, mean, scale and coef must have one equal, non-zero length")
        unknown = [f for f in self.features if f not in FEATURES]
        if unknown:
            raise ValueError(f"combined model: unknown features {', '.join(unknown)}")
        if not all(math.isfinite(float(v)) for v in [*self.mean, *self.coef, self.intercept, self.tau]):
            raise ValueError("combined model: non-finite parameters")
        if any(float(s) <= 0 for s in self.scale):
            raise ValueError("combined model: every scale must be > 0")

    def probability(self, x: np.ndarray) -> float:
        """P(memorized) of one transformed feature vector ``(d,)``."""
        v = np.asarray(x, dtype=np.float64)
        if v.shape != (len(self.features),):
            raise ValueError(f"expected {len(self.features)} features, got shape {v.shape}")
        z = self.intercept + float(np.sum(np.asarray(self.coef) * (v - np.asarray(self.mean)) / np.asarray(self.scale)))
        return float(1.0 / (1.0 + math.exp(-z))) if z > -700 else 0.0


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
        raise ValueError(
            f"No combined detector for {inp.handle.info.name!r} with template {inp.result.template!r}: build one "
            "with `python scripts/build_combined.py` (the embedded model's is bundled)."
        )
    return model


def score(inp: DetectorInput) -> float:
    """P(memorized) from the bundled stacked regression; details (features, τ, verdict) in ``inp.cache``."""
    model = _model(inp)
    x = raw_features(inp, model.features, model.T)
    p = model.probability(x)
    inp.cache[keys.COMBINED_DETAILS] = {
        "p_memorized": p,
        "tau": model.tau,
        "alpha": model.alpha,
        "verdict": "recalled" if p > model.tau else "read",
        "fpr_oof": model.fpr_oof,
        "fnr_oof": model.fnr_oof,
        "T": model.T,
        "features": dict(zip(model.features, (float(v) for v in x))),
        "contributions": {
            f: float(c * (v - m) / s) for f, c, v, m, s in zip(model.features, model.coef, x, model.mean, model.scale)
        },
        "trained_on": [t.get("path") for t in model.trained_on],
    }
    return p


def cv_features(inp: DetectorInput) -> np.ndarray:
    """Every feature of :data:`FEATURES` for the out-of-fold refit on the evaluated rows."""
    return raw_features(inp, tuple(FEATURES), DEFAULT_T)


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
    """Fit the stacked regression on labeled rows and calibrate τ out of fold.

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
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from core.maths.metrics import auc, auc_bootstrap_ci

    x = np.asarray(X, dtype=np.float64)
    labels = np.asarray(y).astype(int)
    if x.ndim != 2 or x.shape[0] != labels.shape[0] or x.shape[1] != len(names):
        raise ValueError(f"X must be (n, {len(names)}) with n = len(y), got {x.shape} and {labels.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("features must be finite")
    if min(int((labels == 0).sum()), int((labels == 1).sum())) < N_SPLITS:
        raise ValueError(f"need at least {N_SPLITS} rows of each label")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    pipe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000))
    folds = StratifiedKFold(n_splits=N_SPLITS, shuffle=True, random_state=SEED)
    oof = cross_val_predict(pipe, x, labels, cv=folds, method="predict_proba")[:, 1]
    tau = float(np.quantile(oof[labels == 0], 1.0 - alpha))
    fpr = float((oof[labels == 0] > tau).mean())
    fnr = float((oof[labels == 1] <= tau).mean())
    pipe.fit(x, labels)
    scaler, lr = pipe.named_steps["standardscaler"], pipe.named_steps["logisticregression"]
    low, high = auc_bootstrap_ci(labels, oof, n_boot=n_boot, seed=SEED)
    fitted = CombinedModel(
        model=model,
        model_slug=model_slug,
        template=template,
        T=int(T),
        features=list(names),
        mean=[float(v) for v in scaler.mean_],
        scale=[float(v) for v in scaler.scale_],
        coef=[float(v) for v in lr.coef_[0]],
        intercept=float(lr.intercept_[0]),
        tau=tau,
        alpha=float(alpha),
        n_memorized=int((labels == 1).sum()),
        n_grounded=int((labels == 0).sum()),
        fpr_oof=fpr,
        fnr_oof=fnr,
        auc_oof=float(auc(labels, oof)),
        auc_oof_ci=[float(low), float(high)],
        trained_on=list(trained_on or []),
        protocol=(
            f"StandardScaler + LogisticRegression(C={C}, L2) over {len(names)} features; out-of-fold P(memorized) "
            f"by cross_val_predict(StratifiedKFold({N_SPLITS}, shuffle, seed {SEED})); tau = the {1 - alpha:g}-"
            "quantile of the out-of-fold P over the grounded rows; FPR/FNR/AUC on those out-of-fold scores; final "
            "model fitted on every row."
        ),
    )
    return fitted, oof


@dataclass(frozen=True)
class CombinedDetector(Detector):
    """The bundled combined detector, with its own calibrated τ for the agreement view and ``run --json``
    (:func:`core.detectors.agreement.threshold_for` calls :meth:`threshold`)."""

    def threshold(self, inp: DetectorInput) -> tuple[float, str] | None:
        """``(τ, where it came from)`` of the combined model for this row's model and template, or ``None``."""
        model = load_model_for(inp.handle, inp.result.template)
        if model is None:
            return None
        return model.tau, (
            f"the {1 - model.alpha:g}-quantile of the out-of-fold P(memorized) over {model.n_grounded} clean "
            f"calibration rows (out-of-fold FPR {model.fpr_oof:.1%}, FNR {model.fnr_oof:.1%})"
        )


register(
    CombinedDetector(
        name=NAME,
        label="Combined: stacked LR over the cheap detectors (bundled fit)",
        higher_means=MEMORIZED_HIGH,
        score=score,
        cost="forward",
        source="Stacked logistic regression over RePCS Z, CRM L2/LTS, context baselines, RADAR; "
        "fitted on assets/calibration/, τ at α on out-of-fold clean rows",
    )
)


def _cv_score(inp: DetectorInput) -> float:
    raise ValueError(f"{CV_NAME} is fitted by cross-validation during an evaluation; it has no single-row score")


register(
    Detector(
        name=CV_NAME,
        label="Combined (cross-validated on this data)",
        higher_means=MEMORIZED_HIGH,
        score=_cv_score,
        cost="forward",
        source="The combined features refit out of fold on the evaluated rows (stratified 5-fold, seed 42)",
        needs_fit=True,
        features=cv_features,
    )
)
