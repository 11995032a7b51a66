"""The CRM basis of one model and template: directions, calibration statistics, the classifier, on disk as NPZ.

A :class:`CrmBasis` is fitted from calibration displacements (:func:`fit_basis`, pure) and stored as a
float32 NPZ with its metadata as a JSON string, so it loads with ``allow_pickle=False``.

**Sign of PC1** is arbitrary; it is fixed so that the calibration mean of LTS_ℓ is ≥ 0 (positive = along the
average shift the context causes). The supervised direction points from the grounded (non-member) class mean
to the memorized (member) class mean, so a higher LTS_sup is more memorized-like.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.io import atomic_write_npz
from core.methods.crm.classifier import checked_inputs, crm_classifier, logistic_pipeline
from core.methods.crm.maths import (
    DEFAULT_LAYER_RULE,
    DIRECTIONS,
    EVR_THRESHOLD,
    LAYER_RULES,
    PC1,
    SHARE_OF_TOTAL,
    SUPERVISED,
    anomaly_score,
    audit_flags,
    pc1_directions,
    project,
    select_layers_by_rule,
    selection_ratio,
    supervised_directions,
    zscores,
)

BASIS_VERSION = 1


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
        kept_layers: rows whose ratio under ``layer_rule`` exceeds ``evr_threshold`` (the paper's rule,
            ``"within_layer"``: ``evr_within > 0.01``; the named option ``"share_of_total"``: ``evr > 0.01``).
        calib_labels: ``(n,)`` 1 = memorized; ``calib_lts``: per direction ``(n, L1)``; ``calib_l2``,
            ``calib_lens_kl``: ``(n, L1)`` baselines.
        lr_coef, lr_mean, lr_scale: ``(L1,)`` the logistic regression on the kept PC1 LTS features fitted on
            all calibration prompts (zeros / ones outside the kept layers), ``lr_intercept``.
        classifier: the cross-validated report of :func:`core.methods.crm.classifier.crm_classifier`.
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
    layer_rule: str = DEFAULT_LAYER_RULE

    @property
    def selection_ratio(self) -> np.ndarray:
        """``(L1,)`` the ratio ``layer_rule`` compares with ``evr_threshold`` (``evr_within`` or ``evr``)."""
        return selection_ratio(self.layer_rule, self.evr, self.evr_within)

    def layers_by_rule(self) -> dict[str, list[int]]:
        """The rows each layer-selection rule keeps (:data:`~core.methods.crm.maths.LAYER_RULES`)."""
        return {r: select_layers_by_rule(r, self.evr, self.evr_within, self.evr_threshold) for r in LAYER_RULES}

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
        return zscores(lts, self.mu[direction], self.sigma[direction])

    def lr_probability(self, lts_pc1: np.ndarray) -> float:
        """P(memorized | PC1 LTS features ``(L1,)``) from the logistic regression fitted on all calibration prompts."""
        x = np.asarray(lts_pc1, dtype=np.float64)
        if x.shape != (self.n_rows,):
            raise ValueError(f"lts must have shape ({self.n_rows},), got {x.shape}")
        z = self.lr_intercept + float(np.sum(self.lr_coef * (x - self.lr_mean) / self.lr_scale))
        return float(1.0 / (1.0 + np.exp(-z)))

    def class_means(self, direction: str = PC1) -> tuple[np.ndarray, np.ndarray]:
        """Calibration mean LTS per layer ``(L1,)`` of the memorized and of the grounded prompts."""
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
            "layer_rule": self.layer_rule,
            "kept_layers": list(self.kept_layers),
            "kept_layers_by_rule": self.layers_by_rule(),
            "evr": np.round(self.evr, 6).tolist(),
            "evr_within": np.round(self.evr_within, 6).tolist(),
            "classifier": self.classifier,
            "meta": self.meta,
        }

    # -- storage ------------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the basis as a float32 NPZ (``allow_pickle=False``-safe; metadata as a JSON string), atomically."""
        f32 = np.float32
        meta = {
            "model": self.model,
            "template": self.template,
            "kept_layers": list(self.kept_layers),
            "lr_intercept": float(self.lr_intercept),
            "classifier": self.classifier,
            "meta": self.meta,
            "evr_threshold": self.evr_threshold,
            "layer_rule": self.layer_rule,
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
        return atomic_write_npz(path, arrays)

    @classmethod
    def load(cls, path: str | Path) -> CrmBasis:
        """Read a basis written by :meth:`save` (``allow_pickle=False``).

        Raises:
            ValueError: another basis format version.
        """
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
            # files written before the rule was stored used the share-of-total ratio
            layer_rule=str(meta.get("layer_rule", SHARE_OF_TOTAL)),
        )


def supervised_score(basis: CrmBasis, lts_sup: np.ndarray) -> float:
    """The ``crm_lts`` detector's scalar: mean over all layers (σ_ℓ > 0) of (LTS_sup,ℓ − μ_ℓ)/σ_ℓ.

    LTS along the supervised direction (eq. 2), standardized by the calibration statistics so that every
    layer counts equally (raw LTS grows with depth as the residual stream does). All layers, as in the
    paper's supervised-vs-PC1 comparison (Table 6). The direction points from the grounded to the memorized
    class mean, so a higher score is more memorized-like.
    """
    z = basis.zscores(lts_sup, SUPERVISED)
    use = [i for i in range(z.size) if basis.sigma[SUPERVISED][i] > 0]
    return float(np.mean(z[use])) if use else 0.0


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
        "layer_rule": basis.layer_rule,
        "evr": np.round(basis.evr, 6).tolist(),
        "evr_within": np.round(basis.evr_within, 6).tolist(),
        **basis.trajectory(d[:, 0]),
        "per_answer_position": {
            f"lts_{name}": np.round(basis.lts(d.transpose(1, 0, 2), name), 6).tolist() for name in DIRECTIONS
        },
        "classifier": basis.classifier,
        "calibration": {k: basis.meta.get(k) for k in ("prompt_set", "prompt_set_sha256", "n_memorized", "n_grounded")},
    }


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
    layer_rule: str = DEFAULT_LAYER_RULE,
) -> CrmBasis:
    """Fit a :class:`CrmBasis` from calibration displacements (pure: no model, no IO).

    Args:
        D: ``(n, L1, d)`` displacements at the last prompt token.
        labels: ``(n,)`` 1 = memorized, 0 = grounded.
        lens_kl: ``(n, L1)`` logit-lens KL per layer (the appendix-F baseline; zeros when ``None``).
        model, template, meta: provenance stored with the basis.
        threshold: the variance-ratio threshold of the kept layers.
        classifier: also run the cross-validated classifier report (a few seconds).
        layer_rule: ``"within_layer"`` (default, the paper's PCA explained-variance ratio inside each layer)
            or ``"share_of_total"`` (PC1 variance as a share of all layers' displacement variance).
    """
    X, y = checked_inputs(D, labels, layer_rule)
    pc1, evr, evr_within = pc1_directions(X)
    sup = supervised_directions(X, y)
    kept = select_layers_by_rule(layer_rule, evr, evr_within, threshold)
    lts = {PC1: project(X, pc1), SUPERVISED: project(X, sup)}
    mu = {k: v.mean(axis=0) for k, v in lts.items()}
    sigma = {k: v.std(axis=0, ddof=1) for k, v in lts.items()}
    l2 = np.linalg.norm(X, axis=-1)
    lens = np.zeros_like(l2) if lens_kl is None else np.asarray(lens_kl, dtype=np.float64)
    n_rows = X.shape[1]
    coef, mean, scale, intercept = np.zeros(n_rows), np.zeros(n_rows), np.ones(n_rows), 0.0
    if kept:
        model_lr = logistic_pipeline().fit(lts[PC1][:, kept], y)
        scaler, lr = model_lr.named_steps["standardscaler"], model_lr.named_steps["logisticregression"]
        coef[kept] = lr.coef_[0]
        mean[kept] = scaler.mean_
        scale[kept] = scaler.scale_
        intercept = float(lr.intercept_[0])
    report: dict[str, Any] = {}
    if classifier:
        report = crm_classifier(
            X, y, baselines={"l2_norm": l2, "logit_lens_kl": lens}, threshold=threshold, layer_rule=layer_rule
        )
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
        layer_rule=layer_rule,
    )
