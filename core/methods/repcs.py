"""RePCS: the KL score Z, the calibrated threshold τ and the PAC sample size (RePCS §III-C, §III-G, §IV).

* Z(q) = Σ_{i=1}^{T} KL(P_rag^(i) ‖ P_para^(i))                                  (eq. 2)
* flag *recalled* (the paper's "memorised") when Z(q) < τ; τ = α-quantile of Z over clean (context-dependent)
  prompts (Alg. 1)
* n ≥ 8 γ² T Δ⁻² log(2/ε) clean calibration prompts give FPR ≤ α and FNR ≤ ε w.p. ≥ 1 − ε   (Thm III.4)
  with γ the bound on the per-token log-ratio |log P_rag − log P_para| and Δ the gap
  E[Z | clean] − E[Z | memorized] (Assumption 1).

**Length-aware τ (this project's extension, the default).** Z sums one non-negative KL term per scored answer
token, so it grows with the number L = min(T, answer length) of scored tokens, and one τ set on answers of
15–30 tokens flags short grounded answers far more often than α. :class:`LengthTau` replaces the constant by
a curve: the conditional α-quantile of Z given L, fitted by linear quantile regression (Koenker–Bassett check
loss) of ln Z on ln L over the clean rows,

    τ(L) = exp(a + b · ln L) = e^a · L^b,   0 ≤ b ≤ 1,

so b = 0 is the paper's constant τ and b = 1 is "every token adds the same KL" (Z ∝ L). Quantile regression is
equivariant under the monotone map ln, so this is the α-quantile of Z itself; the bounds keep τ(L) monotone
and at most proportional to L. Its uncertainty is a percentile bootstrap over the clean rows (the fit redone
on each resample): a row whose Z lies inside the band at its L, or whose L lies outside the calibration's
range [L_min, L_max], gets the verdict ``"inconclusive"`` with the reason (:func:`decide`). The paper's rule
(one constant τ, no band) stays available as the ``"paper"`` setting (:meth:`Threshold.for_mode`). The fit
itself lives in :mod:`core.methods.repcs_length` (re-exported here).

This module *fits*: the α-quantile τ, the PAC sample size and :func:`fit_threshold`. What every run *applies* —
Z, :class:`~core.engine.threshold.Threshold`, the decision rule and the τ resolver — has one door, the engine
(:mod:`core.engine.threshold`, :mod:`core.engine.verdict`); it is not re-exported here. The class names of
labeled rows (``MEMORIZED``, ``GROUNDED``) are defined once in :mod:`core.engine.verdict`.
"""

from __future__ import annotations

import math

import numpy as np

from core.engine.threshold import Threshold
from core.methods.repcs_length import BAND_LEVEL, BOOT_SEED, N_BOOT_TAU, fit_length_tau

__all__ = [
    "calibrate_tau",
    "fit_threshold",
    "pac_sample_size",
]


def calibrate_tau(z_clean: np.ndarray, alpha: float = 0.05) -> float:
    """τ = the α-quantile of Z over clean calibration prompts (numpy's default linear interpolation)."""
    z = np.asarray(z_clean, dtype=np.float64)
    if z.ndim != 1 or z.size == 0:
        raise ValueError("z_clean must be a non-empty 1-D array of clean-prompt scores")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return float(np.quantile(z, alpha))


def pac_sample_size(gamma: float, T: int, delta: float, epsilon: float) -> int:
    """n ≥ 8 γ² T Δ⁻² log(2/ε) (RePCS Theorem III.4), rounded up.

    Raises:
        ValueError: for Δ ≤ 0 (no influence gap: the guarantee does not apply), ε ∉ (0, 1), γ < 0, T < 1.
    """
    if delta <= 0:
        raise ValueError(f"the influence gap Δ must be > 0 for the bound to apply, got {delta}")
    if not 0.0 < epsilon < 1.0:
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon}")
    if gamma < 0 or T < 1:
        raise ValueError(f"need gamma >= 0 and T >= 1, got gamma={gamma}, T={T}")
    return math.ceil(8.0 * gamma**2 * T * math.log(2.0 / epsilon) / delta**2)


def fit_threshold(
    z_clean: np.ndarray,
    z_memorized: np.ndarray,
    log_ratio_max: float,
    *,
    T: int,
    model: str,
    alpha: float = 0.05,
    epsilon: float = 0.05,
    source: str = "calibrated",
    n_scored_clean: np.ndarray | None = None,
    band_level: float = BAND_LEVEL,
    n_boot: int = N_BOOT_TAU,
    seed: int = BOOT_SEED,
) -> Threshold:
    """Calibrate τ on clean scores and attach the PAC figures estimated from both classes.

    Args:
        z_clean: Z over clean (context-dependent) prompts.
        z_memorized: Z over memorized prompts (used for Δ and the achieved FNR); may be empty.
        log_ratio_max: γ, the largest observed per-token |log P_rag − log P_para|.
        T: the score window.
        n_scored_clean: L per clean prompt; given, the length-aware τ(L) is fitted too (:func:`fit_length_tau`,
            which refuses too few rows per length bucket). ``fpr``/``fnr`` stay those of the constant τ.
    """
    zc = np.asarray(z_clean, dtype=np.float64)
    zm = np.asarray(z_memorized, dtype=np.float64)
    tau = calibrate_tau(zc, alpha)
    delta = float(zc.mean() - zm.mean()) if zm.size else None
    n_required = pac_sample_size(log_ratio_max, T, delta, epsilon) if delta and delta > 0 else None
    return Threshold(
        tau=tau,
        alpha=alpha,
        T=T,
        model=model,
        source=source,
        n_clean=int(zc.size),
        n_memorized=int(zm.size),
        gamma=float(log_ratio_max),
        delta=delta,
        epsilon=epsilon,
        n_required=n_required,
        fpr=float((zc < tau).mean()),
        fnr=float((zm >= tau).mean()) if zm.size else None,
        mean_z_clean=float(zc.mean()),
        mean_z_memorized=float(zm.mean()) if zm.size else None,
        length_tau=None
        if n_scored_clean is None
        else fit_length_tau(zc, np.asarray(n_scored_clean), alpha, band_level=band_level, n_boot=n_boot, seed=seed),
    )
