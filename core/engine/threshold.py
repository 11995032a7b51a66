"""RePCS' threshold τ as the engine applies it: Z, :class:`Threshold` (and its length-aware :class:`LengthTau`),
the one loader with one set of checks, and the one τ resolver.

* Z(q) = Σ_{t<T} KL(P_rag,t ‖ P_para,t) (RePCS eq. 2): :func:`repcs_score`;
* a :class:`Threshold` is the constant τ (the α-quantile of Z over clean prompts, RePCS Alg. 1) and, when
  present, the length-aware τ(L) = e^a · L^b with its bootstrap band (:class:`LengthTau`); how a verdict is
  read from Z and τ is :func:`core.engine.verdict.decide`;
* every threshold that comes from outside the process — a file named on the command line, an upload on the
  Evaluate page, the session's stored τ, the bundled file — is read by :func:`load_threshold` /
  :meth:`Threshold.from_dict` (field checks: τ a positive number of nats, T ≥ 1, α in (0, 1) …) and checked
  against the model it is applied to by :func:`check_model` (a τ is specific to one model);
* :func:`resolve_tau` is the one place that says which τ is in force: the session's (a τ chosen in the app),
  else a file (``--threshold-file``), else a file saved for this model in a folder, else the bundled one of the
  embedded model, else the model's own from ``calibrate-model``, else none (another model's τ is never
  borrowed: the verdict is "uncalibrated", with the way to calibrate); :func:`tau_in_force` is the one
  meaning of an unset τ (a given τ as the τ setting applies it, else the model's default).

Fitting a τ (the α-quantile, the PAC sample size, the quantile regression behind τ(L)) is a method:
:mod:`core.methods.repcs` and :mod:`core.methods.repcs_length`.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.io import MAX_JSON_DEPTH, asset_path, atomic_write_text, check_json_depth, model_slug, read_user_file
from core.model import artifacts
from core.model.loading import EMBEDDED_NAME

THRESHOLD_DIR = asset_path("thresholds")
EMBEDDED_THRESHOLD = THRESHOLD_DIR / "embedded.json"
"""The embedded model's bundled τ (``scripts/calibrate_threshold.py``)."""
MAX_THRESHOLD_BYTES = 64 * 1024
"""A threshold file is a few kilobytes; larger files are refused unread."""
MAX_SCORED_LENGTH = 65_536
"""The longest answer (scored tokens L) a τ must hold for: τ(L) must be a finite, positive number of nats for every
L in 1 … this (far above any answer the engine scores: the score window is at most 4,096 tokens)."""
MAX_COUNT = 10**9
"""Largest row count, length or seed a threshold file may state."""
MAX_TEXT_CHARS = 2_000
"""Longest name, source or formula text a threshold file may hold."""
_LOG_MAX = math.log(1.7976931348623157e308)  # ln of the largest float: e^x overflows above it
_LOG_MIN = math.log(2.2250738585072014e-308)  # ln of the smallest normal float: e^x is 0 (or denormal) below it

BAND_LEVEL = 0.90
"""Coverage of the bootstrap band around τ(L)."""
BOOT_SEED = 0


def finite_number(value: Any, name: str) -> float:
    """``value`` as a float, for a threshold file's field ``name``.

    Raises:
        ValueError: not a finite int or float (a bool is refused too).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ValueError(f"{name!r} must be a finite number, got {value!r}")
    return float(value)


def _count(value: Any, name: str, low: int = 0) -> int:
    """A threshold file's integer field: an int (not a bool) in ``low`` … :data:`MAX_COUNT`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
        raise ValueError(f"{name!r} must be an integer between {low} and {MAX_COUNT:,}, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    """A field's value for a message: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _text(value: Any, name: str) -> str:
    """A threshold file's text field: a non-empty string of at most :data:`MAX_TEXT_CHARS` characters."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name!r} must be a non-empty string")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"{name!r} is {len(value):,} characters long; at most {MAX_TEXT_CHARS:,}")
    return value


def _nesting(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep dicts and lists nest in ``value`` (iteratively: no recursion on a deep value), up to ``limit + 1``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            stack.extend((v, depth) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_log_tau(intercept: Any, slope: Any, name: str) -> None:
    """Refuse a τ(L) = exp(intercept + slope · ln L) that is not a finite, positive number of nats for every L in
    1 … :data:`MAX_SCORED_LENGTH` (checked at both ends in log space: with 0 ≤ slope ≤ 1 it is monotone between).

    Args:
        intercept, slope: arrays (or numbers) of fits, checked together; ``name`` says which in the message.

    Raises:
        ValueError: τ(L) would be 0 (e.g. intercept −800: every answer would read as "read") or overflow (e.g.
            intercept +800) somewhere in that range; the message gives the range of ln τ found.
    """
    a = np.asarray(intercept, dtype=np.float64)
    b = np.asarray(slope, dtype=np.float64)
    ends = np.concatenate([np.ravel(a), np.ravel(a + b * math.log(MAX_SCORED_LENGTH))])
    if ends.size and not (np.all(np.isfinite(ends)) and ends.min() >= _LOG_MIN and ends.max() <= _LOG_MAX):
        why = (
            "τ would be 0 there, and every answer would read as read from the context"
            if np.all(np.isfinite(ends)) and ends.min() < _LOG_MIN
            else "τ would overflow to infinity there"
        )
        raise ValueError(
            f"{name} gives τ(L) = exp({float(np.nanmin(ends)):.4g} … {float(np.nanmax(ends)):.4g}) nats for L = 1 … "
            f"{MAX_SCORED_LENGTH:,}: τ(L) must be a finite, positive number of nats at every length (ln τ between "
            f"{_LOG_MIN:.0f} and {_LOG_MAX:.0f}); {why}"
        )


def json_fields(record: Any) -> dict[str, Any]:
    """A dataclass's fields as a JSON-ready dict: :func:`dataclasses.asdict` with its tuples as lists."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(record).items()}


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
            values[name] = _count(values.get(name, 0), f"length_tau.{name}")
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
            values["form"] = _text(values["form"], "length_tau.form")
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
                f"{_shown(values['T'])}"
            )
        for name in ("model", "source"):
            values[name] = _text(values[name], name)
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
                values[name] = _count(values[name], name)
        extra = values.get("extra", {})
        if not isinstance(extra, dict):
            raise ValueError("'extra' must be a JSON object")
        if _nesting(extra) > MAX_JSON_DEPTH:
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


def user_threshold_path(user_dir: Path, model_name: str) -> Path:
    """Where a τ saved for ``model_name`` lives in ``user_dir``: ``<model slug>.json``.

    The slug is :func:`core.io.model_slug` of the name alone (a τ is keyed by the model's name, as in
    :attr:`Threshold.model`): ``embedded.json`` for the embedded model, ``<name>-<sha1[:10]>.json`` otherwise.
    """
    slug = model_slug(model_name, "", embedded=model_name == EMBEDDED_NAME)
    return Path(user_dir) / f"{slug}.json"


ORIGIN_SESSION = "session"
ORIGIN_FILE = "file"
ORIGIN_USER = "user"
ORIGIN_BUNDLED = "bundled"
ORIGIN_CALIBRATED = "calibrated"
ORIGIN_NONE = "none"
HOW_TO_CALIBRATE_TAU = "python -m core calibrate-model --model <this model>"
"""The one step that calibrates a model's τ (with every other per-model artifact)."""


@dataclass(frozen=True)
class TauInForce:
    """The τ in force for one model and where it came from.

    Attributes:
        threshold: the τ as the τ setting applies it (``None``: no τ, verdicts are "uncalibrated").
        source: one sentence for the page or the JSON (``threshold_source``).
        origin: :data:`ORIGIN_SESSION`, :data:`ORIGIN_FILE`, :data:`ORIGIN_USER`, :data:`ORIGIN_BUNDLED`,
            :data:`ORIGIN_CALIBRATED` (the model's own, from ``calibrate-model``) or :data:`ORIGIN_NONE` (no τ:
            another model's τ is never borrowed).
    """

    threshold: Threshold | None
    source: str
    origin: str

    def pair(self) -> tuple[Threshold | None, str]:
        """``(threshold, source)``, the pair the engine's runs take."""
        return self.threshold, self.source


def resolve_tau(
    model_name: str,
    *,
    session: tuple[Threshold, str] | None = None,
    file: str | Path | None = None,
    user_dir: Path | None = None,
    mode: str = DEFAULT_TAU_MODE,
) -> TauInForce:
    """The τ in force for ``model_name``: session → file → user folder → bundled (the embedded model) → the model's
    own calibration (``calibrate-model``, :mod:`core.model.calibration_store`) → none. A model without its own τ
    gets none (its RePCS verdict is "uncalibrated", with the way to calibrate): never another model's τ.

    Args:
        session: a τ chosen in this session (the app's "use this τ") and its source sentence.
        file: a threshold file (``--threshold-file``), read by :func:`load_threshold`.
        user_dir: a folder of τ files saved per model (:func:`user_threshold_path`).
        mode: the τ setting (:data:`TAU_LENGTH` or :data:`TAU_PAPER`, :meth:`Threshold.for_mode`).

    Raises:
        ValueError: an unknown ``mode``; a session τ or file of another model or a bad file (the message says
            which).
    """
    if mode not in TAU_MODES:
        raise ValueError(f"unknown τ setting {mode!r}; choose one of {', '.join(TAU_MODES)}")
    if session is not None:
        threshold, source = session
        check_model(threshold, model_name)
        return TauInForce(threshold.for_mode(mode), source or "set in this session", ORIGIN_SESSION)
    if file is not None:
        th = load_threshold(file, model_name).for_mode(mode)
        return TauInForce(th, f"from {file}", ORIGIN_FILE)
    if user_dir is not None:
        path = user_threshold_path(user_dir, model_name)
        if path.is_file():
            th = load_threshold(path, model_name).for_mode(mode)
            return TauInForce(th, f"calibrated by you ({path.name}; {describe_mode(th)})", ORIGIN_USER)
    if model_name == EMBEDDED_NAME and EMBEDDED_THRESHOLD.is_file():
        th = artifacts.read(BUNDLED_TAU, EMBEDDED_THRESHOLD).for_mode(mode)
        return TauInForce(
            th, f"bundled calibration: {describe_mode(th)} over {th.n_clean} clean prompts", ORIGIN_BUNDLED
        )
    own = calibrated_tau(model_name)
    if own is not None:
        th, path = own
        return TauInForce(
            th.for_mode(mode),
            f"calibrated for this model by calibrate-model: {describe_mode(th)} over {th.n_clean} read rows",
            ORIGIN_CALIBRATED,
        )
    how = HOW_TO_CALIBRATE_TAU.replace("<this model>", repr(model_name))
    return TauInForce(None, f"not calibrated for this model: no τ (calibrate it: {how})", ORIGIN_NONE)


def calibrated_tau(model_name: str) -> tuple[Threshold, Path] | None:
    """The newest τ ``calibrate-model`` stored for ``model_name`` (:func:`core.model.calibration_store.files_named`)
    and its path, or ``None``; unreadable files and files of another model are skipped."""
    from core.model import calibration_store

    for path in calibration_store.files_named(model_name, calibration_store.TAU_FILE):
        try:
            th = artifacts.read(BUNDLED_TAU, path)
            check_model(th, model_name)
        except (OSError, ValueError) as exc:
            logging.getLogger(__name__).warning("Ignoring the calibrated τ %s: %s", path, exc)
            continue
        return th, path
    return None


BUNDLED_TAU = artifacts.ArtifactKind(
    name="repcs-tau",
    read=lambda path: Threshold.load(path),
    bundled=lambda slug, variant: EMBEDDED_THRESHOLD,
)
"""A τ file: the embedded model's bundled one, or a model's own in its calibration folder (read once per
modification time by the artifact store)."""


def threshold_for(
    model_name: str, user_dir: Path | None = None, mode: str = DEFAULT_TAU_MODE
) -> tuple[Threshold | None, str]:
    """``(threshold, source)`` of :func:`resolve_tau` without a session τ or a file (the model's default τ)."""
    return resolve_tau(model_name, user_dir=user_dir, mode=mode).pair()


def tau_in_force(
    model_name: str,
    threshold: Threshold | None = None,
    source: str | None = None,
    *,
    mode: str = DEFAULT_TAU_MODE,
) -> tuple[Threshold | None, str]:
    """The one meaning of an unset τ: every caller that may be given no τ (the engine's runs, ``evaluate``, the
    CLI, the Evaluate page) asks here.

    A given ``threshold`` is applied as the τ setting ``mode`` applies it (:meth:`Threshold.for_mode`; the
    default, length-aware setting leaves it as it is), with ``source`` (else ``"given"``). An unset one is the
    model's default τ in force under ``mode`` (:func:`threshold_for`: the bundled τ of the embedded model, a
    model's own from ``calibrate-model``, or none).

    Raises:
        ValueError: an unknown ``mode``.
    """
    if mode not in TAU_MODES:
        raise ValueError(f"unknown τ setting {mode!r}; choose one of {', '.join(TAU_MODES)}")
    if threshold is not None:
        return threshold.for_mode(mode), source or "given"
    default, default_source = threshold_for(model_name, mode=mode)
    return default, source or default_source
