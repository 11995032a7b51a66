"""RePCS' threshold τ as the engine applies it: Z, :class:`Threshold` (and its length-aware :class:`LengthTau`) and
the one loader with one set of checks.

* Z(q) = Σ_{t<T} KL(P_rag,t ‖ P_para,t) (RePCS eq. 2): :func:`repcs_score`;
* a :class:`Threshold` is the constant τ (the α-quantile of Z over clean prompts, RePCS Alg. 1) and, when
  present, the length-aware τ(L) = e^a · L^b with its bootstrap band (:class:`LengthTau`); how a verdict is
  read from Z and τ is :func:`core.engine.verdict.decide`;
* every threshold that comes from outside the process — a file named on the command line, an upload on the
  Evaluate page, the session's stored τ, the bundled file — is read by :func:`load_threshold` /
  :meth:`Threshold.from_dict` (field checks, :mod:`core.engine.threshold_checks`: τ a positive number of nats,
  T ≥ 1, α in (0, 1) …) and checked against the model it is applied to by :func:`check_model` (a τ is specific to
  one model).

Which τ is in force (session → file → a τ you saved → the model's calibration record → none) is
:mod:`core.engine.tau_resolution`. Fitting a τ (the α-quantile, the PAC sample size, the quantile regression behind
τ(L)) is a method: :mod:`core.methods.repcs` and :mod:`core.methods.repcs_length`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.engine.threshold_checks import (
    MAX_SCORED_LENGTH,
    check_log_tau,
    count_field,
    finite_number,
    json_fields,
    nesting,
    shown,
    text_field,
)
from core.io import MAX_JSON_DEPTH, asset_path, atomic_write_text, check_json_depth, read_user_file
from core.model import artifacts

THRESHOLD_DIR = asset_path("thresholds")
EMBEDDED_THRESHOLD = THRESHOLD_DIR / "embedded.json"
"""The embedded model's bundled τ (``scripts/calibrate_threshold.py``)."""
MAX_THRESHOLD_BYTES = 64 * 1024
"""A threshold file is a few kilobytes; larger files are refused unread."""

BAND_LEVEL = 0.90
"""Coverage of the bootstrap band around τ(L)."""
BOOT_SEED = 0


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
        return json_fields(self)

    @classmethod
    def from_dict(cls, data: Any) -> LengthTau:
        """Read the ``length_tau`` object of a threshold file, field by field (``ValueError`` names the field).

        Besides each field's type and range, τ(L) itself — the fit and every bootstrap fit — must be a finite,
        positive number of nats for every L in 1 … :data:`MAX_SCORED_LENGTH` (:func:`check_log_tau`).
        """
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
            values[name] = count_field(values.get(name, 0), f"length_tau.{name}")
        if not 1 <= values["L_min"] <= values["L_max"] <= MAX_SCORED_LENGTH:
            raise ValueError(
                f"'length_tau' needs 1 <= L_min <= L_max <= {MAX_SCORED_LENGTH:,}, got {values['L_min']}, "
                f"{values['L_max']}"
            )
        boots = []
        for name in ("boot_intercept", "boot_slope"):
            raw = values.get(name, [])
            if not isinstance(raw, (list, tuple)) or len(raw) > 10_000:
                raise ValueError(f"'length_tau.{name}' must be a list of at most 10,000 numbers")
            values[name] = tuple(finite_number(v, f"length_tau.{name}") for v in raw)
            boots.append(len(values[name]))
        if boots[0] != boots[1]:
            raise ValueError("'length_tau.boot_intercept' and 'boot_slope' differ in length")
        if any(not 0.0 <= b <= 1.0 for b in values["boot_slope"]):
            raise ValueError("every 'length_tau.boot_slope' must lie in [0, 1] (each bootstrap fit is monotone)")
        if "form" in values:
            values["form"] = text_field(values["form"], "length_tau.form")
        check_log_tau(values["intercept"], values["slope"], "'length_tau'")
        check_log_tau(values["boot_intercept"], values["boot_slope"], "A bootstrap fit of 'length_tau'")
        return cls(**values)


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


@dataclass
class Threshold:
    """A calibrated τ with the figures behind it (stored as a small JSON file).

    ``tau`` is the paper's constant τ (the α-quantile of Z over the clean rows); ``length_tau``, when present,
    is the length-aware τ(L) with its band (:class:`LengthTau`), applied by :func:`core.engine.verdict.decide`
    unless the paper's setting is chosen (:meth:`for_mode`). Files written before ``length_tau`` existed load
    with it ``None``.
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
        ``alpha`` and ``source`` default to 0.05 and "threshold file"; unknown fields are ignored. Every field is
        checked before the threshold is used anywhere: numbers finite and in their range (τ > 0, α, ε in (0, 1),
        rates in [0, 1], counts and T bounded), texts non-empty and at most :data:`MAX_TEXT_CHARS` characters,
        ``extra`` an object nested at most :data:`~core.io.MAX_JSON_DEPTH` deep, and ``length_tau`` as
        :meth:`LengthTau.from_dict` checks it (τ(L) finite and positive at every length).
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
        if values["tau"] <= 0.0:
            raise ValueError(
                f"'tau' must be a positive number of nats, got {values['tau']} (Z is a sum of KL divergences, "
                "never negative: with τ ≤ 0 every answer would read as read from the context)"
            )
        values["alpha"] = finite_number(values["alpha"], "alpha")
        if not 0.0 < values["alpha"] < 1.0:
            raise ValueError(f"'alpha' must lie in (0, 1), got {values['alpha']}")
        if (
            isinstance(values["T"], bool)
            or not isinstance(values["T"], int)
            or not 1 <= values["T"] <= MAX_SCORED_LENGTH
        ):
            raise ValueError(
                f"'T' must be a positive integer (answer tokens, at most {MAX_SCORED_LENGTH:,}), got "
                f"{shown(values['T'])}"
            )
        for name in ("model", "source"):
            values[name] = text_field(values[name], name)
        for name in ("gamma", "delta", "epsilon", "fpr", "fnr", "mean_z_clean", "mean_z_memorized"):
            if values.get(name) is not None:
                values[name] = finite_number(values[name], name)
        if values.get("epsilon") is not None and not 0.0 < values["epsilon"] < 1.0:
            raise ValueError(f"'epsilon' must lie in (0, 1), got {values['epsilon']}")
        for name in ("fpr", "fnr"):
            if values.get(name) is not None and not 0.0 <= values[name] <= 1.0:
                raise ValueError(f"{name!r} is a rate and must lie in [0, 1], got {values[name]}")
        for name in ("n_clean", "n_memorized", "n_required"):
            if values.get(name) is not None:
                values[name] = count_field(values[name], name)
        extra = values.get("extra", {})
        if not isinstance(extra, dict):
            raise ValueError("'extra' must be a JSON object")
        if nesting(extra) > MAX_JSON_DEPTH:
            raise ValueError(f"'extra' nests objects or arrays more than {MAX_JSON_DEPTH} levels deep")
        if values.get("length_tau") is not None and not isinstance(values["length_tau"], LengthTau):
            values["length_tau"] = LengthTau.from_dict(values["length_tau"])
        return cls(**values)

    @classmethod
    def from_json_bytes(cls, data: bytes, *, max_bytes: int = MAX_THRESHOLD_BYTES) -> Threshold:
        """A threshold from the bytes of a JSON file (e.g. an upload), size-limited and strictly checked."""
        if len(data) > max_bytes:
            raise ValueError(
                f"A threshold file is a few kilobytes at most; this one has {len(data):,} (limit {max_bytes:,})"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"The file is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        check_json_depth(text, MAX_JSON_DEPTH, "The file")  # before parsing: no recursion on a deep document
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"The file is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from exc
        except (ValueError, RecursionError) as exc:  # e.g. an integer of more than 4,300 digits
            raise ValueError(f"The file is not a threshold's JSON: {str(exc)[:200]}") from None
        return cls.from_dict(parsed)

    @classmethod
    def load(cls, path: str | Path) -> Threshold:
        """A threshold from a JSON file: a regular file of at most 64 KiB (:func:`core.io.read_user_file`)."""
        data = read_user_file(path, MAX_THRESHOLD_BYTES, "threshold file")
        try:
            return cls.from_json_bytes(data)
        except ValueError as exc:
            raise ValueError(f"Threshold file {path}: {exc}") from exc

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path`` atomically (the folder is created; a reader never sees half a file).

        The bytes are exactly :meth:`to_json` (sorted keys), the same as the Evaluate page's "τ as JSON".
        """
        atomic_write_text(path, self.to_json())


def check_model(threshold: Threshold, model_name: str) -> None:
    """Refuse a τ calibrated for another model (a τ is specific to one model: Z's scale differs between models).

    Raises:
        ValueError: ``threshold.model`` is not ``model_name``; the message names both.
    """
    if threshold.model != model_name:
        raise ValueError(
            f"This τ was calibrated for {threshold.model}, not for the loaded model ({model_name}): a τ is "
            "specific to one model, so it is not applied."
        )


def load_threshold(source: str | Path | bytes, model_name: str | None = None) -> Threshold:
    """The one loader of a threshold file, for the app (an upload's bytes) and the CLI (a path).

    A path must be a regular file of at most 64 KiB (:func:`core.io.read_user_file`); the JSON is checked field
    by field (:meth:`Threshold.from_dict`); given ``model_name``, a τ of another model is refused
    (:func:`check_model`).

    Raises:
        ValueError: the message says what is wrong (and names the file for a path).
    """
    threshold = Threshold.from_json_bytes(source) if isinstance(source, bytes) else Threshold.load(source)
    if model_name is not None:
        try:
            check_model(threshold, model_name)
        except ValueError as exc:
            if isinstance(source, bytes):
                raise
            raise ValueError(f"Threshold file {source}: {exc}") from None
    return threshold


def describe_mode(threshold: Threshold) -> str:
    """A few words on how ``threshold`` is applied, e.g. "length-aware τ(L), the 5%-quantile of Z given L"."""
    if threshold.length_tau is not None:
        return f"length-aware τ(L), the {threshold.alpha:.0%}-quantile of Z given the answer's length"
    return f"one constant τ, the {threshold.alpha:.0%}-quantile of Z (RePCS, paper)"


def describe_in_force(threshold: Threshold | None, n_scored: int | None = None) -> str:
    """Which τ is in force, in words that never call a constant τ length-aware, and its value for an answer of
    ``n_scored`` scored tokens when given.

    E.g. "length-aware τ(L) from 2.07 to 6.90 nats (L = 3–64; τ(12) = 4.275 nats for this answer)" or
    "τ = 6.712 nats (T = 64), one constant τ".
    """
    if threshold is None:
        return "no τ (uncalibrated)"
    lt = threshold.length_tau
    if lt is None:
        return f"τ = {threshold.tau:.3f} nats (T = {threshold.T}), one constant τ"
    text = f"length-aware τ(L) from {lt.tau(lt.L_min):.2f} to {lt.tau(lt.L_max):.2f} nats (L = {lt.L_min}–{lt.L_max}"
    if n_scored is not None:
        text += f"; τ({int(n_scored)}) = {lt.tau(max(int(n_scored), 1)):.3f} nats for this answer"
    return text + ")"


BUNDLED_TAU = artifacts.ArtifactKind(
    name="repcs-tau",
    read=lambda path: Threshold.load(path),
    bundled=lambda slug, variant: EMBEDDED_THRESHOLD,
)
"""A τ file: the embedded model's bundled one, or a model's own in its calibration folder (read once per
modification time by the artifact store)."""
