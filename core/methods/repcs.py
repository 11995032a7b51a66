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
(one constant τ, no band) stays available as the ``"paper"`` setting (:meth:`Threshold.for_mode`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.io import asset_path, atomic_write_text, model_slug, read_user_file
from core.model.loading import EMBEDDED_NAME

ASSETS = asset_path()
THRESHOLD_DIR = ASSETS / "thresholds"
EMBEDDED_THRESHOLD = THRESHOLD_DIR / "embedded.json"

MEMORIZED = "memorized"
"""The class name of a labeled *memorized* row (a data label, not a verdict: see :mod:`core.engine.verdict`)."""
GROUNDED = "grounded"
"""The class name of a labeled *grounded* (clean) row."""

TAU_LENGTH = "length"
"""The length-aware τ(L) with the inconclusive band (the default)."""
TAU_PAPER = "paper"
"""RePCS as published: one constant τ, Z < τ ⇒ recalled, no band."""
TAU_MODES = (TAU_LENGTH, TAU_PAPER)
TAU_MODE_LABELS = {
    TAU_LENGTH: "Length-aware τ(L) with an inconclusive band (default)",
    TAU_PAPER: "RePCS (paper): one constant τ",
}
DEFAULT_TAU_MODE = TAU_LENGTH

BAND_LEVEL = 0.90
"""Coverage of the bootstrap band around τ(L)."""
N_BOOT_TAU = 200
"""Bootstrap refits behind the band (stored in the threshold file: the band is exact at any L)."""
BOOT_SEED = 0
Z_FLOOR = 1e-6
"""Z is floored here (nats) before its logarithm; a clean row has Z far above it."""


def repcs_score(token_kl: np.ndarray, window: int) -> float:
    """Z = Σ_{t < window} KL_t (nats), summed in float64. ``window`` is RePCS' T."""
    kl = np.asarray(token_kl, dtype=np.float64)
    if kl.ndim != 1:
        raise ValueError(f"token_kl must be 1-D, got shape {kl.shape}")
    if window < 1:
        raise ValueError(f"window T must be >= 1, got {window}")
    return float(kl[:window].sum())


def _vocab() -> Any:
    """:mod:`core.engine.verdict`, imported on use: the engine imports this module, so a module-level import
    here would close an import cycle when this module is imported first."""
    from core.engine import verdict as vocabulary

    return vocabulary


def verdict(z: float, tau: float) -> str:
    """``"recalled"`` when Z < τ, else ``"read"`` (RePCS' one-shot test; the paper's "memorised" / "grounded")."""
    v = _vocab()
    return v.RECALLED if z < tau else v.READ


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
                values[name] = _finite(values[name], f"length_tau.{name}")
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
            values[name] = tuple(_finite(v, f"length_tau.{name}") for v in raw)
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


@dataclass(frozen=True)
class Decision:
    """The verdict of one row and why.

    Attributes:
        verdict: one of :data:`core.engine.verdict.VERDICTS`.
        tau: the τ Z was compared with (τ(L) for the length-aware τ), ``None`` without a threshold.
        band: ``(low, high)`` of the inconclusive band at this L (length-aware τ only), else ``None``.
        reason: one plain sentence.
        mode: :data:`TAU_LENGTH` or :data:`TAU_PAPER` (``None`` without a threshold).
        n_scored: L, the scored answer tokens.
    """

    verdict: str
    tau: float | None
    band: tuple[float, float] | None
    reason: str
    mode: str | None
    n_scored: int


def decide(z: float, n_scored: int, threshold: Threshold | None) -> Decision:
    """The verdict for Z over L scored tokens under ``threshold``.

    * no threshold → ``"uncalibrated"``; an empty answer (L = 0) → ``"inconclusive"``;
    * a threshold without a length model (the paper's setting, or a file written before it existed) →
      RePCS' one-shot test Z < τ ⇒ ``"recalled"``, else ``"read"``;
    * with a length model: L outside [L_min, L_max] → ``"inconclusive"`` (τ(L) would be extrapolated); Z
      inside the band at L → ``"inconclusive"``; otherwise Z < τ(L) ⇒ ``"recalled"``, else ``"read"``.
    """
    v = _vocab()
    L = int(n_scored)
    if threshold is None:
        return Decision(v.UNCALIBRATED, None, None, "No threshold τ is known for this model: calibrate one.", None, L)
    lt = threshold.length_tau
    mode = TAU_LENGTH if lt is not None else TAU_PAPER
    if L < 1:
        tau = None if lt is None else lt.tau(1)
        return Decision(
            v.INCONCLUSIVE, tau, None, "The answer is empty: no token was scored, so Z says nothing.", mode, L
        )
    if lt is None:
        tau = float(threshold.tau)
        rel = "<" if z < tau else "≥"
        return Decision(
            verdict(z, tau), tau, None, f"Z = {z:.3f} {rel} τ = {tau:.3f} nats (one constant τ, RePCS Alg. 1).", mode, L
        )
    tau = lt.tau(L)
    low, high = lt.band(L)
    if not lt.covers(L):
        side = "shorter" if lt.L_min > L else "longer"
        return Decision(
            v.INCONCLUSIVE,
            tau,
            (low, high),
            f"The answer has {L} scored tokens, {side} than any clean calibration answer ({lt.L_min}–{lt.L_max}): "
            f"τ({L}) = {tau:.3f} nats is extrapolated, so the verdict is withheld (Z = {z:.3f}).",
            mode,
            L,
        )
    if low <= z <= high:
        return Decision(
            v.INCONCLUSIVE,
            tau,
            (low, high),
            f"Z = {z:.3f} nats lies within the calibration's {lt.band_level:.0%} uncertainty band of "
            f"τ({L}) = {tau:.3f}: [{low:.3f}, {high:.3f}].",
            mode,
            L,
        )
    rel = "<" if z < tau else "≥"
    side = "below" if z < low else "above"
    return Decision(
        verdict(z, tau),
        tau,
        (low, high),
        f"Z = {z:.3f} {rel} τ({L}) = {tau:.3f} nats, {side} the {lt.band_level:.0%} band [{low:.3f}, {high:.3f}].",
        mode,
        L,
    )


@dataclass
class Threshold:
    """A calibrated τ with the figures behind it (stored as a small JSON file).

    ``tau`` is the paper's constant τ (the α-quantile of Z over the clean rows); ``length_tau``, when present,
    is the length-aware τ(L) with its band (:class:`LengthTau`), applied by :func:`decide` unless the paper's
    setting is chosen (:meth:`for_mode`). Files written before ``length_tau`` existed load with it ``None``.
    """

    tau: float
    alpha: float
    T: int
    model: str
    source: str
    n_clean: int = 0
    n_memorized: int = 0
    gamma: float | None = None
    delta: float | None = None
    epsilon: float | None = None
    n_required: int | None = None
    fpr: float | None = None
    fnr: float | None = None
    mean_z_clean: float | None = None
    mean_z_memorized: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    length_tau: LengthTau | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @property
    def mode(self) -> str:
        """:data:`TAU_LENGTH` when a length model is applied, else :data:`TAU_PAPER` (one constant τ)."""
        return TAU_LENGTH if self.length_tau is not None else TAU_PAPER

    def for_mode(self, mode: str) -> Threshold:
        """This threshold as the chosen setting applies it.

        ``"length"`` keeps it as it is (a file without a length model stays a constant τ); ``"paper"`` drops the
        length model, leaving RePCS' constant τ, and marks ``extra["tau_mode"] = "paper"``.

        Raises:
            ValueError: an unknown mode.
        """
        if mode not in TAU_MODES:
            raise ValueError(f"unknown τ setting {mode!r}; choose one of {', '.join(TAU_MODES)}")
        if mode == TAU_LENGTH or (self.length_tau is None and self.extra.get("tau_mode") == TAU_PAPER):
            return self
        return replace(self, length_tau=None, extra={**self.extra, "tau_mode": TAU_PAPER})

    def tau_at(self, n_scored: int) -> float:
        """The τ a row of L scored tokens is compared with: τ(L) with a length model, else the constant τ."""
        return float(self.tau) if self.length_tau is None else self.length_tau.tau(n_scored)

    @classmethod
    def from_dict(cls, data: Any) -> Threshold:
        """A threshold from its JSON object, checked field by field (``ValueError`` names the bad field).

        Required: ``tau`` (a finite number, nats), ``T`` (a positive integer), ``model`` (the model's name).
        ``alpha`` and ``source`` default to 0.05 and "threshold file"; unknown fields are ignored.
        """
        if not isinstance(data, dict):
            raise ValueError('A threshold file holds one JSON object, e.g. {"tau": 6.7, "T": 64, "model": …}')
        for name in ("tau", "T", "model"):
            if name not in data:
                raise ValueError(f"A threshold file needs a {name!r} entry")
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values.setdefault("alpha", 0.05)
        values.setdefault("source", "threshold file")
        values["tau"] = _finite(values["tau"], "tau")
        values["alpha"] = _finite(values["alpha"], "alpha")
        if not 0.0 < values["alpha"] < 1.0:
            raise ValueError(f"'alpha' must lie in (0, 1), got {values['alpha']}")
        if isinstance(values["T"], bool) or not isinstance(values["T"], int) or values["T"] < 1:
            raise ValueError(f"'T' must be a positive integer (answer tokens), got {values['T']!r}")
        for name in ("model", "source"):
            if not isinstance(values[name], str) or not values[name].strip():
                raise ValueError(f"{name!r} must be a non-empty string")
        for name in ("gamma", "delta", "epsilon", "fpr", "fnr", "mean_z_clean", "mean_z_memorized"):
            if values.get(name) is not None:
                values[name] = _finite(values[name], name)
        for name in ("n_clean", "n_memorized", "n_required"):
            value = values.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name!r} must be a non-negative integer, got {value!r}")
        if not isinstance(values.get("extra", {}), dict):
            raise ValueError("'extra' must be a JSON object")
        if values.get("length_tau") is not None and not isinstance(values["length_tau"], LengthTau):
            values["length_tau"] = LengthTau.from_dict(values["length_tau"])
        return cls(**values)

    @classmethod
    def from_json_bytes(cls, data: bytes, *, max_bytes: int = 64 * 1024) -> Threshold:
        """A threshold from the bytes of a JSON file (e.g. an upload), size-limited and strictly checked."""
        if len(data) > max_bytes:
            raise ValueError(
                f"A threshold file is a few kilobytes at most; this one has {len(data):,} (limit {max_bytes:,})"
            )
        try:
            parsed = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"The file is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        except json.JSONDecodeError as exc:
            raise ValueError(f"The file is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from exc
        return cls.from_dict(parsed)

    @classmethod
    def load(cls, path: str | Path) -> Threshold:
        """A threshold from a JSON file: a regular file of at most 64 KiB (:func:`core.io.read_user_file`)."""
        data = read_user_file(path, 64 * 1024, "threshold file")
        try:
            return cls.from_json_bytes(data)
        except ValueError as exc:
            raise ValueError(f"Threshold file {path}: {exc}") from exc

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path`` atomically (the folder is created; a reader never sees half a file).

        The bytes are exactly :meth:`to_json` (sorted keys), the same as the Evaluate page's "τ as JSON".
        """
        atomic_write_text(path, self.to_json())


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ValueError(f"{name!r} must be a finite number, got {value!r}")
    return float(value)


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


def threshold_for(
    model_name: str, user_dir: Path | None = None, mode: str = DEFAULT_TAU_MODE
) -> tuple[Threshold | None, str]:
    """The threshold for a model, as the τ setting ``mode`` applies it, and a sentence saying where it came from.

    Order: a file saved for this model in ``user_dir`` (see :func:`user_threshold_path`), the bundled file for
    the embedded model, and otherwise the embedded model's τ as an explicitly labeled fallback.

    Raises:
        ValueError: an unknown ``mode``.
    """
    if mode not in TAU_MODES:
        raise ValueError(f"unknown τ setting {mode!r}; choose one of {', '.join(TAU_MODES)}")
    if user_dir is not None:
        path = user_threshold_path(user_dir, model_name)
        if path.is_file():
            th = Threshold.load(path).for_mode(mode)
            return th, f"calibrated by you ({path.name}; {describe_mode(th)})"
    if not EMBEDDED_THRESHOLD.is_file():
        return None, "no threshold available"
    th = Threshold.load(EMBEDDED_THRESHOLD).for_mode(mode)
    if model_name == EMBEDDED_NAME:
        return th, f"bundled calibration: {describe_mode(th)} over {th.n_clean} clean prompts"
    return th, "fallback: the embedded model's τ (not calibrated for this model — calibrate it)"


def describe_mode(threshold: Threshold) -> str:
    """A few words on how ``threshold`` is applied, e.g. "length-aware τ(L), the 5%-quantile of Z given L"."""
    if threshold.length_tau is not None:
        return f"length-aware τ(L), the {threshold.alpha:.0%}-quantile of Z given the answer's length"
    return f"one constant τ, the {threshold.alpha:.0%}-quantile of Z (RePCS, paper)"


def user_threshold_path(user_dir: Path, model_name: str) -> Path:
    """Where a τ saved for ``model_name`` lives in ``user_dir``: ``<model slug>.json``.

    The slug is :func:`core.io.model_slug` of the name alone (a τ is keyed by the model's name, as in
    :attr:`Threshold.model`): ``embedded.json`` for the embedded model, ``<name>-<sha1[:10]>.json`` otherwise.
    """
    slug = model_slug(model_name, "", embedded=model_name == EMBEDDED_NAME)
    return Path(user_dir) / f"{slug}.json"
