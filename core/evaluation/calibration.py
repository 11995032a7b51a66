"""Calibrating RePCS' τ on chosen clean rows and checking it on held-out rows (RePCS §III-G, §III-K, Alg. 1).

* τ = the α-quantile of Z over the clean (context-dependent, *grounded*) rows chosen for calibration
  (:func:`core.methods.repcs.calibrate_tau`; RePCS Algorithm 1: "Set threshold τ to the α-quantile of {Z(q)}").
* Achieved error rates on **held-out** rows, i.e. rows not used to set τ: FPR = share of held-out grounded
  rows flagged (Z < τ), FNR = share of memorized rows not flagged (Z ≥ τ). Memorized rows are never used to
  set τ, so all of them are held out. The in-sample FPR on the calibration rows is ≈ α by construction and is
  reported only for comparison.
* The PAC sample size of Theorem III.4, n ≥ 8 γ² T Δ⁻² log(2/ε) (:func:`core.methods.repcs.pac_sample_size`), with
  γ̂ = the largest per-token |log P_rag − log P_para| observed over the window in any row (Lemma III.3's bound,
  estimated) and Δ̂ = mean Z over grounded rows − mean Z over memorized rows, all labeled rows (Assumption 1's
  gap, estimated). When Δ̂ ≤ 0 there is no influence gap and the guarantee does not apply.

What this can and cannot conclude: the guarantee holds under the paper's assumptions (bounded log-ratios, a
positive gap, calibration rows drawn from the same distribution as future clean queries); with γ̂ and Δ̂
estimated from a small set the printed n is itself an estimate, and a calibration set smaller than n
gives no guarantee at all — the held-out FPR/FNR are the honest figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.methods.repcs import Threshold, calibrate_tau, fit_threshold, pac_sample_size

DEFAULT_ALPHA = 0.05
DEFAULT_EPSILON = 0.05
DEFAULT_FRACTION = 0.5


@dataclass
class CalibrationReport:
    """τ, its held-out error rates and the PAC figures.

    Attributes:
        threshold: the :class:`Threshold` to save or apply (its ``fpr``/``fnr`` are the held-out rates).
        n_calibration: clean rows used to set τ; ``n_heldout_clean`` / ``n_heldout_memorized``: rows it is
            checked on.
        fpr_heldout, fnr_heldout: achieved rates on held-out rows (``None`` without such rows).
        fpr_calibration: in-sample FPR on the calibration rows (≈ α by construction).
        gamma, delta: γ̂ and Δ̂ (nats); ``n_required``: the PAC n (``None`` when Δ̂ ≤ 0).
        warnings: plain sentences for the UI / CLI.
    """

    threshold: Threshold
    n_calibration: int
    n_heldout_clean: int
    n_heldout_memorized: int
    fpr_heldout: float | None
    fnr_heldout: float | None
    fpr_calibration: float
    gamma: float
    delta: float | None
    n_required: int | None
    warnings: list[str] = field(default_factory=list)

    @property
    def tau(self) -> float:
        return float(self.threshold.tau)

    @property
    def enough(self) -> bool | None:
        """Whether the calibration set reaches the PAC n (``None`` when n is undefined)."""
        return None if self.n_required is None else self.n_calibration >= self.n_required

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["threshold"] = dataclasses.asdict(self.threshold)
        out["tau"] = self.tau
        out["enough"] = self.enough
        return out


def _labels(labels: np.ndarray) -> np.ndarray:
    y = np.asarray(labels)
    if y.dtype.kind in "USO":
        y = np.array([1 if str(v) == "memorized" else 0 for v in y])
    y = y.astype(int)
    if not np.all(np.isin(y, (0, 1))):
        raise ValueError("labels must be 0/1 (1 = memorized) or 'memorized'/'grounded'")
    return y


def calibration_split(labels: np.ndarray, fraction: float = DEFAULT_FRACTION, *, seed: int = 42) -> np.ndarray:
    """A boolean mask choosing ``round(fraction · n_grounded)`` (at least 1) grounded rows at random (seeded)
    for calibration; the other grounded rows and every memorized row are held out."""
    y = _labels(labels)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    clean = np.flatnonzero(y == 0)
    if clean.size == 0:
        raise ValueError("calibration needs grounded (clean) rows")
    k = max(1, round(fraction * clean.size))
    chosen = np.random.default_rng(seed).choice(clean, size=k, replace=False)
    mask = np.zeros(y.size, dtype=bool)
    mask[chosen] = True
    return mask


def achieved_rates(z: np.ndarray, labels: np.ndarray, tau: float) -> tuple[float | None, float | None]:
    """(FPR, FNR) of the rule "memorized iff Z < τ": FPR over grounded rows, FNR over memorized rows
    (``None`` for a class with no rows)."""
    zz = np.asarray(z, dtype=np.float64)
    y = _labels(labels)
    if zz.shape != y.shape:
        raise ValueError(f"z and labels differ in shape: {zz.shape} vs {y.shape}")
    clean, mem = zz[y == 0], zz[y == 1]
    fpr = float((clean < tau).mean()) if clean.size else None
    fnr = float((mem >= tau).mean()) if mem.size else None
    return fpr, fnr


def calibrate(
    z: np.ndarray,
    labels: np.ndarray,
    max_abs_log_ratio: np.ndarray,
    calibration_mask: np.ndarray,
    *,
    T: int,
    model: str,
    alpha: float = DEFAULT_ALPHA,
    epsilon: float = DEFAULT_EPSILON,
    template: str | None = None,
    source: str = "calibrated",
    extra: dict[str, Any] | None = None,
) -> CalibrationReport:
    """Set τ on the chosen clean rows and report held-out FPR/FNR and the PAC n.

    Args:
        z: RePCS Z per row (nats), shape ``(n,)``.
        labels: 1 / ``"memorized"`` or 0 / ``"grounded"`` per row.
        max_abs_log_ratio: per row, max_t |log P_rag − log P_para| over the window (``DualPathResult``'s field).
        calibration_mask: rows used to set τ; they must all be grounded.
        T: the score window the Z were computed with.
        template: the prompt template setting (stored so a mismatch can be flagged later).

    Raises:
        ValueError: shape mismatch, no calibration row, a memorized row in the calibration set, bad α/ε.
    """
    zz = np.asarray(z, dtype=np.float64)
    y = _labels(labels)
    g = np.asarray(max_abs_log_ratio, dtype=np.float64)
    mask = np.asarray(calibration_mask, dtype=bool)
    if not (zz.shape == y.shape == g.shape == mask.shape) or zz.ndim != 1:
        raise ValueError(
            f"z, labels, log-ratios and mask must be 1-D of one length: {zz.shape}, {y.shape}, {g.shape}, {mask.shape}"
        )
    if not np.all(np.isfinite(zz)):
        raise ValueError("Z must be finite for every row")
    if not mask.any():
        raise ValueError("choose at least one grounded (clean) row for calibration")
    if np.any(y[mask] == 1):
        raise ValueError("calibration rows must be clean (grounded): a memorized row was chosen")
    if not 0.0 < epsilon < 1.0:
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon}")
    tau = calibrate_tau(zz[mask], alpha)
    held = ~mask
    fpr_held, fnr_held = achieved_rates(zz[held], y[held], tau)
    gamma = float(g.max()) if g.size else 0.0
    clean_all, mem_all = zz[y == 0], zz[y == 1]
    delta = float(clean_all.mean() - mem_all.mean()) if mem_all.size else None
    n_required = pac_sample_size(gamma, T, delta, epsilon) if delta is not None and delta > 0 else None
    base = fit_threshold(zz[mask], mem_all, gamma, T=T, model=model, alpha=alpha, epsilon=epsilon, source=source)
    n_cal = int(mask.sum())
    warnings: list[str] = []
    if delta is None:
        warnings.append("No memorized rows: Δ (the influence gap) and the FNR cannot be estimated.")
    elif delta <= 0:
        warnings.append(
            f"No influence gap: mean Z of grounded rows is not above that of memorized rows (Δ̂ = {delta:.3g} nats), "
            "so Theorem III.4's guarantee does not apply to this data."
        )
    if n_required is not None and n_cal < n_required:
        warnings.append(
            f"The calibration set has {n_cal} clean rows, fewer than the PAC n = {n_required:,} for ε = {epsilon:g} "
            f"(γ̂ = {gamma:.3g}, T = {T}, Δ̂ = {delta:.3g}): the FPR ≤ α / FNR ≤ ε guarantee is not established."
        )
    if int((held & (y == 0)).sum()) == 0:
        warnings.append("Every grounded row was used for calibration: there is no held-out FPR; keep some back.")
    threshold = dataclasses.replace(
        base,
        delta=delta,
        n_required=n_required,
        fpr=fpr_held,
        fnr=fnr_held,
        mean_z_clean=float(clean_all.mean()),
        extra={
            **(extra or {}),
            **({"template": template} if template else {}),
            "fpr_calibration": float(base.fpr) if base.fpr is not None else None,
            "n_heldout_clean": int((held & (y == 0)).sum()),
            "n_heldout_memorized": int((held & (y == 1)).sum()),
            "rates": "held-out",
            "delta_from": "all labeled rows",
            "gamma_from": "max over all rows",
        },
    )
    return CalibrationReport(
        threshold=threshold,
        n_calibration=n_cal,
        n_heldout_clean=int((held & (y == 0)).sum()),
        n_heldout_memorized=int((held & (y == 1)).sum()),
        fpr_heldout=fpr_held,
        fnr_heldout=fnr_held,
        fpr_calibration=float(base.fpr),
        gamma=gamma,
        delta=delta,
        n_required=n_required,
        warnings=warnings,
    )


def calibrate_records(
    records: list[dict[str, Any]],
    calibration_rows: set[int] | None = None,
    *,
    T: int,
    model: str,
    alpha: float = DEFAULT_ALPHA,
    epsilon: float = DEFAULT_EPSILON,
    fraction: float = DEFAULT_FRACTION,
    seed: int = 42,
    template: str | None = None,
    source: str = "calibrated",
) -> CalibrationReport:
    """:func:`calibrate` over evaluation records (:mod:`core.evaluation.scoring`'s records: ``row``, ``label``,
    ``repcs_score``, ``max_abs_log_ratio``).

    Args:
        calibration_rows: the ``row`` numbers of the grounded rows to calibrate on; default: a seeded random
            ``fraction`` of the grounded rows (:func:`calibration_split`).
    """
    if not records:
        raise ValueError("no scored rows to calibrate on")
    labels = np.array([1 if r["label"] == "memorized" else 0 for r in records])
    if calibration_rows is None:
        mask = calibration_split(labels, fraction, seed=seed)
    else:
        mask = np.array([r["row"] in calibration_rows for r in records], dtype=bool)
    return calibrate(
        np.array([r["repcs_score"] for r in records], dtype=np.float64),
        labels,
        np.array([r.get("max_abs_log_ratio", 0.0) for r in records], dtype=np.float64),
        mask,
        T=T,
        model=model,
        alpha=alpha,
        epsilon=epsilon,
        template=template,
        source=source,
        extra={"calibration_rows": sorted(int(r["row"]) for r, m in zip(records, mask) if m)},
    )


def check_threshold(threshold: Threshold, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Achieved FPR/FNR of a given τ (e.g. from ``--threshold-file``) on every record."""
    labels = np.array([1 if r["label"] == "memorized" else 0 for r in records])
    fpr, fnr = achieved_rates(
        np.array([r["repcs_score"] for r in records], dtype=np.float64), labels, float(threshold.tau)
    )
    return {"tau": float(threshold.tau), "T": threshold.T, "fpr": fpr, "fnr": fnr, "n": len(records)}


__all__ = [
    "CalibrationReport",
    "achieved_rates",
    "calibrate",
    "calibrate_records",
    "calibrate_tau",
    "calibration_split",
    "check_threshold",
]
