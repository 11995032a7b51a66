"""Which τ is in force for a run: the one τ resolver (:func:`resolve_tau`) and the one meaning of an unset τ
(:func:`tau_in_force`).

The order: the session's τ (a τ chosen in the app), else a file (``--threshold-file``), else a file saved for this
model in a folder (:func:`user_threshold_path`), else the τ of the model's calibration record
(:class:`core.engine.calibration_record.ModelCalibration`: the embedded model's bundled τ, or the model's own from
``calibrate-model``, found by the model's identity and the resolved template), else none — another model's τ is
never borrowed: the verdict is "uncalibrated", with the way to calibrate. A model's own τ is found only through its
record (resolved once with the handle, :meth:`core.engine.batch.ScoreRequest.resolved`): a name alone finds no
calibration file (the embedded model's bundled τ is its record).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.engine.calibration_record import BUNDLED, CALIBRATE_MODEL, ModelCalibration, embedded_record
from core.engine.threshold import (
    DEFAULT_TAU_MODE,
    TAU_MODES,
    Threshold,
    check_model,
    describe_mode,
    load_threshold,
)
from core.io import model_slug
from core.model import calibration_store
from core.model.loading import EMBEDDED_NAME

ORIGIN_SESSION = "session"
ORIGIN_FILE = "file"
ORIGIN_USER = "user"
ORIGIN_BUNDLED = "bundled"
ORIGIN_CALIBRATED = "calibrated"
ORIGIN_NONE = "none"


def user_threshold_path(user_dir: Path, model_name: str) -> Path:
    """Where a τ saved for ``model_name`` lives in ``user_dir``: ``<model slug>.json``.

    The slug is :func:`core.io.model_slug` of the name alone (a τ you saved is keyed by the model's name, as in
    :attr:`Threshold.model`): ``embedded.json`` for the embedded model, ``<name>-<sha1[:10]>.json`` otherwise.
    """
    slug = model_slug(model_name, "", embedded=model_name == EMBEDDED_NAME)
    return Path(user_dir) / f"{slug}.json"


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


def default_record(model_name: str, calibration: ModelCalibration | None) -> ModelCalibration | None:
    """The record whose τ is the default for ``model_name``: ``calibration`` when given (it must be this model's),
    else the embedded model's bundled record for the embedded model, else none."""
    if calibration is not None:
        return calibration if calibration.model == model_name else None
    return embedded_record() if model_name == EMBEDDED_NAME else None


def record_tau(model_name: str, calibration: ModelCalibration | None, mode: str) -> TauInForce:
    """The τ of the model's calibration record (:func:`default_record`) as ``mode`` applies it, or none."""
    record = default_record(model_name, calibration)
    th = None if record is None or record.tau is None else record.tau.for_mode(mode)  # described as applied
    if th is not None and record is not None and record.origin == BUNDLED:
        return TauInForce(
            th, f"bundled calibration: {describe_mode(th)} over {th.n_clean} clean prompts", ORIGIN_BUNDLED
        )
    if th is not None and record is not None and record.origin == CALIBRATE_MODEL:
        return TauInForce(
            th,
            f"calibrated for this model by calibrate-model: {describe_mode(th)} over {th.n_clean} read rows",
            ORIGIN_CALIBRATED,
        )
    how = calibration_store.calibrate_command(model_name, calibration.source if calibration is not None else "")
    return TauInForce(None, f"not calibrated for this model: no τ (calibrate it: {how})", ORIGIN_NONE)


def resolve_tau(
    model_name: str,
    *,
    calibration: ModelCalibration | None = None,
    session: tuple[Threshold, str] | None = None,
    file: str | Path | None = None,
    user_dir: Path | None = None,
    mode: str = DEFAULT_TAU_MODE,
) -> TauInForce:
    """The τ in force for ``model_name``: session → file → user folder → the model's calibration record (the
    embedded model's bundled τ, or its own from ``calibrate-model``) → none. A model without its own τ gets none
    (its RePCS verdict is "uncalibrated", with the way to calibrate): never another model's τ.

    Args:
        calibration: the model's calibration record (:func:`core.engine.calibration_record.record_for`, resolved
            with the handle); without one only the embedded model has a default τ (its bundled record).
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
    return record_tau(model_name, calibration, mode)


def threshold_for(
    model_name: str,
    user_dir: Path | None = None,
    mode: str = DEFAULT_TAU_MODE,
    *,
    calibration: ModelCalibration | None = None,
) -> tuple[Threshold | None, str]:
    """``(threshold, source)`` of :func:`resolve_tau` without a session τ or a file (the model's default τ)."""
    return resolve_tau(model_name, calibration=calibration, user_dir=user_dir, mode=mode).pair()


def tau_in_force(
    model_name: str,
    threshold: Threshold | None = None,
    source: str | None = None,
    *,
    mode: str = DEFAULT_TAU_MODE,
    calibration: ModelCalibration | None = None,
) -> tuple[Threshold | None, str]:
    """The one meaning of an unset τ: every caller that may be given no τ (the engine's runs, ``evaluate``, the
    CLI, the Evaluate page) asks here.

    A given ``threshold`` is applied as the τ setting ``mode`` applies it (:meth:`Threshold.for_mode`; the
    default, length-aware setting leaves it as it is), with ``source`` (else ``"given"``). An unset one is the
    model's default τ in force under ``mode`` (:func:`threshold_for`: the τ of its calibration record, or none),
    with ``source`` when given, else the default's own sentence.

    Raises:
        ValueError: an unknown ``mode``.
    """
    if mode not in TAU_MODES:
        raise ValueError(f"unknown τ setting {mode!r}; choose one of {', '.join(TAU_MODES)}")
    if threshold is not None:
        return threshold.for_mode(mode), source or "given"
    default, default_source = threshold_for(model_name, mode=mode, calibration=calibration)
    return default, source or default_source
