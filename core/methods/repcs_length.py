"""RePCS extension: the length-aware threshold τ(L) (this project's, the default; see :mod:`core.methods.repcs`).

Z sums one non-negative KL term per scored answer token, so it grows with the number L = min(T, answer length)
of scored tokens. :class:`LengthTau` is the conditional α-quantile of Z given L, fitted by linear quantile
regression (Koenker–Bassett check loss) of ln Z on ln L over clean rows, τ(L) = e^a · L^b with 0 ≤ b ≤ 1,
with a percentile-bootstrap band (the fit redone on each resample). Pure numpy: no model, no IO.

This module fits τ(L); :class:`LengthTau` itself (what a run applies: τ(L), its band, its range, the file
form) lives in :mod:`core.engine.threshold` and is re-exported here.
"""

from __future__ import annotations

import math

import numpy as np

from core.engine.threshold import BAND_LEVEL, BOOT_SEED, LengthTau
from core.engine.threshold_checks import finite_number

N_BOOT_TAU = 200
"""Bootstrap refits behind the band (stored in the threshold file: the band is exact at any L)."""
__all__ = [
    "BAND_LEVEL",
    "BOOT_SEED",
    "N_BOOT_TAU",
    "Z_FLOOR",
    "LengthTau",
    "check_length_calibration",
    "finite_number",
    "fit_length_tau",
    "fit_quantile_line",
    "length_buckets_of_calibration",
    "min_rows_per_bucket",
]

Z_FLOOR = 1e-6
"""Z is floored here (nats) before its logarithm; a clean row has Z far above it."""


def _check_loss_fit(x: np.ndarray, y: np.ndarray, alpha: float, slope_bounds: tuple[float, float]) -> np.ndarray:
    """Rows of ``(a, b)`` minimizing Σ_i ρ_α(y_i − a − b·x_i) with b in ``slope_bounds``, one per row of x, y.

    ρ_α(u) = u·(α − 1[u < 0]) is the check loss of quantile regression (Koenker & Bassett, 1978). For fixed b
    the best a is the ⌈nα⌉-th smallest residual y − b·x; the loss minimized over a is convex in b (a partial
    minimum of a jointly convex function), so b is found by ternary search (the interval shrinks by 1/3 per
    step, 60 steps: below 1e-10). Vectorized over the rows (bootstrap resamples).

    Args:
        x, y: ``(m, n)`` float64 arrays: m problems of n points each.

    Returns:
        ``(m, 2)`` float64: intercept a and slope b of each problem.
    """
    m, n = x.shape
    k = max(0, math.ceil(n * alpha) - 1)

    def loss(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r = y - b[:, None] * x
        a = np.partition(r, k, axis=1)[:, k]
        u = r - a[:, None]
        return np.sum(u * (alpha - (u < 0)), axis=1), a

    lo = np.full(m, float(slope_bounds[0]))
    hi = np.full(m, float(slope_bounds[1]))
    for _ in range(60):
        m1 = lo + (hi - lo) / 3.0
        m2 = hi - (hi - lo) / 3.0
        left = loss(m1)[0] <= loss(m2)[0]
        hi = np.where(left, m2, hi)
        lo = np.where(left, lo, m1)
    b = (lo + hi) / 2.0
    flat = np.ptp(x, axis=1) == 0  # one length only: the slope is not identified; use the constant (b = lower bound)
    b[flat] = slope_bounds[0]
    _, a = loss(b)
    return np.stack([a, b], axis=1)


def fit_quantile_line(
    x: np.ndarray, y: np.ndarray, alpha: float, slope_bounds: tuple[float, float] = (0.0, 1.0)
) -> tuple[float, float]:
    """The α-quantile regression line y ≈ a + b·x with b constrained to ``slope_bounds``.

    Args:
        x, y: ``(n,)`` covariate and response.
        alpha: the quantile, in (0, 1).

    Returns:
        ``(a, b)``: with b strictly inside the bounds this is the unconstrained linear quantile regression
        (same check loss as e.g. scikit-learn's ``QuantileRegressor(alpha=0)``).
    """
    xx = np.asarray(x, dtype=np.float64)
    yy = np.asarray(y, dtype=np.float64)
    if xx.ndim != 1 or xx.shape != yy.shape or xx.size == 0:
        raise ValueError(f"x and y must be non-empty 1-D arrays of one length, got {xx.shape} and {yy.shape}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    a, b = _check_loss_fit(xx[None, :], yy[None, :], alpha, slope_bounds)[0]
    return float(a), float(b)


def min_rows_per_bucket(alpha: float) -> int:
    """Clean rows the length-aware τ needs in each length bucket: ⌈1/α⌉ (20 at α = 0.05).

    An α-quantile is only estimated by the data with at least 1/α rows (fewer, and it is the smallest value
    or an extrapolation below it); the fit needs that at both ends of the length range, so the rows sorted by
    length are split into a shorter and a longer half and each half must hold ⌈1/α⌉ rows.
    """
    return math.ceil(1.0 / alpha - 1e-9)


def length_buckets_of_calibration(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two length buckets of a calibration set: the rows sorted by length, split into the shorter and the
    longer half (the shorter half gets the smaller share when n is odd). Returns the two index arrays."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    half = order.size // 2
    return order[:half], order[half:]


def check_length_calibration(lengths: np.ndarray, alpha: float) -> None:
    """Refuse a calibration set too small for the length-aware τ, saying how many rows are needed.

    Raises:
        ValueError: a length bucket (:func:`length_buckets_of_calibration`) holds fewer than
            :func:`min_rows_per_bucket` rows; the message gives the counts and the number of rows to add.
    """
    L = np.asarray(lengths)
    need = min_rows_per_bucket(alpha)
    short, long = length_buckets_of_calibration(L)
    if min(short.size, long.size) >= need:
        return

    def span(idx: np.ndarray) -> str:
        if idx.size == 0:
            return "no rows"
        lo, hi = int(L[idx].min()), int(L[idx].max())
        return (
            f"{idx.size} row{'s' if idx.size != 1 else ''} of {lo}–{hi} tokens"
            if lo != hi
            else (f"{idx.size} row{'s' if idx.size != 1 else ''} of {lo} tokens")
        )

    raise ValueError(
        f"The length-aware τ needs at least {need} clean rows (⌈1/α⌉ for α = {alpha:g}) in each length bucket "
        f"(the shorter and the longer half of the calibration rows); this set has {span(short)} and "
        f"{span(long)}. Add at least {2 * need - L.size} clean rows ({2 * need} in all), raise α, or use the "
        "paper's constant τ (--tau-mode paper)."
    )


def fit_length_tau(
    z_clean: np.ndarray,
    n_scored: np.ndarray,
    alpha: float = 0.05,
    *,
    band_level: float = BAND_LEVEL,
    n_boot: int = N_BOOT_TAU,
    seed: int = BOOT_SEED,
    check: bool = True,
) -> LengthTau:
    """Fit τ(L) on clean rows: the α-quantile regression of ln max(Z, Z_FLOOR) on ln L with 0 ≤ b ≤ 1, and
    ``n_boot`` refits on bootstrap resamples of the rows (seeded) for the band.

    Args:
        z_clean: ``(n,)`` Z of the clean rows (nats).
        n_scored: ``(n,)`` L, the scored answer tokens of each row (min(T, answer length); ≥ 1).
        check: refuse too few rows per length bucket (:func:`check_length_calibration`).

    Raises:
        ValueError: shapes, non-finite Z, L < 1, α or the band level outside (0, 1), too few rows.
    """
    z = np.asarray(z_clean, dtype=np.float64)
    L = np.asarray(n_scored)
    if z.ndim != 1 or z.shape != L.shape or z.size == 0:
        raise ValueError(f"z_clean and n_scored must be non-empty 1-D arrays of one length: {z.shape}, {L.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("Z must be finite for every clean row")
    if not np.all(np.isfinite(L.astype(np.float64))) or np.any(L < 1) or np.any(np.round(L) != L):
        raise ValueError("every clean row needs at least one scored answer token (L must be whole numbers >= 1)")
    if not 0.0 < alpha < 1.0 or not 0.0 < band_level < 1.0:
        raise ValueError(f"alpha and band_level must lie in (0, 1), got {alpha} and {band_level}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    L = L.astype(np.int64)
    if check:
        check_length_calibration(L, alpha)
    x = np.log(L.astype(np.float64))
    y = np.log(np.maximum(z, Z_FLOOR))
    a, b = fit_quantile_line(x, y, alpha)
    boot = np.zeros((0, 2))
    if n_boot:
        idx = np.random.default_rng(seed).integers(0, z.size, size=(n_boot, z.size))
        boot = _check_loss_fit(x[idx], y[idx], alpha, (0.0, 1.0))
    return LengthTau(
        intercept=a,
        slope=b,
        alpha=float(alpha),
        L_min=int(L.min()),
        L_max=int(L.max()),
        n=int(z.size),
        band_level=float(band_level),
        boot_intercept=tuple(float(v) for v in boot[:, 0]),
        boot_slope=tuple(float(v) for v in boot[:, 1]),
        seed=int(seed),
    )
