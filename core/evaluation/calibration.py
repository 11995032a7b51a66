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

**Length-aware τ** (the default setting, :class:`core.engine.threshold.LengthTau`): τ(L) = exp(a + b ln L), the
α-quantile regression of ln Z on the number L = min(T, answer length) of scored tokens over the same clean
rows, 0 ≤ b ≤ 1, with a percentile-bootstrap band; rows whose Z falls inside the band, or whose L lies outside
the calibration's lengths, are *inconclusive*. It needs ⌈1/α⌉ clean calibration rows in each length bucket
(the shorter and the longer half of the rows) and refuses fewer, saying how many are needed
(:func:`core.methods.repcs_length.check_length_calibration`). The paper's constant τ is always computed too.

Per answer length (:func:`rates_by_length`): FPR and FNR with Wilson 95% intervals in the buckets
:data:`LENGTH_BUCKETS` of L, for the constant τ and for τ(L), plus the share of each class the band leaves
inconclusive and the *confident* error rates (grounded rows called "recalled", memorized rows called "read").

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

from core.engine.threshold import DEFAULT_TAU_MODE, TAU_LENGTH, TAU_MODES, TAU_PAPER, Threshold
from core.engine.verdict import INCONCLUSIVE, decide
from core.evaluation.length_rates import label_array, rates_by_length, scored_lengths
from core.evaluation.pac import DEFAULT_EPSILON, max_or_none, pac_summary, pac_table
from core.methods.repcs import calibrate_tau, fit_threshold, pac_sample_size

DEFAULT_ALPHA = 0.05
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
        mode: the τ setting calibrated (``"length"`` or ``"paper"``); ``fpr_heldout``/``fnr_heldout`` are its
            rule's (Z < τ(L), resp. Z < τ); ``fpr_heldout_constant``/``fnr_heldout_constant`` the constant τ's.
        inconclusive_heldout: share of held-out grounded / memorized rows the band leaves inconclusive
            (length-aware τ; ``None`` otherwise).
        rates_by_length: :func:`rates_by_length` on the held-out rows (both calibrations).
        pac: :func:`pac_table` — the PAC n with γ as Lemma III.3 uses it (vocabulary) next to the realised-token
            γ̂, and with the effective T (scored tokens) next to the nominal T.
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
    mode: str = TAU_PAPER
    fpr_heldout_constant: float | None = None
    fnr_heldout_constant: float | None = None
    inconclusive_heldout: dict[str, float | None] | None = None
    rates_by_length: list[dict[str, Any]] = field(default_factory=list)
    pac: dict[str, Any] = field(default_factory=dict)

    @property
    def tau(self) -> float:
        """The paper's constant τ (nats); the length-aware τ(L) is ``threshold.length_tau``."""
        return float(self.threshold.tau)

    @property
    def enough(self) -> bool | None:
        """Whether the calibration set reaches the PAC n (``None`` when n is undefined)."""
        return None if self.n_required is None else self.n_calibration >= self.n_required

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["threshold"] = json_threshold(self.threshold)
        out["tau"] = self.tau
        out["enough"] = self.enough
        return out


def calibration_split(labels: np.ndarray, fraction: float = DEFAULT_FRACTION, *, seed: int = 42) -> np.ndarray:
    """A boolean mask choosing ``round(fraction · n_grounded)`` (at least 1) grounded rows at random (seeded)
    for calibration; the other grounded rows and every memorized row are held out."""
    y = label_array(labels)
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


def json_threshold(threshold: Threshold) -> dict[str, Any]:
    """A threshold as a JSON-ready dict (the same object as its file)."""
    return dataclasses.asdict(threshold)


def achieved_rates(z: np.ndarray, labels: np.ndarray, tau: float | np.ndarray) -> tuple[float | None, float | None]:
    """(FPR, FNR) of the rule "memorized iff Z < τ": FPR over grounded rows, FNR over memorized rows
    (``None`` for a class with no rows). ``tau`` is one number or one τ per row (τ(L) of each row's L)."""
    zz = np.asarray(z, dtype=np.float64)
    y = label_array(labels)
    if zz.shape != y.shape:
        raise ValueError(f"z and labels differ in shape: {zz.shape} vs {y.shape}")
    t = np.broadcast_to(np.asarray(tau, dtype=np.float64), zz.shape)
    flagged = zz < t
    fpr = float(flagged[y == 0].mean()) if (y == 0).any() else None
    fnr = float((~flagged[y == 1]).mean()) if (y == 1).any() else None
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
    n_scored: np.ndarray | None = None,
    mode: str | None = None,
    max_abs_log_ratio_vocab: np.ndarray | None = None,
) -> CalibrationReport:
    """Set τ on the chosen clean rows (the constant τ, and τ(L) in the length-aware setting) and report
    held-out FPR/FNR, per answer length too, and the PAC n.

    Args:
        z: RePCS Z per row (nats), shape ``(n,)``.
        labels: 1 / ``"memorized"`` or 0 / ``"grounded"`` per row.
        max_abs_log_ratio: per row, max_t |log P_rag − log P_para| over the window (``DualPathResult``'s field).
        calibration_mask: rows used to set τ; they must all be grounded.
        T: the score window the Z were computed with.
        template: the prompt template setting (stored so a mismatch can be flagged later).
        n_scored: L per row (scored answer tokens, min(T, answer length)); needed for ``mode="length"`` and
            for the per-length rates.
        mode: ``"length"`` (fit τ(L) too; refuses too few clean rows per length bucket) or ``"paper"`` (the
            constant τ only); ``None``: ``"length"`` when ``n_scored`` is given, else ``"paper"``.
        max_abs_log_ratio_vocab: per row, the log-ratio over the vocabulary (``DualPathResult``'s field), for
            the PAC n with γ as Lemma III.3 uses it (:func:`pac_table`).

    Raises:
        ValueError: shape mismatch, no calibration row, a memorized row in the calibration set, bad α/ε, an
            unknown mode, ``mode="length"`` without lengths, or too few clean rows per length bucket.
    """
    zz, y, g, mask, L, mode = _checked_inputs(z, labels, max_abs_log_ratio, calibration_mask, n_scored, mode, epsilon)
    held = ~mask
    gamma = float(g.max()) if g.size else 0.0
    clean_all, mem_all = zz[y == 0], zz[y == 1]
    delta = float(clean_all.mean() - mem_all.mean()) if mem_all.size else None
    n_required = pac_sample_size(gamma, T, delta, epsilon) if delta is not None and delta > 0 else None
    base = fit_threshold(
        zz[mask],
        mem_all,
        gamma,
        T=T,
        model=model,
        alpha=alpha,
        epsilon=epsilon,
        source=source,
        n_scored_clean=L[mask] if mode == TAU_LENGTH and L is not None else None,
    )
    rates = _heldout_rates(zz[held], y[held], None if L is None else L[held], base, calibrate_tau(zz[mask], alpha))
    n_cal = int(mask.sum())
    warnings = _calibration_warnings(delta, n_required, n_cal, rates.n_heldout_clean, epsilon=epsilon, gamma=gamma, T=T)
    provenance = {**(extra or {}), **({"template": template} if template else {})}
    threshold = _with_heldout(base, rates, delta, n_required, float(clean_all.mean()), provenance)
    return CalibrationReport(
        threshold=threshold,
        n_calibration=n_cal,
        fpr_calibration=float(base.fpr),
        gamma=gamma,
        delta=delta,
        n_required=n_required,
        warnings=warnings,
        mode=base.mode,
        **dataclasses.asdict(rates),
        rates_by_length=[] if L is None or not held.any() else rates_by_length(zz[held], y[held], L[held], threshold),
        pac=pac_table(gamma, max_or_none(max_abs_log_ratio_vocab), delta, T, L, epsilon),
    )


def _checked_inputs(
    z: np.ndarray,
    labels: np.ndarray,
    max_abs_log_ratio: np.ndarray,
    calibration_mask: np.ndarray,
    n_scored: np.ndarray | None,
    mode: str | None,
    epsilon: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, str]:
    """:func:`calibrate`'s inputs as arrays (Z and log-ratios float64, labels 0/1, mask bool, L int64 or
    ``None``) and the τ setting resolved; raises ``ValueError`` for each refusal :func:`calibrate` lists."""
    zz = np.asarray(z, dtype=np.float64)
    y = label_array(labels)
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
    L = None if n_scored is None else np.asarray(n_scored).astype(np.int64)
    if mode is None:
        mode = DEFAULT_TAU_MODE if L is not None else TAU_PAPER
    if mode not in TAU_MODES:
        raise ValueError(f"unknown τ setting {mode!r}; choose one of {', '.join(TAU_MODES)}")
    if L is not None and L.shape != zz.shape:
        raise ValueError(f"n_scored must have one entry per row: {L.shape} vs {zz.shape}")
    if mode == TAU_LENGTH and L is None:
        raise ValueError(
            "The length-aware τ needs each row's number of scored answer tokens (rows of an older evaluation "
            "JSON lack n_tokens): score the rows again, or use the paper's constant τ (--tau-mode paper)."
        )
    return zz, y, g, mask, L, mode


@dataclass(frozen=True)
class _HeldoutRates:
    """Held-out error rates: the calibrated rule's, the constant τ's, the share of each class the τ(L) band
    leaves inconclusive (``None`` without τ(L)), and the held-out rows of each class; named as in
    :class:`CalibrationReport`."""

    fpr_heldout: float | None
    fnr_heldout: float | None
    fpr_heldout_constant: float | None
    fnr_heldout_constant: float | None
    inconclusive_heldout: dict[str, float | None] | None
    n_heldout_clean: int
    n_heldout_memorized: int


def _heldout_rates(z: np.ndarray, y: np.ndarray, L: np.ndarray | None, base: Threshold, tau: float) -> _HeldoutRates:
    """FPR/FNR on the held-out rows ``z``/``y`` (lengths ``L``) of the constant ``tau`` and, when ``base`` has
    τ(L) and the rows their lengths, of τ(L) with the inconclusive shares of its decision rule."""
    fpr_const, fnr_const = achieved_rates(z, y, tau)
    counts = int((y == 0).sum()), int((y == 1).sum())
    if base.length_tau is None or L is None:
        return _HeldoutRates(fpr_const, fnr_const, fpr_const, fnr_const, None, *counts)
    tau_rows = np.array([base.length_tau.tau(max(int(n), 1)) for n in L])
    fpr_held, fnr_held = achieved_rates(z, y, tau_rows)
    verdicts = np.array([decide(float(zi), int(li), base).verdict for zi, li in zip(z, L)])
    inconclusive = {
        "grounded": float((verdicts[y == 0] == INCONCLUSIVE).mean()) if (y == 0).any() else None,
        "memorized": float((verdicts[y == 1] == INCONCLUSIVE).mean()) if (y == 1).any() else None,
    }
    return _HeldoutRates(fpr_held, fnr_held, fpr_const, fnr_const, inconclusive, *counts)


def _with_heldout(
    base: Threshold,
    rates: _HeldoutRates,
    delta: float | None,
    n_required: int | None,
    mean_z_clean: float,
    provenance: dict[str, Any],
) -> Threshold:
    """``base`` (fit on the calibration rows) with the held-out rates, Δ̂, the PAC n and where each came from:
    the threshold to save."""
    return dataclasses.replace(
        base,
        delta=delta,
        n_required=n_required,
        fpr=rates.fpr_heldout,
        fnr=rates.fnr_heldout,
        mean_z_clean=mean_z_clean,
        extra={
            **provenance,
            "tau_mode": base.mode,
            "fpr_heldout_constant": rates.fpr_heldout_constant,
            "fnr_heldout_constant": rates.fnr_heldout_constant,
            "fpr_calibration": float(base.fpr) if base.fpr is not None else None,
            "n_heldout_clean": rates.n_heldout_clean,
            "n_heldout_memorized": rates.n_heldout_memorized,
            "rates": "held-out",
            "delta_from": "all labeled rows",
            "gamma_from": "max over all rows",
        },
    )


def _calibration_warnings(
    delta: float | None, n_required: int | None, n_cal: int, n_held_clean: int, *, epsilon: float, gamma: float, T: int
) -> list[str]:
    """Plain sentences on what the calibration cannot conclude: no gap, fewer rows than the PAC n, no
    held-out grounded row."""
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
    if n_held_clean == 0:
        warnings.append("Every grounded row was used for calibration: there is no held-out FPR; keep some back.")
    return warnings


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
    mode: str | None = None,
) -> CalibrationReport:
    """:func:`calibrate` over evaluation records (:mod:`core.evaluation.scoring`'s records: ``row``, ``label``,
    ``repcs_score``, ``max_abs_log_ratio``, ``n_tokens``; L = min(T, ``n_tokens``)).

    Args:
        calibration_rows: the ``row`` numbers of the grounded rows to calibrate on; default: a seeded random
            ``fraction`` of the grounded rows (:func:`calibration_split`).
        mode: ``"length"`` (τ(L) too) or ``"paper"`` (the constant τ only); ``None``: ``"length"`` when every
            record has ``n_tokens``, else ``"paper"``.
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
        n_scored=scored_lengths(records, T),
        mode=mode,
        max_abs_log_ratio_vocab=[r.get("max_abs_log_ratio_vocab") for r in records],  # type: ignore[arg-type]
    )


def check_threshold(threshold: Threshold, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Achieved FPR/FNR of a given τ (e.g. from ``--threshold-file``) on every record: with its τ(L) when it
    has one and the records carry their lengths, else its constant τ."""
    labels = np.array([1 if r["label"] == "memorized" else 0 for r in records])
    z = np.array([r["repcs_score"] for r in records], dtype=np.float64)
    L = scored_lengths(records, threshold.T)
    length_aware = threshold.length_tau is not None and L is not None
    tau = np.array([threshold.tau_at(max(int(n), 1)) for n in L]) if length_aware else float(threshold.tau)
    fpr, fnr = achieved_rates(z, labels, tau)
    return {
        "tau": float(threshold.tau),
        "T": threshold.T,
        "tau_mode": TAU_LENGTH if length_aware else TAU_PAPER,
        "fpr": fpr,
        "fnr": fnr,
        "n": len(records),
    }


__all__ = [
    "CalibrationReport",
    "achieved_rates",
    "calibrate",
    "calibrate_records",
    "calibrate_tau",
    "calibration_split",
    "check_threshold",
    "pac_summary",
    "pac_table",
]
