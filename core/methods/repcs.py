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
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.io import asset_path, atomic_write_text, model_slug, read_user_file
from core.methods.repcs_length import (
    BAND_LEVEL,
    BOOT_SEED,
    N_BOOT_TAU,
    LengthTau,
    finite_number,
    fit_length_tau,
)
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
        values["tau"] = finite_number(values["tau"], "tau")
        values["alpha"] = finite_number(values["alpha"], "alpha")
        if not 0.0 < values["alpha"] < 1.0:
            raise ValueError(f"'alpha' must lie in (0, 1), got {values['alpha']}")
        if isinstance(values["T"], bool) or not isinstance(values["T"], int) or values["T"] < 1:
            raise ValueError(f"'T' must be a positive integer (answer tokens), got {values['T']!r}")
        for name in ("model", "source"):
            if not isinstance(values[name], str) or not values[name].strip():
                raise ValueError(f"{name!r} must be a non-empty string")
        for name in ("gamma", "delta", "epsilon", "fpr", "fnr", "mean_z_clean", "mean_z_memorized"):
            if values.get(name) is not None:
                values[name] = finite_number(values[name], name)
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
