"""RePCS extension: the length-aware threshold τ(L) (this project's, the default; see :mod:`core.methods.repcs`).

Z sums one non-negative KL term per scored answer token, so it grows with the number L = min(T, answer length)
of scored tokens. :class:`LengthTau` is the conditional α-quantile of Z given L, fitted by linear quantile
regression (Koenker–Bassett check loss) of ln Z on ln L over clean rows, τ(L) = e^a · L^b with 0 ≤ b ≤ 1,
with a percentile-bootstrap band (the fit redone on each resample). Pure numpy: no model, no IO.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

BAND_LEVEL = 0.90
"""Coverage of the bootstrap band around τ(L)."""
N_BOOT_TAU = 200
"""Bootstrap refits behind the band (stored in the threshold file: the band is exact at any L)."""
BOOT_SEED = 0
Z_FLOOR = 1e-6
"""Z is floored here (nats) before its logarithm; a clean row has Z far above it."""


def finite_number(value: Any, name: str) -> float:
    """``value`` as a float, for a threshold file's field ``name``.

    Raises:
        ValueError: not a finite int or float (a bool is refused too).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ValueError(f"{name!r} must be a finite number, got {value!r}")
    return float(value)


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


@dataclass(frozen=True)
class LengthTau:
    """τ(L) = exp(a + b · ln L): the α-quantile of Z given L scored answer tokens, with a bootstrap band.

    Attributes:
        intercept, slope: a and b of the fit of ln Z on ln L (0 ≤ b ≤ 1), :func:`fit_length_tau`.
        alpha: the quantile (target false-positive rate at every length).
        L_min, L_max: the range of scored lengths among the clean rows; outside it τ(L) is extrapolated and
            the verdict is inconclusive.
        n: clean rows fitted.
        band_level: coverage of the percentile bootstrap band (e.g. 0.9 → the 5th–95th percentiles).
        boot_intercept, boot_slope: the fit redone on each bootstrap resample of the clean rows; the band at
            any L is computed from them (:meth:`band`).
        seed: the resampling seed.
    """

    intercept: float
    slope: float
    alpha: float
    L_min: int
    L_max: int
    n: int
    band_level: float = BAND_LEVEL
    boot_intercept: tuple[float, ...] = ()
    boot_slope: tuple[float, ...] = ()
    seed: int = BOOT_SEED
    form: str = "tau(L) = exp(intercept + slope * ln L); alpha-quantile regression of ln Z on ln L, 0 <= slope <= 1"

    def tau(self, n_scored: int | float) -> float:
        """τ(L) in nats (L < 1 is read as 1)."""
        return float(math.exp(self.intercept + self.slope * math.log(max(float(n_scored), 1.0))))

    def band(self, n_scored: int | float) -> tuple[float, float]:
        """The (low, high) percentile bootstrap band of τ(L) at ``band_level``; it always contains τ(L).

        Without bootstrap fits (a hand-written file) the band is the single point τ(L).
        """
        tau = self.tau(n_scored)
        if not self.boot_intercept:
            return tau, tau
        log_l = math.log(max(float(n_scored), 1.0))
        taus = np.exp(np.asarray(self.boot_intercept) + np.asarray(self.boot_slope) * log_l)
        tail = (1.0 - self.band_level) / 2.0
        low, high = np.quantile(taus, [tail, 1.0 - tail])
        return float(min(low, tau)), float(max(high, tau))

    def covers(self, n_scored: int) -> bool:
        """Whether L lies inside the calibration's length range [L_min, L_max]."""
        return self.L_min <= n_scored <= self.L_max

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["boot_intercept"] = list(self.boot_intercept)
        out["boot_slope"] = list(self.boot_slope)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> LengthTau:
        """Read the ``length_tau`` object of a threshold file, field by field (``ValueError`` names the field)."""
        if not isinstance(data, dict):
            raise ValueError("'length_tau' must be a JSON object")
        for name in ("intercept", "slope", "alpha", "L_min", "L_max", "n"):
            if name not in data:
                raise ValueError(f"'length_tau' needs a {name!r} entry")
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for name in ("intercept", "slope", "alpha", "band_level"):
            if name in values:
                values[name] = finite_number(values[name], f"length_tau.{name}")
        if not 0.0 < values["alpha"] < 1.0 or not 0.0 < values.get("band_level", BAND_LEVEL) < 1.0:
            raise ValueError("'length_tau.alpha' and 'length_tau.band_level' must lie in (0, 1)")
        if not 0.0 <= values["slope"] <= 1.0:
            raise ValueError(f"'length_tau.slope' must lie in [0, 1] (τ(L) monotone), got {values['slope']}")
        for name in ("L_min", "L_max", "n", "seed"):
            value = values.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"'length_tau.{name}' must be a non-negative integer, got {value!r}")
        if not 1 <= values["L_min"] <= values["L_max"]:
            raise ValueError(f"'length_tau' needs 1 <= L_min <= L_max, got {values['L_min']}, {values['L_max']}")
        boots = []
        for name in ("boot_intercept", "boot_slope"):
            raw = values.get(name, [])
            if not isinstance(raw, (list, tuple)) or len(raw) > 10_000:
                raise ValueError(f"'length_tau.{name}' must be a list of at most 10,000 numbers")
            values[name] = tuple(finite_number(v, f"length_tau.{name}") for v in raw)
            boots.append(len(values[name]))
        if boots[0] != boots[1]:
            raise ValueError("'length_tau.boot_intercept' and 'boot_slope' differ in length")
        if "form" in values and not isinstance(values["form"], str):
            raise ValueError("'length_tau.form' must be a string")
        return cls(**values)


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
