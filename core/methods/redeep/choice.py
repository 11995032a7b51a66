"""ReDeEP's chosen copying heads and knowledge layers per model, the fitted α, β, and how they were chosen.

The authors ship hand-made lists for three 7B models and lost the script that made them (their issue #8).
Here the choice is made for any model from a calibration table (per row: the mean ECS of every head and the mean
PKS of every layer over the answer tokens, with the row's read/recalled label):

* **heads** — the ``n_heads`` heads whose mean ECS correlates most *negatively* with "recalled" (Pearson, as the
  paper selects: a copying head's ECS should be high when the answer was read), or, label-free, the heads with
  the highest OV copying score (:mod:`core.methods.redeep.ov`);
* **layers** — the ``n_layers`` layers whose mean PKS correlates most *positively* with "recalled";
* **α, β** — ``score = α·Σ_{ℓ∈F} PKS^ℓ − β·Σ_{(ℓ,h)∈A} ECS^{ℓ,h}`` (the paper's regression, eq. 7): a logistic
  regression (scikit-learn, standardized, C = 1) of the label on the two sums, its weights mapped back to raw
  units (α = w_PKS / s_PKS, β = −w_ECS / s_ECS). A higher score means more likely recalled.

The out-of-fold AUC (stratified 5-fold, seed 42) repeats the selection *inside* each fold, so it is not
flattered by choosing heads on the rows it scores. Stored as JSON (no pickles) next to the calibration table
(NPZ, ``allow_pickle=False``), so a user's own heads/layers are refit at once (:func:`refit`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.io import JsonRecord, asset_path
from core.methods.redeep.maths import pearson
from core.model import artifacts
from core.model.handle import ModelHandle
from core.model.prompts import resolve_template

CHOICE_VERSION = 1
DEFAULT_HEADS = 10
DEFAULT_LAYERS = 4
SEED = 42
N_SPLITS = 5
PEARSON, OV, USER, ALL = "pearson", "ov", "user", "all"
OVERRIDE_ENV = "READ_OR_RECALL_REDEEP_CHOICE"
"""An environment variable naming a choice JSON file that replaces the stored one for every model it fits."""


@dataclass
class CalibrationTable:
    """Per calibration row: mean ECS ``(n, L, H)``, mean PKS ``(n, L)``, label ``(n,)`` (1 = recalled)."""

    ecs: np.ndarray
    pks: np.ndarray
    labels: np.ndarray

    def __post_init__(self) -> None:
        self.ecs = np.asarray(self.ecs, dtype=np.float64)
        self.pks = np.asarray(self.pks, dtype=np.float64)
        self.labels = np.asarray(self.labels).astype(int)
        n = self.labels.shape[0]
        if self.ecs.ndim != 3 or self.pks.ndim != 2 or self.ecs.shape[0] != n or self.pks.shape[0] != n:
            raise ValueError(f"calibration table shapes {self.ecs.shape}, {self.pks.shape}, {self.labels.shape}")
        if self.ecs.shape[1] != self.pks.shape[1]:
            raise ValueError("ECS and PKS tables disagree on the number of layers")

    def save(self, path: str | Path) -> Path:
        import io

        from core.io import atomic_write_bytes

        buf = io.BytesIO()
        np.savez_compressed(buf, ecs=self.ecs.astype(np.float32), pks=self.pks.astype(np.float32), labels=self.labels)
        return atomic_write_bytes(path, buf.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> CalibrationTable:
        with np.load(path, allow_pickle=False) as z:
            return cls(z["ecs"], z["pks"], z["labels"])

    def subset(self, rows: np.ndarray) -> CalibrationTable:
        return CalibrationTable(self.ecs[rows], self.pks[rows], self.labels[rows])


@dataclass
class ReDeEPChoice(JsonRecord):
    """One model's copying heads A, knowledge layers F and the regression's α, β (see the module docstring).

    Attributes:
        heads: ``[[layer, head], …]``; ``layers``: ``[layer, …]``.
        alpha, beta, intercept: ``score = α·ΣPKS − β·ΣECS``; P(recalled) = σ(score + intercept).
        head_method, layer_method: ``"pearson"``, ``"ov"`` or ``"user"``.
        ecs_corr: ``(L, H)`` Pearson r of each head's mean ECS with "recalled"; ``pks_corr``: ``(L,)``.
        ov_scores: ``(L, H)`` OV copying scores, or ``None`` when the layout is not supported (``ov_refusal``).
        auc_oof, auc_oof_ci: out-of-fold AUC of the score (selection repeated inside each fold).
    """

    KIND = "ReDeEP choice"
    VERSION = CHOICE_VERSION

    model: str
    model_slug: str
    template: str
    k_percent: float
    heads: list[list[int]]
    layers: list[int]
    alpha: float
    beta: float
    intercept: float
    head_method: str
    layer_method: str
    n_layers: int
    n_heads: int
    ecs_corr: list[list[float]]
    pks_corr: list[float]
    n_recalled: int
    n_read: int
    auc_oof: float | None = None
    auc_oof_ci: list[float] | None = None
    ov_scores: list[list[float]] | None = None
    ov_refusal: str | None = None
    trained_on: list[dict[str, Any]] = field(default_factory=list)
    protocol: str = ""
    version: int = CHOICE_VERSION

    def __post_init__(self) -> None:
        bad = [hl for hl in self.heads if not (0 <= hl[0] < self.n_layers and 0 <= hl[1] < self.n_heads)]
        bad_layers = [x for x in self.layers if not 0 <= x < self.n_layers]
        if bad or bad_layers:
            raise ValueError(f"ReDeEP choice: heads {bad} / layers {bad_layers} out of range")
        if not self.heads and not self.layers:
            raise ValueError("ReDeEP choice: no head and no layer")

    # -- scores of one row --------------------------------------------------------------------------------

    def ecs_sum(self, ecs: np.ndarray) -> float:
        """``Σ_{(ℓ,h)∈A} ECS^{ℓ,h}`` of a row's ``(L, H)`` (or ``(…, L, H)``) mean ECS."""
        e = np.asarray(ecs, dtype=np.float64)
        if not self.heads:
            return 0.0 * e[..., 0, 0]
        return e[..., [h[0] for h in self.heads], [h[1] for h in self.heads]].sum(-1)

    def pks_sum(self, pks: np.ndarray | None) -> float:
        """``Σ_{ℓ∈F} PKS^ℓ`` of a row's ``(L,)`` mean PKS (0 without layers)."""
        if not self.layers:
            return 0.0
        if pks is None:
            raise ValueError("this choice has knowledge layers but the model gives no PKS")
        return np.asarray(pks, dtype=np.float64)[..., self.layers].sum(-1)

    def score(self, ecs: np.ndarray, pks: np.ndarray | None) -> float:
        """``α·Σ_{ℓ∈F} PKS^ℓ − β·Σ_{(ℓ,h)∈A} ECS^{ℓ,h}`` (higher = more likely recalled)."""
        return self.alpha * self.pks_sum(pks) - self.beta * self.ecs_sum(ecs)

    def describe(self) -> str:
        heads = ", ".join(f"L{layer}.H{head}" for layer, head in self.heads) or "none"
        layers = ", ".join(f"L{x}" for x in self.layers) or "none"
        return f"copying heads ({self.head_method}): {heads}; knowledge layers ({self.layer_method}): {layers}"


# -- choosing and fitting (pure: arrays in) ----------------------------------------------------------------


def rank_heads(corr: np.ndarray, n: int, *, descending: bool = False) -> list[list[int]]:
    """The ``n`` heads of an ``(L, H)`` table with the lowest values (``descending``: highest) as ``[[ℓ, h]]``."""
    values = np.asarray(corr, dtype=np.float64)
    flat = values.ravel()
    order = np.argsort(-flat if descending else flat, kind="stable")[: max(0, int(n))]
    return [[int(i // values.shape[1]), int(i % values.shape[1])] for i in order]


def rank_layers(corr: np.ndarray, n: int) -> list[int]:
    """The ``n`` layers with the highest values."""
    return [int(i) for i in np.argsort(-np.asarray(corr, dtype=np.float64), kind="stable")[: max(0, int(n))]]


def correlations(table: CalibrationTable) -> tuple[np.ndarray, np.ndarray]:
    """Pearson r with "recalled" of each head's mean ECS ``(L, H)`` and each layer's mean PKS ``(L,)``."""
    n, L, H = table.ecs.shape
    return pearson(table.ecs.reshape(n, L * H), table.labels).reshape(L, H), pearson(table.pks, table.labels)


def _sums(table: CalibrationTable, heads: list[list[int]], layers: list[int]) -> np.ndarray:
    ecs = table.ecs[:, [h[0] for h in heads], [h[1] for h in heads]].sum(-1) if heads else np.zeros(len(table.labels))
    pks = table.pks[:, layers].sum(-1) if layers else np.zeros(len(table.labels))
    return np.stack([pks, ecs], axis=1)


def fit_weights(table: CalibrationTable, heads: list[list[int]], layers: list[int]) -> tuple[float, float, float]:
    """``(α, β, intercept)`` of the logistic regression of "recalled" on ``(ΣPKS, ΣECS)`` in raw units."""
    from sklearn.linear_model import LogisticRegression

    x = _sums(table, heads, layers)
    mean, scale = x.mean(0), x.std(0)
    scale = np.where(scale > 0, scale, 1.0)
    lr = LogisticRegression(C=1.0, max_iter=5000).fit((x - mean) / scale, table.labels)
    w = lr.coef_[0] / scale
    alpha = float(w[0]) if layers else 0.0
    beta = float(-w[1]) if heads else 0.0
    return alpha, beta, float(lr.intercept_[0] - (w * mean).sum())


def _select(table: CalibrationTable, n_heads: int, n_layers: int, ov: np.ndarray | None, head_method: str):
    ecs_corr, pks_corr = correlations(table)
    if head_method == OV and ov is not None:
        heads = rank_heads(ov, n_heads, descending=True)
    else:
        heads = rank_heads(ecs_corr, n_heads)
    return heads, rank_layers(pks_corr, n_layers), ecs_corr, pks_corr


def out_of_fold_scores(
    table: CalibrationTable,
    n_heads: int,
    n_layers: int,
    *,
    ov: np.ndarray | None = None,
    head_method: str = PEARSON,
    fixed: tuple[list[list[int]], list[int]] | None = None,
) -> np.ndarray:
    """Out-of-fold scores: per fold, heads and layers chosen (unless ``fixed``) and α, β fitted on the other
    folds (stratified 5-fold, seed 42)."""
    from sklearn.model_selection import StratifiedKFold

    out = np.zeros(len(table.labels))
    folds = StratifiedKFold(n_splits=N_SPLITS, shuffle=True, random_state=SEED)
    for train, test in folds.split(np.zeros(len(table.labels)), table.labels):
        part = table.subset(train)
        heads, layers = fixed if fixed is not None else _select(part, n_heads, n_layers, ov, head_method)[:2]
        alpha, beta, _ = fit_weights(part, heads, layers)
        x = _sums(table.subset(test), heads, layers)
        out[test] = alpha * x[:, 0] - beta * x[:, 1]
    return out


def fit_choice(
    table: CalibrationTable,
    *,
    model: str,
    model_slug: str,
    template: str,
    k_percent: float,
    n_heads: int = DEFAULT_HEADS,
    n_layers: int = DEFAULT_LAYERS,
    head_method: str = PEARSON,
    ov: np.ndarray | None = None,
    ov_refusal: str | None = None,
    heads: list[list[int]] | None = None,
    layers: list[int] | None = None,
    trained_on: list[dict[str, Any]] | None = None,
    n_boot: int = 1000,
) -> ReDeEPChoice:
    """Choose heads and layers on ``table`` (or take the user's ``heads`` / ``layers``), fit α, β, and measure
    the out-of-fold AUC.

    Raises:
        ValueError: fewer than 5 rows of a label, an unknown method, or the OV method without OV scores.
    """
    from core.maths.metrics import auc, auc_bootstrap_ci

    if head_method not in (PEARSON, OV, USER):
        raise ValueError(f"head_method must be {PEARSON!r}, {OV!r} or {USER!r}")
    if head_method == OV and ov is None:
        raise ValueError(f"no OV copying scores: {ov_refusal or 'not computed'}")
    if min(int((table.labels == 0).sum()), int((table.labels == 1).sum())) < N_SPLITS:
        raise ValueError(f"need at least {N_SPLITS} calibration rows of each label")
    chosen_heads, chosen_layers, ecs_corr, pks_corr = _select(table, n_heads, n_layers, ov, head_method)
    user = heads is not None or layers is not None
    chosen_heads = [list(map(int, h)) for h in heads] if heads is not None else chosen_heads
    chosen_layers = [int(x) for x in layers] if layers is not None else chosen_layers
    alpha, beta, intercept = fit_weights(table, chosen_heads, chosen_layers)
    fixed = (chosen_heads, chosen_layers) if user else None
    oof = out_of_fold_scores(table, n_heads, n_layers, ov=ov, head_method=head_method, fixed=fixed)
    low, high = auc_bootstrap_ci(table.labels, oof, n_boot=n_boot, seed=SEED)
    L, H = table.ecs.shape[1:]
    return ReDeEPChoice(
        model=model,
        model_slug=model_slug,
        template=template,
        k_percent=float(k_percent),
        heads=chosen_heads,
        layers=chosen_layers,
        alpha=alpha,
        beta=beta,
        intercept=intercept,
        head_method=USER if heads is not None else head_method,
        layer_method=USER if layers is not None else PEARSON,
        n_layers=int(L),
        n_heads=int(H),
        ecs_corr=np.round(ecs_corr, 6).tolist(),
        pks_corr=np.round(pks_corr, 6).tolist(),
        n_recalled=int((table.labels == 1).sum()),
        n_read=int((table.labels == 0).sum()),
        auc_oof=float(auc(table.labels, oof)),
        auc_oof_ci=[float(low), float(high)],
        ov_scores=None if ov is None else np.round(ov, 6).tolist(),
        ov_refusal=ov_refusal,
        trained_on=list(trained_on or []),
        protocol=(
            f"heads: top {n_heads} by {'OV copying score' if head_method == OV else '−Pearson r(mean ECS, recalled)'}"
            f"; layers: top {n_layers} by Pearson r(mean PKS, recalled); α, β: LogisticRegression(C=1) on "
            f"(ΣPKS, ΣECS), standardized, mapped back to raw units; out-of-fold AUC: StratifiedKFold({N_SPLITS}, "
            f"seed {SEED}) with the selection repeated inside each fold"
            + ("; heads/layers given by the user" if user else "")
        ),
    )


def refit(
    choice: ReDeEPChoice,
    table: CalibrationTable,
    heads: Sequence[Sequence[int]] | None,
    layers: Sequence[int] | None,
) -> ReDeEPChoice:
    """The user's own heads and/or layers with α, β refit on the stored calibration table."""
    h = [list(map(int, x)) for x in heads] if heads is not None else None
    ly = [int(x) for x in layers] if layers is not None else None
    refitted = fit_choice(
        table,
        model=choice.model,
        model_slug=choice.model_slug,
        template=choice.template,
        k_percent=choice.k_percent,
        heads=h if h is not None else choice.heads,
        layers=ly if ly is not None else choice.layers,
        ov=None if choice.ov_scores is None else np.asarray(choice.ov_scores),
        ov_refusal=choice.ov_refusal,
        trained_on=choice.trained_on,
        n_boot=200,
    )
    return replace(
        refitted,
        head_method=USER if h is not None else choice.head_method,
        layer_method=USER if ly is not None else choice.layer_method,
    )


def parse_heads(text: str) -> list[list[int]]:
    """``"12.3, 14.0"`` (layer.head, comma-separated) → ``[[12, 3], [14, 0]]`` (``ValueError`` naming the bad item)."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        try:
            layer, head = item.lower().replace("l", "").replace("h", "").split(".")
            out.append([int(layer), int(head)])
        except ValueError as exc:
            raise ValueError(f"a head is written layer.head (e.g. 12.3), got {item!r}") from exc
    return out


def parse_layers(text: str) -> list[int]:
    """``"20, 21"`` → ``[20, 21]``."""
    try:
        return [int(t.strip().lower().lstrip("l")) for t in text.split(",") if t.strip()]
    except ValueError as exc:
        raise ValueError(f"layers are comma-separated integers, got {text!r}") from exc


# -- storage -----------------------------------------------------------------------------------------------


def bundled_choice_path(template_key: str) -> Path:
    """``assets/redeep/embedded-<template>.json``: the embedded model's choice."""
    return REDEEP_CHOICE.bundled("", template_key)  # type: ignore[misc]


def bundled_table_path(template_key: str) -> Path:
    """``assets/redeep/embedded-<template>.calibration.npz``: the table it was chosen on."""
    return REDEEP_TABLE.bundled("", template_key)  # type: ignore[misc]


REDEEP_TABLE = artifacts.ArtifactKind(
    name="redeep-table",
    read=lambda path: CalibrationTable.load(path),
    bundled=lambda slug, key: asset_path("redeep", f"embedded-{key}.calibration.npz"),
    cache=lambda slug, key: Path("redeep") / slug / f"{key}.calibration.npz",
)
"""The calibration table a choice was made on, next to the choice (bundled for the embedded model, else cached)."""


REDEEP_CHOICE = artifacts.per_template("redeep-choice", ReDeEPChoice.load, "redeep")
"""ReDeEP's choice per (model, resolved template): bundled for the embedded model, else built and cached."""


def cache_choice_path(handle: ModelHandle, template_key: str) -> Path:
    """``<cache_dir>/redeep/<slug>/<template>.json``: a choice built for another model."""
    return artifacts.cache_path(REDEEP_CHOICE, handle, template_key)


def load_choice_for(handle: ModelHandle, template: str) -> ReDeEPChoice | None:
    """The choice in force for this model and template: the file named by ``$READ_OR_RECALL_REDEEP_CHOICE``
    when it fits this model, else the bundled or cached one, else ``None``."""
    key = resolve_template(template, handle.tokenizer).key
    override = os.environ.get(OVERRIDE_ENV)
    if override:
        choice = ReDeEPChoice.load(override)
        why = artifacts.made_for(choice, handle, key)
        if why is not None:
            raise ValueError(f"${OVERRIDE_ENV} names a ReDeEP choice {why}")
        return choice
    return artifacts.find(REDEEP_CHOICE, handle, key)


def load_table_for(handle: ModelHandle, template: str) -> CalibrationTable | None:
    """The calibration table next to the bundled or cached choice (``None`` when there is none)."""
    return artifacts.find(REDEEP_TABLE, handle, resolve_template(template, handle.tokenizer).key)


def default_choice(handle: ModelHandle, template: str, n_heads: int = DEFAULT_HEADS) -> ReDeEPChoice:
    """A label-free choice for a model with none stored: the ``n_heads`` heads with the highest OV copying score
    (every head where the OV score is refused), every layer, α = β = 1 (not fitted: the score's scale and the two
    terms' balance are arbitrary until ``scripts/build_redeep.py`` fits them on labeled rows)."""
    from core.methods.redeep.ov import ov_copying_scores

    L, H = handle.info.n_layers, handle.info.n_heads
    try:
        ov, refusal = ov_copying_scores(handle), None
        heads = rank_heads(ov, n_heads, descending=True)
    except ValueError as exc:
        ov, refusal = None, str(exc)
        heads = [[layer, head] for layer in range(L) for head in range(H)]
    return ReDeEPChoice(
        model=handle.info.name,
        model_slug=handle.slug,
        template=resolve_template(template, handle.tokenizer).key,
        k_percent=10.0,
        heads=heads,
        layers=list(range(L)),
        alpha=1.0,
        beta=1.0,
        intercept=0.0,
        head_method=OV if ov is not None else ALL,
        layer_method=ALL,
        n_layers=L,
        n_heads=H,
        ecs_corr=[[0.0] * H for _ in range(L)],
        pks_corr=[0.0] * L,
        n_recalled=0,
        n_read=0,
        ov_scores=None if ov is None else np.round(ov, 6).tolist(),
        ov_refusal=refusal,
        protocol="label-free default (no calibration): OV-chosen heads, every layer, α = β = 1 (not fitted)",
    )


def choice_for(handle: ModelHandle, template: str) -> ReDeEPChoice:
    """The stored choice (:func:`load_choice_for`), else the label-free :func:`default_choice`."""
    return load_choice_for(handle, template) or default_choice(handle, template)


def is_fitted(choice: ReDeEPChoice) -> bool:
    """Whether α, β were fitted on labeled rows (not the label-free default)."""
    return choice.n_recalled > 0 and choice.n_read > 0


def override_choice(handle: ModelHandle, template: str, heads: str = "", layers: str = "") -> ReDeEPChoice:
    """The choice in force with a user's own heads and/or layers (``"12.3, 14.0"`` / ``"20, 21"``; empty keeps
    the stored ones): α, β refit on the stored calibration table when there is one, else kept (and said so in
    :attr:`ReDeEPChoice.protocol`).

    Raises:
        ValueError: unparsable text or a head/layer out of range.
    """
    choice = choice_for(handle, template)
    h = parse_heads(heads) if heads.strip() else None
    ly = parse_layers(layers) if layers.strip() else None
    if h is None and ly is None:
        return choice
    table = load_table_for(handle, template) if is_fitted(choice) else None
    if table is not None:
        return refit(choice, table, h, ly)
    return replace(
        choice,
        heads=h if h is not None else choice.heads,
        layers=ly if ly is not None else choice.layers,
        head_method=USER if h is not None else choice.head_method,
        layer_method=USER if ly is not None else choice.layer_method,
        protocol=choice.protocol + "; heads/layers given by the user, α, β not refit (no calibration table)",
    )
