"""Computational Reality Monitoring (CRM): latent trajectory shift, its calibration and its detectors.

Equations (CRM paper, §2, §4.5, appendices E, P, U, V):

* displacement at the last prompt token, per layer:  d_ℓ = h_ℓ^c − h_ℓ^0           (with / without context)
* PC1 direction v_ℓ by SVD of the centred calibration displacements of layer ℓ (appendix P.3)
* LTS_ℓ = ⟨h_ℓ^c − h_ℓ^0, v_ℓ⟩                                                       (eq. 1)
* target layers: PCA variance ratio > 0.01 (§3, appendix P.3)
* supervised direction v_sup^(ℓ) = (E[d_ℓ|member] − E[d_ℓ|non-member]) / ‖…‖₂       (eq. 2)
* magnitude baseline ‖d_ℓ‖₂ (appendix E); logit-lens KL per layer (appendix F)
* audit rule: flag layer ℓ when |LTS_ℓ − μ_ℓ| > 2σ_ℓ, μ/σ from the calibration set (appendix V.1), over
  the whole trajectory (every layer, as the paper's audit server does); anomaly score = mean_ℓ |LTS_ℓ − μ_ℓ| / σ_ℓ
* level 1: Δ_seq = 1 − cos(enc(y_0), enc(y_c))                                       (eq. 3)
* classifier: logistic regression over the per-layer LTS features, stratified 5-fold CV (seed 42),
  ROC-AUC with a bootstrap 95 % CI (§2, §3)

Choices where the paper is silent or ambiguous (stated in the UI and the README):

* **Variance ratio.** With n ≈ 100 calibration prompts, the *within-layer* explained-variance ratio of PC1
  is at least 1/99 > 0.01 for every layer that varies at all, so the "> 0.01" rule would keep every layer —
  but the paper reports 9–22 of 28–48 layers kept. We therefore read the ratio as the share of the *total*
  calibration displacement variance (summed over all layers) that layer ℓ's PC1 explains:
  ``evr_ℓ = λ₁,ℓ / Σ_ℓ' tr Cov(d_ℓ')``, which filters the near-zero-variance layers as the paper describes.
  The within-layer ratio ``λ₁,ℓ / tr Cov(d_ℓ)`` is kept too (``evr_within``) and shown. Because the
  residual stream's scale grows with depth, few (late) layers pass in small models, so the classifier is
  also reported on all layers (the paper's all-layer protocol of Tables 6, 24, 25).
* **Sign of PC1** is arbitrary; it is fixed so that the calibration mean of LTS_ℓ is ≥ 0 (positive = along
  the average shift the context causes). The supervised direction points from the grounded (non-member)
  class mean to the memorised (member) class mean, so a higher LTS_sup is more memorised-like.
* **Cross-validation.** The paper fits PC1 on a calibration subset that is also part of its CV data. Here
  the directions, the kept layers and the classifier are all fitted inside each training fold, so the
  reported AUC has no leakage (the supervised direction uses labels, which would otherwise leak).
* **Calibration data.** The bundled prompt set (``assets/crm/calibration_prompts.json``, 60 + 60) replaces
  WikiMIA: memorised-style = famous encyclopaedic facts, grounded = invented entities; labels by
  construction, a membership proxy as in the paper (appendix A) with a known topic confound.

What CRM can and cannot conclude (the paper's own caveat): it detects whether internal computation differs
systematically between member-like and non-member-like contexts; it does not certify which source a single
generation used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.detectors.registry import GROUNDED_HIGH, MEMORIZED_HIGH, Detector, DetectorInput, register
from core.engine.dual_path import DualPathSettings, generate_greedy, prepare_prompts
from core.methods.internals import displacement, instrumented_forward, logit_lens_compare, result_settings
from core.model.loading import EMBEDDED_NAME, ModelHandle, cache_dir
from core.model.prompts import resolve_template
from core.methods.repcs import GROUNDED, MEMORIZED
from core.io import asset_path

logger = logging.getLogger(__name__)

ASSETS = asset_path("crm")
CALIBRATION_PROMPTS = ASSETS / "calibration_prompts.json"
EVR_THRESHOLD = 0.01
AUDIT_K = 2.0
PC1 = "pc1"
SUPERVISED = "supervised"
DIRECTIONS: tuple[str, str] = (PC1, SUPERVISED)
CV_FOLDS = 5
CV_SEED = 42
N_BOOTSTRAP = 1000
BASIS_VERSION = 1

Progress = Callable[[int, int], None]


# ----------------------------------------------------------------------------------------------------------
# Calibration prompts


@dataclass(frozen=True)
class CalibrationPrompt:
    """One labelled calibration prompt (``label`` is ``"memorized"`` or ``"grounded"``)."""

    id: str
    label: str
    query: str
    context: str


def load_calibration_prompts(path: str | Path = CALIBRATION_PROMPTS) -> list[CalibrationPrompt]:
    """Read and validate a calibration prompt set (JSON with a ``prompts`` list).

    Raises:
        ValueError: a malformed file, an unknown label, an empty field, a duplicate id, or a single class.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"Cannot read the calibration prompts {path}: {exc}") from exc
    rows = data.get("prompts") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: expected an object with a non-empty 'prompts' list")
    out: list[CalibrationPrompt] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        try:
            prompt = CalibrationPrompt(str(row["id"]), str(row["label"]), str(row["query"]), str(row["context"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: prompt {i} lacks id/label/query/context") from exc
        if prompt.label not in (MEMORIZED, GROUNDED):
            raise ValueError(
                f"{path}: prompt {prompt.id} has label {prompt.label!r}; use {MEMORIZED!r} or {GROUNDED!r}"
            )
        if not prompt.query.strip() or not prompt.context.strip():
            raise ValueError(f"{path}: prompt {prompt.id} has an empty query or context")
        if prompt.id in seen:
            raise ValueError(f"{path}: duplicate prompt id {prompt.id}")
        seen.add(prompt.id)
        out.append(prompt)
    if len({p.label for p in out}) < 2:
        raise ValueError(f"{path}: both classes ({MEMORIZED}, {GROUNDED}) are needed")
    return out


def prompt_set_digest(prompts: Sequence[CalibrationPrompt]) -> str:
    """SHA-256 of the prompts' ids, labels and texts (ties a basis to the exact set it was computed from)."""
    payload = json.dumps([[p.id, p.label, p.query, p.context] for p in prompts], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------------------------------------
# Pure maths


def _displacements(D: np.ndarray) -> np.ndarray:
    X = np.asarray(D, dtype=np.float64)
    if X.ndim != 3:
        raise ValueError(f"displacements must be (n_prompts, n_layers + 1, hidden), got shape {X.shape}")
    if X.shape[0] < 2:
        raise ValueError(f"need at least 2 calibration displacements, got {X.shape[0]}")
    if not np.all(np.isfinite(X)):
        raise ValueError("displacements contain NaN or infinite values")
    return X


def _labels(labels: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    y = np.asarray(labels)
    if y.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {y.shape}")
    if not np.all(np.isin(y, (0, 1))):
        raise ValueError("labels must be 0/1 (1 = memorized)")
    if y.min() == y.max():
        raise ValueError("both classes (memorized = 1 and grounded = 0) are needed")
    return y.astype(np.int64)


def pc1_directions(D: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PC1 of the displacements of every layer (CRM appendix P.3), float64.

    For layer ℓ, the rows ``D[:, ℓ]`` are centred and decomposed by SVD, ``X_c = U S Vᵀ``; v_ℓ = Vᵀ[0],
    oriented so that the mean of ⟨d, v_ℓ⟩ over the calibration set is ≥ 0. Variances are λ = S²/(n − 1).

    Args:
        D: ``(n, L1, d)`` calibration displacements.

    Returns:
        ``(pc1, evr, evr_within)``: unit directions ``(L1, d)`` (zero rows for layers with no variance),
        ``evr_ℓ = λ₁,ℓ / Σ_ℓ' Σ_j λ_j,ℓ'`` (share of the total displacement variance, the layer-selection
        ratio) and ``evr_within_ℓ = λ₁,ℓ / Σ_j λ_j,ℓ`` (PCA's explained-variance ratio inside the layer).
    """
    X = _displacements(D)
    n, n_layers, dim = X.shape
    pc1 = np.zeros((n_layers, dim))
    lam1 = np.zeros(n_layers)
    total = np.zeros(n_layers)
    for layer in range(n_layers):
        x = X[:, layer]
        xc = x - x.mean(axis=0)
        _, s, vt = np.linalg.svd(xc, full_matrices=False)
        var = s**2 / (n - 1)
        total[layer] = var.sum()
        if total[layer] <= 0.0 or not np.isfinite(total[layer]):
            continue
        v = vt[0]
        mean_proj = float(x.mean(axis=0) @ v)
        if mean_proj < 0 or (mean_proj == 0 and v[np.argmax(np.abs(v))] < 0):
            v = -v
        pc1[layer] = v
        lam1[layer] = var[0]
    grand = total.sum()
    evr = lam1 / grand if grand > 0 else np.zeros(n_layers)
    evr_within = np.divide(lam1, total, out=np.zeros(n_layers), where=total > 0)
    return pc1, evr, evr_within


def supervised_directions(D: np.ndarray, labels: Sequence[int] | np.ndarray) -> np.ndarray:
    """CRM eq. 2: v_sup^(ℓ) = (E[d_ℓ | memorised] − E[d_ℓ | grounded]) / ‖·‖₂ per layer, float64.

    Args:
        D: ``(n, L1, d)`` calibration displacements.
        labels: ``(n,)`` 1 = memorised (member-style), 0 = grounded (non-member).

    Returns:
        ``(L1, d)`` unit directions (a zero row where the class means coincide).
    """
    X = _displacements(D)
    y = _labels(labels, X.shape[0])
    diff = X[y == 1].mean(axis=0) - X[y == 0].mean(axis=0)
    norms = np.linalg.norm(diff, axis=-1, keepdims=True)
    return np.divide(diff, norms, out=np.zeros_like(diff), where=norms > 0)


def project(d: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ (CRM eq. 1) for displacements of shape ``(..., L1, d)``; returns ``(..., L1)``."""
    x = np.asarray(d, dtype=np.float64)
    v = np.asarray(directions, dtype=np.float64)
    if v.ndim != 2 or x.shape[-2:] != v.shape:
        raise ValueError(f"displacement {x.shape} does not end in the directions' shape {v.shape}")
    return np.einsum("...ld,ld->...l", x, v)


def select_layers(evr: np.ndarray, threshold: float = EVR_THRESHOLD) -> list[int]:
    """The target layers: those whose variance ratio exceeds ``threshold`` (CRM: 0.01)."""
    r = np.asarray(evr, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"evr must be 1-D, got shape {r.shape}")
    return [int(i) for i in np.nonzero(r > threshold)[0]]


def audit_flags(
    lts: np.ndarray, mu: np.ndarray, sigma: np.ndarray, layers: Sequence[int] | None = None, k: float = AUDIT_K
) -> list[int]:
    """CRM appendix V.1's audit rule: layers ℓ (among ``layers``) with |LTS_ℓ − μ_ℓ| > k σ_ℓ (σ_ℓ > 0)."""
    x, m, s = (np.asarray(a, dtype=np.float64) for a in (lts, mu, sigma))
    if not (x.shape == m.shape == s.shape) or x.ndim != 1:
        raise ValueError(f"lts, mu and sigma must be 1-D of one shape, got {x.shape}, {m.shape}, {s.shape}")
    idx = range(x.size) if layers is None else layers
    return [int(i) for i in idx if s[i] > 0 and abs(x[i] - m[i]) > k * s[i]]


def anomaly_score(lts: np.ndarray, mu: np.ndarray, sigma: np.ndarray, layers: Sequence[int]) -> float:
    """CRM appendix V.1: mean over ``layers`` (with σ > 0) of |LTS_ℓ − μ_ℓ| / σ_ℓ (0 for no layer)."""
    x, m, s = (np.asarray(a, dtype=np.float64) for a in (lts, mu, sigma))
    use = [i for i in layers if s[i] > 0]
    if not use:
        return 0.0
    return float(np.mean(np.abs(x[use] - m[use]) / s[use]))


def back_projection(unembed: np.ndarray | torch.Tensor, directions: np.ndarray, k: int = 10) -> dict[str, np.ndarray]:
    """Vocabulary back-projection of directions through the unembedding (CRM appendix U.2).

    ``scores_ℓ = W_U v_ℓ`` over the vocabulary; since the sign of PC1 is arbitrary both ends are returned.

    Args:
        unembed: ``W_U`` of shape ``(V, d)``.
        directions: ``(L1, d)``.
        k: tokens per end.

    Returns:
        ``top_ids``/``bottom_ids`` ``(L1, k)`` int64 (highest / lowest score first) and ``top_scores``/
        ``bottom_scores`` ``(L1, k)`` float32.
    """
    w = torch.as_tensor(unembed).detach().float()
    v = torch.as_tensor(np.asarray(directions, dtype=np.float32))
    if w.ndim != 2 or v.ndim != 2 or w.shape[1] != v.shape[1]:
        raise ValueError(f"unembedding {tuple(w.shape)} and directions {tuple(v.shape)} do not share the hidden size")
    if not 1 <= k <= w.shape[0]:
        raise ValueError(f"k must be in [1, {w.shape[0]}], got {k}")
    with torch.inference_mode():
        scores = v.to(w.device) @ w.T  # (L1, V)
        top = torch.topk(scores, k, dim=-1)
        bottom = torch.topk(-scores, k, dim=-1)
    return {
        "top_ids": top.indices.cpu().numpy().astype(np.int64),
        "top_scores": top.values.cpu().numpy().astype(np.float32),
        "bottom_ids": bottom.indices.cpu().numpy().astype(np.int64),
        "bottom_scores": (-bottom.values).cpu().numpy().astype(np.float32),
    }


# ----------------------------------------------------------------------------------------------------------
# The classifier


def _fold_features(
    X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray, threshold: float
) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """LTS features of one CV fold, every direction and layer set fitted on the training part only."""
    pc1, evr, _ = pc1_directions(X_train)
    kept = select_layers(evr, threshold) or [int(np.argmax(evr))]
    varying = [i for i in range(X_train.shape[1]) if np.any(X_train[:, i] != X_train[0, i])]
    out = {}
    for kind, directions in ((PC1, pc1), (SUPERVISED, supervised_directions(X_train, y_train))):
        train, test = project(X_train, directions), project(X_test, directions)
        out[kind] = (train[:, kept], test[:, kept], len(kept))
        out[f"{kind}_all_layers"] = (train[:, varying], test[:, varying], len(varying))
    return out


def _logistic() -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))


def crm_classifier(
    D: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    baselines: dict[str, np.ndarray] | None = None,
    folds: int = CV_FOLDS,
    seed: int = CV_SEED,
    n_boot: int = N_BOOTSTRAP,
    threshold: float = EVR_THRESHOLD,
) -> dict[str, Any]:
    """CRM-LR on the per-layer LTS features with stratified k-fold CV and a bootstrap CI of the AUC.

    In every fold the PC1 and supervised directions, the kept layers (variance ratio > ``threshold``) and
    a StandardScaler + logistic regression are fitted on the training part only; the held-out part is
    scored. The out-of-fold probabilities of all prompts give one ROC-AUC (positive class = memorised) and
    a percentile bootstrap 95 % CI (``n_boot`` resamples, ``seed``).

    Args:
        D: ``(n, L1, d)`` calibration displacements at the last prompt token.
        labels: ``(n,)`` 1 = memorised, 0 = grounded.
        baselines: extra per-layer feature matrices ``(n, L1)`` scored the same way on all layers (e.g. the
            L2-norm and logit-lens-KL baselines of CRM appendices E and F).

    Feature sets: ``pc1`` and ``supervised`` over the kept layers (the paper's main CRM-LR, Table 1),
    ``pc1_all_layers`` and ``supervised_all_layers`` over every layer that varies (the all-layer protocol of
    its Tables 6, 24 and 25), and each baseline.

    Returns:
        JSON-ready: ``n``, class counts, ``folds``, ``seed``, ``bootstrap``, ``protocol`` and
        ``feature_sets`` mapping each feature set to ``auc``, ``ci95``, ``fold_auc_mean``,
        ``fold_auc_std`` and ``n_features`` (mean over folds).
    """
    from sklearn.model_selection import StratifiedKFold

    from core.maths.metrics import auc, auc_bootstrap_ci

    X = _displacements(D)
    y = _labels(labels, X.shape[0])
    counts = np.bincount(y, minlength=2)
    if counts.min() < folds:
        raise ValueError(f"each class needs at least {folds} prompts for {folds}-fold CV, got {counts.tolist()}")
    extra = {name: np.asarray(m, dtype=np.float64) for name, m in (baselines or {}).items()}
    for name, m in extra.items():
        if m.shape != X.shape[:2]:
            raise ValueError(f"baseline {name!r} must have shape {X.shape[:2]}, got {m.shape}")
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    kinds = [PC1, SUPERVISED, f"{PC1}_all_layers", f"{SUPERVISED}_all_layers", *extra]
    oof = {k: np.zeros(X.shape[0]) for k in kinds}
    fold_aucs: dict[str, list[float]] = {k: [] for k in kinds}
    n_features: dict[str, list[int]] = {k: [] for k in kinds}
    for train, test in splitter.split(np.zeros(len(y)), y):
        lts_features = _fold_features(X[train], y[train], X[test], threshold)
        for kind in kinds:
            if kind in lts_features:
                f_train, f_test, n_feat = lts_features[kind]
            else:
                f_train, f_test, n_feat = extra[kind][train], extra[kind][test], extra[kind].shape[1]
            model = _logistic().fit(f_train, y[train])
            p = model.predict_proba(f_test)[:, 1]
            oof[kind][test] = p
            fold_aucs[kind].append(auc(y[test], p))
            n_features[kind].append(n_feat)
    report: dict[str, Any] = {}
    for kind in kinds:
        low, high = auc_bootstrap_ci(y, oof[kind], n_boot=n_boot, seed=seed)
        report[kind] = {
            "auc": round(auc(y, oof[kind]), 6),
            "ci95": [round(low, 6), round(high, 6)],
            "fold_auc_mean": round(float(np.mean(fold_aucs[kind])), 6),
            "fold_auc_std": round(float(np.std(fold_aucs[kind])), 6),
            "n_features": round(float(np.mean(n_features[kind])), 2),
        }
    return {
        "n": int(y.size),
        "n_memorized": int(counts[1]),
        "n_grounded": int(counts[0]),
        "positive_class": MEMORIZED,
        "folds": folds,
        "seed": seed,
        "bootstrap": n_boot,
        "protocol": (
            f"StandardScaler + logistic regression, stratified {folds}-fold CV (shuffle, seed {seed}); "
            "PC1/supervised directions and kept layers refitted inside every training fold; AUC of the pooled "
            f"out-of-fold probabilities with a percentile bootstrap 95% CI ({n_boot} resamples)."
        ),
        "feature_sets": report,
    }


# ----------------------------------------------------------------------------------------------------------
# The basis


@dataclass
class CrmBasis:
    """CRM level-3 calibration of one model and prompt template.

    ``L1 = n_layers + 1`` rows (0 = embeddings, ℓ + 1 = decoder layer ℓ), hidden size ``d``, ``n``
    calibration prompts.

    Attributes:
        model: the model's display name; ``template``: the resolved template key it was computed with.
        pc1, sup: ``(L1, d)`` unit PC1 and supervised directions (zero rows where undefined).
        evr: ``(L1,)`` PC1 variance as a share of the total displacement variance (layer selection);
            ``evr_within``: PC1's explained-variance ratio within the layer.
        mu, sigma: per direction (``"pc1"``, ``"supervised"``), ``(L1,)`` calibration mean and standard
            deviation (ddof = 1) of LTS.
        kept_layers: rows with ``evr > evr_threshold``.
        calib_labels: ``(n,)`` 1 = memorised; ``calib_lts``: per direction ``(n, L1)``; ``calib_l2``,
            ``calib_lens_kl``: ``(n, L1)`` baselines.
        lr_coef, lr_mean, lr_scale: ``(L1,)`` the logistic regression on the kept PC1 LTS features fitted on
            all calibration prompts (zeros / ones outside the kept layers), ``lr_intercept``.
        classifier: the cross-validated report of :func:`crm_classifier`.
        meta: provenance (prompt-set digest, counts, version …).
    """

    model: str
    template: str
    pc1: np.ndarray
    sup: np.ndarray
    evr: np.ndarray
    evr_within: np.ndarray
    mu: dict[str, np.ndarray]
    sigma: dict[str, np.ndarray]
    kept_layers: list[int]
    calib_labels: np.ndarray
    calib_lts: dict[str, np.ndarray]
    calib_l2: np.ndarray
    calib_lens_kl: np.ndarray
    lr_coef: np.ndarray
    lr_mean: np.ndarray
    lr_scale: np.ndarray
    lr_intercept: float
    classifier: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    evr_threshold: float = EVR_THRESHOLD

    @property
    def n_rows(self) -> int:
        """``L1 = n_layers + 1``."""
        return int(self.pc1.shape[0])

    def direction(self, direction: str = PC1) -> np.ndarray:
        """The ``(L1, d)`` unit directions named ``"pc1"`` or ``"supervised"``."""
        if direction == PC1:
            return self.pc1
        if direction == SUPERVISED:
            return self.sup
        raise ValueError(f"direction must be {PC1!r} or {SUPERVISED!r}, got {direction!r}")

    def lts(self, d: np.ndarray, direction: str = PC1) -> np.ndarray:
        """LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ (eq. 1, or eq. 2's direction) for ``d`` of shape ``(..., L1, d)`` → ``(..., L1)``."""
        return project(d, self.direction(direction))

    @property
    def audited_layers(self) -> list[int]:
        """Rows the audit rule looks at: every layer whose calibration LTS varies (σ > 0 for PC1). The
        paper's audit server scores the whole trajectory (48 scalars for a 48-layer model, appendix V.2)."""
        return [int(i) for i in np.nonzero(self.sigma[PC1] > 0)[0]]

    def flagged(self, lts: np.ndarray, direction: str = PC1) -> list[int]:
        """Layers outside the calibration band: |LTS_ℓ − μ_ℓ| > 2σ_ℓ (CRM appendix V.1), over all layers."""
        self.direction(direction)
        return audit_flags(lts, self.mu[direction], self.sigma[direction], self.audited_layers)

    def anomaly_score(self, lts: np.ndarray, direction: str = PC1) -> float:
        """Mean over all layers (σ_ℓ > 0) of |LTS_ℓ − μ_ℓ| / σ_ℓ (CRM appendix V.1)."""
        self.direction(direction)
        return anomaly_score(lts, self.mu[direction], self.sigma[direction], self.audited_layers)

    def zscores(self, lts: np.ndarray, direction: str = PC1) -> np.ndarray:
        """(LTS_ℓ − μ_ℓ) / σ_ℓ per row (0 where σ_ℓ = 0)."""
        self.direction(direction)
        x = np.asarray(lts, dtype=np.float64)
        s = self.sigma[direction].astype(np.float64)
        return np.divide(x - self.mu[direction], s, out=np.zeros_like(x), where=s > 0)

    def lr_probability(self, lts_pc1: np.ndarray) -> float:
        """P(memorised | PC1 LTS features) from the logistic regression fitted on all calibration prompts."""
        x = np.asarray(lts_pc1, dtype=np.float64)
        if x.shape != (self.n_rows,):
            raise ValueError(f"lts must have shape ({self.n_rows},), got {x.shape}")
        z = self.lr_intercept + float(np.sum(self.lr_coef * (x - self.lr_mean) / self.lr_scale))
        return float(1.0 / (1.0 + np.exp(-z)))

    def class_means(self, direction: str = PC1) -> tuple[np.ndarray, np.ndarray]:
        """Calibration mean LTS per layer of the memorised and of the grounded prompts."""
        lts = self.calib_lts[direction]
        y = self.calib_labels
        return lts[y == 1].mean(axis=0), lts[y == 0].mean(axis=0)

    def trajectory(self, d: np.ndarray) -> dict[str, Any]:
        """JSON-ready CRM view of one displacement ``(L1, d)``: LTS along both directions, flags, scores."""
        out: dict[str, Any] = {"kept_layers": list(self.kept_layers)}
        for name in DIRECTIONS:
            lts = self.lts(d, name)
            out[name] = {
                "lts": np.round(lts, 6).tolist(),
                "flagged_layers": self.flagged(lts, name),
                "anomaly_score": round(self.anomaly_score(lts, name), 6),
                "mu": np.round(self.mu[name], 6).tolist(),
                "sigma": np.round(self.sigma[name], 6).tolist(),
            }
        out["lr_probability_memorized"] = round(self.lr_probability(self.lts(d, PC1)), 6)
        out["crm_lts_score"] = round(supervised_score(self, self.lts(d, SUPERVISED)), 6)
        return out

    def describe(self) -> dict[str, Any]:
        """JSON-ready facts of the basis (no per-prompt arrays)."""
        return {
            "model": self.model,
            "template": self.template,
            "layers": self.n_rows - 1,
            "hidden_size": int(self.pc1.shape[1]),
            "evr_threshold": self.evr_threshold,
            "kept_layers": list(self.kept_layers),
            "evr": np.round(self.evr, 6).tolist(),
            "evr_within": np.round(self.evr_within, 6).tolist(),
            "classifier": self.classifier,
            "meta": self.meta,
        }

    # -- storage ------------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the basis as a float32 NPZ (``allow_pickle=False``-safe; metadata as a JSON string)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        f32 = np.float32
        meta = {
            "model": self.model,
            "template": self.template,
            "kept_layers": list(self.kept_layers),
            "lr_intercept": float(self.lr_intercept),
            "classifier": self.classifier,
            "meta": self.meta,
            "evr_threshold": self.evr_threshold,
            "version": BASIS_VERSION,
        }
        arrays = {
            "pc1": self.pc1.astype(f32),
            "sup": self.sup.astype(f32),
            "evr": self.evr.astype(f32),
            "evr_within": self.evr_within.astype(f32),
            "calib_labels": self.calib_labels.astype(np.int8),
            "calib_l2": self.calib_l2.astype(f32),
            "calib_lens_kl": self.calib_lens_kl.astype(f32),
            "lr_coef": self.lr_coef.astype(f32),
            "lr_mean": self.lr_mean.astype(f32),
            "lr_scale": self.lr_scale.astype(f32),
            "meta_json": np.array(json.dumps(meta, ensure_ascii=False)),
        }
        for name in DIRECTIONS:
            arrays[f"mu_{name}"] = self.mu[name].astype(f32)
            arrays[f"sigma_{name}"] = self.sigma[name].astype(f32)
            arrays[f"calib_lts_{name}"] = self.calib_lts[name].astype(f32)
        tmp = path.with_name(f".{path.name}.tmp.npz")
        np.savez_compressed(tmp, **arrays)
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> CrmBasis:
        """Read a basis written by :meth:`save` (``allow_pickle=False``)."""
        with np.load(Path(path), allow_pickle=False) as z:
            meta = json.loads(str(z["meta_json"]))
            if int(meta.get("version", 0)) != BASIS_VERSION:
                raise ValueError(f"{path}: basis format version {meta.get('version')} (expected {BASIS_VERSION})")
            a = {k: z[k] for k in z.files if k != "meta_json"}
        return cls(
            model=meta["model"],
            template=meta["template"],
            pc1=a["pc1"],
            sup=a["sup"],
            evr=a["evr"],
            evr_within=a["evr_within"],
            mu={n: a[f"mu_{n}"] for n in DIRECTIONS},
            sigma={n: a[f"sigma_{n}"] for n in DIRECTIONS},
            kept_layers=[int(i) for i in meta["kept_layers"]],
            calib_labels=a["calib_labels"].astype(np.int64),
            calib_lts={n: a[f"calib_lts_{n}"] for n in DIRECTIONS},
            calib_l2=a["calib_l2"],
            calib_lens_kl=a["calib_lens_kl"],
            lr_coef=a["lr_coef"],
            lr_mean=a["lr_mean"],
            lr_scale=a["lr_scale"],
            lr_intercept=float(meta["lr_intercept"]),
            classifier=meta.get("classifier", {}),
            meta=meta.get("meta", {}),
            evr_threshold=float(meta.get("evr_threshold", EVR_THRESHOLD)),
        )


def crm_report(basis: CrmBasis | None, disp: np.ndarray, reason: str = "") -> dict[str, Any]:
    """The JSON-ready CRM block of one analysis (``extras.crm`` of ``python -m core probe --json``).

    Args:
        basis: the model's basis, or ``None`` (then ``{"available": false, "reason": …}``).
        disp: ``(L1, P, d)`` displacements at the answer positions; position 0 is the last prompt token.

    Returns:
        LTS along PC1 and the supervised direction at the last prompt token with flagged layers, μ/σ,
        anomaly scores, kept layers and variance ratios, the CRM-LR probability and ``crm_lts`` score, LTS
        at every answer position (``per_answer_position``, lists ``P × L1``) and the classifier report.
    """
    if basis is None:
        return {"available": False, "reason": reason or "no CRM basis for this model and template"}
    d = np.asarray(disp, dtype=np.float64)
    if d.ndim != 3 or d.shape[0] != basis.n_rows or d.shape[2] != basis.pc1.shape[1]:
        raise ValueError(f"displacements must be ({basis.n_rows}, P, {basis.pc1.shape[1]}), got shape {d.shape}")
    return {
        "available": True,
        "position": "last prompt token",
        "template": basis.template,
        "evr_threshold": basis.evr_threshold,
        "evr": np.round(basis.evr, 6).tolist(),
        **basis.trajectory(d[:, 0]),
        "per_answer_position": {
            f"lts_{name}": np.round(basis.lts(d.transpose(1, 0, 2), name), 6).tolist() for name in DIRECTIONS
        },
        "classifier": basis.classifier,
        "calibration": {k: basis.meta.get(k) for k in ("prompt_set", "prompt_set_sha256", "n_memorized", "n_grounded")},
    }


def supervised_score(basis: CrmBasis, lts_sup: np.ndarray) -> float:
    """The ``crm_lts`` detector's scalar: mean over all layers (σ_ℓ > 0) of (LTS_sup,ℓ − μ_ℓ)/σ_ℓ.

    LTS along the supervised direction (eq. 2), standardised by the calibration statistics so that every
    layer counts equally (raw LTS grows with depth as the residual stream does). All layers, as in the
    paper's supervised-vs-PC1 comparison (Table 6). The direction points from the grounded to the memorised
    class mean, so a higher score is more memorised-like.
    """
    z = basis.zscores(lts_sup, SUPERVISED)
    use = [i for i in range(z.size) if basis.sigma[SUPERVISED][i] > 0]
    return float(np.mean(z[use])) if use else 0.0


def fit_basis(
    D: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    lens_kl: np.ndarray | None = None,
    model: str = "",
    template: str = "",
    meta: dict[str, Any] | None = None,
    threshold: float = EVR_THRESHOLD,
    classifier: bool = True,
) -> CrmBasis:
    """Fit a :class:`CrmBasis` from calibration displacements ``(n, L1, d)`` and 0/1 labels (pure)."""
    X = _displacements(D)
    y = _labels(labels, X.shape[0])
    pc1, evr, evr_within = pc1_directions(X)
    sup = supervised_directions(X, y)
    kept = select_layers(evr, threshold)
    lts = {PC1: project(X, pc1), SUPERVISED: project(X, sup)}
    mu = {k: v.mean(axis=0) for k, v in lts.items()}
    sigma = {k: v.std(axis=0, ddof=1) for k, v in lts.items()}
    l2 = np.linalg.norm(X, axis=-1)
    lens = np.zeros_like(l2) if lens_kl is None else np.asarray(lens_kl, dtype=np.float64)
    n_rows = X.shape[1]
    coef, mean, scale, intercept = np.zeros(n_rows), np.zeros(n_rows), np.ones(n_rows), 0.0
    if kept:
        model_lr = _logistic().fit(lts[PC1][:, kept], y)
        scaler, lr = model_lr.named_steps["standardscaler"], model_lr.named_steps["logisticregression"]
        coef[kept] = lr.coef_[0]
        mean[kept] = scaler.mean_
        scale[kept] = scaler.scale_
        intercept = float(lr.intercept_[0])
    report: dict[str, Any] = {}
    if classifier:
        report = crm_classifier(X, y, baselines={"l2_norm": l2, "logit_lens_kl": lens}, threshold=threshold)
    return CrmBasis(
        model=model,
        template=template,
        pc1=pc1.astype(np.float32),
        sup=sup.astype(np.float32),
        evr=evr.astype(np.float32),
        evr_within=evr_within.astype(np.float32),
        mu={k: v.astype(np.float32) for k, v in mu.items()},
        sigma={k: v.astype(np.float32) for k, v in sigma.items()},
        kept_layers=kept,
        calib_labels=y,
        calib_lts={k: v.astype(np.float32) for k, v in lts.items()},
        calib_l2=l2.astype(np.float32),
        calib_lens_kl=lens.astype(np.float32),
        lr_coef=coef.astype(np.float32),
        lr_mean=mean.astype(np.float32),
        lr_scale=scale.astype(np.float32),
        lr_intercept=intercept,
        classifier=report,
        meta=dict(meta or {}),
        evr_threshold=threshold,
    )


# ----------------------------------------------------------------------------------------------------------
# Per-model storage


def _model_slug(handle: ModelHandle) -> str:
    info = handle.info
    digest = hashlib.sha1(
        f"{info.name}|{info.source}|{info.n_layers}|{info.hidden_size}|{info.vocab_size}".encode()
    ).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", info.name).strip("-")[:60] or "model"
    return f"{name}-{digest}"


def _template_key(handle: ModelHandle, template: str) -> str:
    return resolve_template(template, handle.tokenizer).key


def bundled_basis_path(template_key: str) -> Path:
    """Where the embedded model's precomputed basis for a template lives in ``assets/crm/``."""
    return ASSETS / f"embedded-{template_key}.npz"


def cache_basis_path(handle: ModelHandle, template: str = "auto") -> Path:
    """The per-model disk cache of a computed basis: ``<cache_dir>/crm/<model>/<template>.npz``."""
    return cache_dir() / "crm" / _model_slug(handle) / f"{_template_key(handle, template)}.npz"


_LOADED: dict[tuple[str, float], CrmBasis] = {}
_LOADED_LOCK = threading.Lock()


def _read_cached(path: Path) -> CrmBasis:
    key = (str(path), path.stat().st_mtime)
    with _LOADED_LOCK:
        if key not in _LOADED:
            _LOADED[key] = CrmBasis.load(path)
        return _LOADED[key]


def _usable(basis: CrmBasis, handle: ModelHandle, template_key: str, digest: str | None) -> str | None:
    """Why a stored basis cannot be used for this handle and template (``None`` if it can)."""
    if basis.model != handle.info.name:
        return f"computed for {basis.model!r}"
    if basis.pc1.shape != (handle.info.n_layers + 1, handle.info.hidden_size):
        return f"shape {basis.pc1.shape} does not fit the model"
    if basis.template != template_key:
        return f"computed with template {basis.template!r}"
    if digest is not None and basis.meta.get("prompt_set_sha256") != digest:
        return "computed from another version of the calibration prompts"
    return None


_DIGESTS: dict[tuple[str, float], str | None] = {}


def _bundled_digest() -> str | None:
    """The digest of the bundled calibration prompts (cached per file modification time)."""
    try:
        key = (str(CALIBRATION_PROMPTS), CALIBRATION_PROMPTS.stat().st_mtime)
    except OSError:
        return None
    with _LOADED_LOCK:
        if key not in _DIGESTS:
            try:
                _DIGESTS[key] = prompt_set_digest(load_calibration_prompts())
            except ValueError:
                _DIGESTS[key] = None
        return _DIGESTS[key]


def load_basis(handle: ModelHandle, template: str = "auto") -> CrmBasis | None:
    """The CRM basis of this model and template, or ``None`` when none has been computed.

    Looks at the bundled NPZ for the embedded model (``assets/crm/embedded-<template>.npz``), then at the
    per-model disk cache under ``core.models.cache_dir()/crm/``. A stored basis made for another model,
    template or version of the bundled calibration prompts is ignored (with a log message).
    """
    key = _template_key(handle, template)
    digest = _bundled_digest()
    paths = [cache_basis_path(handle, key)]
    if handle.info.name == EMBEDDED_NAME:
        paths.insert(0, bundled_basis_path(key))
    for path in paths:
        if not path.is_file():
            continue
        try:
            basis = _read_cached(path)
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("Ignoring unreadable CRM basis %s: %s", path, exc)
            continue
        reason = _usable(basis, handle, key, digest)
        if reason is None:
            return basis
        logger.info("Ignoring CRM basis %s: %s", path, reason)
    return None


def calibration_displacements(
    handle: ModelHandle,
    prompts: Sequence[CalibrationPrompt],
    *,
    template: str = "auto",
    progress: Progress | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Displacements at the last prompt token and logit-lens KL per layer for every calibration prompt.

    Two forward passes per prompt (retrieval and parametric prompt, no generation: CRM level 3 only needs
    the prompts).

    Returns:
        ``(D, lens_kl)``: ``(n, L1, d)`` float32 and ``(n, L1)`` float32 (nats).
    """
    settings = DualPathSettings(max_new_tokens=1, score_window=1, template=template)
    n_rows = handle.info.n_layers + 1
    D = np.zeros((len(prompts), n_rows, handle.info.hidden_size), np.float32)
    kl = np.zeros((len(prompts), n_rows), np.float32)
    for i, prompt in enumerate(prompts):
        prepared = prepare_prompts(handle, prompt.query, prompt.context, settings)
        with handle.lock:
            rag = instrumented_forward(handle, prepared.retrieval.ids).states
            para = instrumented_forward(handle, prepared.parametric.ids).states
            kl[i] = logit_lens_compare(handle, rag, para, top_k=1).kl[:, 0]
        D[i] = (rag[:, 0].astype(np.float64) - para[:, 0].astype(np.float64)).astype(np.float32)
        if progress is not None:
            progress(i + 1, len(prompts))
    return D, kl


def compute_basis(
    handle: ModelHandle,
    progress: Progress | None = None,
    *,
    template: str = "auto",
    prompts_path: str | Path = CALIBRATION_PROMPTS,
    save: bool = True,
) -> CrmBasis:
    """Compute the CRM basis of a model from the bundled calibration prompts and cache it on disk.

    Two forward passes per prompt (``progress(done, total)`` after each prompt), then the directions, the
    calibration statistics and the cross-validated classifier (a few seconds).

    Args:
        template: the prompt template (``"auto"`` resolves as the engine does); a basis is per template.
        save: write it to :func:`cache_basis_path` (the app and the CLI find it there next time).
    """
    prompts = load_calibration_prompts(prompts_path)
    key = _template_key(handle, template)
    D, lens_kl = calibration_displacements(handle, prompts, template=key, progress=progress)
    labels = np.array([1 if p.label == MEMORIZED else 0 for p in prompts])
    meta = {
        "prompt_set": Path(prompts_path).name,
        "prompt_set_sha256": prompt_set_digest(prompts),
        "n_prompts": len(prompts),
        "n_memorized": int(labels.sum()),
        "n_grounded": int((1 - labels).sum()),
        "model_source": handle.info.source,
        "position": "last prompt token",
        "layer_index": "0 = embeddings, l + 1 = output of decoder layer l (before the final norm)",
        "evr_definition": "lambda_1 of the layer / total displacement variance over all layers",
    }
    basis = fit_basis(D, labels, lens_kl=lens_kl, model=handle.info.name, template=key, meta=meta)
    if save:
        path = basis.save(cache_basis_path(handle, key))
        logger.info("Saved the CRM basis to %s", path)
    return basis


def vocabulary_projection(handle: ModelHandle, directions: np.ndarray, k: int = 10) -> dict[str, Any]:
    """:func:`back_projection` through this model's unembedding, with the tokens decoded.

    Returns:
        The arrays of :func:`back_projection` plus ``top_tokens``/``bottom_tokens`` (lists ``L1 × k``).
    """
    w = handle.model.get_output_embeddings().weight
    with handle.lock, torch.inference_mode():
        out: dict[str, Any] = back_projection(w, directions, k)
    for end in ("top", "bottom"):
        ids = out[f"{end}_ids"]
        out[f"{end}_tokens"] = [handle.decode_tokens(row) for row in ids.tolist()]
    return out


def semantic_delta(answer_without: str, answer_with: str) -> float:
    """CRM eq. 3: Δ_seq = 1 − cos(enc(y_0), enc(y_c)) with the offline sentence embedder (in [0, 2])."""
    from core.model.embedder import cosine

    return 1.0 - cosine(answer_without, answer_with)
