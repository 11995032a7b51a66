"""RePCS: the KL score Z, the calibrated threshold τ and the PAC sample size (RePCS §III-C, §III-G, §IV).

* Z(q) = Σ_{i=1}^{T} KL(P_rag^(i) ‖ P_para^(i))                                  (eq. 2)
* flag *memorized* when Z(q) < τ; τ = α-quantile of Z over clean (context-dependent) prompts (Alg. 1)
* n ≥ 8 γ² T Δ⁻² log(2/ε) clean calibration prompts give FPR ≤ α and FNR ≤ ε w.p. ≥ 1 − ε   (Thm III.4)
  with γ the bound on the per-token log-ratio |log P_rag − log P_para| and Δ the gap
  E[Z | clean] − E[Z | memorized] (Assumption 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.io import asset_path, atomic_write_text, model_slug
from core.model.loading import EMBEDDED_NAME

ASSETS = asset_path()
THRESHOLD_DIR = ASSETS / "thresholds"
EMBEDDED_THRESHOLD = THRESHOLD_DIR / "embedded.json"

MEMORIZED = "memorized"
GROUNDED = "grounded"


def repcs_score(token_kl: np.ndarray, window: int) -> float:
    """Z = Σ_{t < window} KL_t (nats), summed in float64. ``window`` is RePCS' T."""
    kl = np.asarray(token_kl, dtype=np.float64)
    if kl.ndim != 1:
        raise ValueError(f"token_kl must be 1-D, got shape {kl.shape}")
    if window < 1:
        raise ValueError(f"window T must be >= 1, got {window}")
    return float(kl[:window].sum())


def verdict(z: float, tau: float) -> str:
    """``"memorized"`` when Z < τ, else ``"grounded"`` (RePCS' one-shot test)."""
    return MEMORIZED if z < tau else GROUNDED


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


@dataclass
class Threshold:
    """A calibrated τ with the figures behind it (stored as a small JSON file)."""

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

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

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
        return cls(**values)

    @classmethod
    def from_json_bytes(cls, data: bytes, *, max_bytes: int = 64 * 1024) -> Threshold:
        """A threshold from the bytes of a JSON file (e.g. an upload), size-limited and strictly checked."""
        if len(data) > max_bytes:
            raise ValueError(
                f"A threshold file is a few hundred bytes; this one has {len(data):,} (limit {max_bytes:,})"
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
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"Cannot read threshold file {path}: {exc}") from exc
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
) -> Threshold:
    """Calibrate τ on clean scores and attach the PAC figures estimated from both classes.

    Args:
        z_clean: Z over clean (context-dependent) prompts.
        z_memorized: Z over memorized prompts (used for Δ and the achieved FNR); may be empty.
        log_ratio_max: γ, the largest observed per-token |log P_rag − log P_para|.
        T: the score window.
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
    )


def threshold_for(model_name: str, user_dir: Path | None = None) -> tuple[Threshold | None, str]:
    """The threshold for a model and a sentence saying where it came from.

    Order: a file saved for this model in ``user_dir`` (see :func:`user_threshold_path`), the bundled file for
    the embedded model, and otherwise the embedded model's τ as an explicitly labeled fallback.
    """
    if user_dir is not None:
        path = user_threshold_path(user_dir, model_name)
        if path.is_file():
            return Threshold.load(path), f"calibrated by you ({path.name})"
    if model_name == EMBEDDED_NAME and EMBEDDED_THRESHOLD.is_file():
        th = Threshold.load(EMBEDDED_THRESHOLD)
        return th, f"bundled calibration: {th.alpha:.0%}-quantile of Z over {th.n_clean} clean prompts"
    if EMBEDDED_THRESHOLD.is_file():
        th = Threshold.load(EMBEDDED_THRESHOLD)
        return th, "fallback: the embedded model's τ (not calibrated for this model — calibrate it)"
    return None, "no threshold available"


def user_threshold_path(user_dir: Path, model_name: str) -> Path:
    """Where a τ saved for ``model_name`` lives in ``user_dir``: ``<model slug>.json``.

    The slug is :func:`core.io.model_slug` of the name alone (a τ is keyed by the model's name, as in
    :attr:`Threshold.model`): ``embedded.json`` for the embedded model, ``<name>-<sha1[:10]>.json`` otherwise.
    """
    slug = model_slug(model_name, "", embedded=model_name == EMBEDDED_NAME)
    return Path(user_dir) / f"{slug}.json"
