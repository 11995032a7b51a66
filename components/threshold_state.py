"""The session's RePCS threshold τ: "use this τ" on the Evaluate page sets it for the whole app.

Which τ is in force is :func:`core.engine.tau_resolution.resolve_tau` (the one resolver, the CLI's too): the τ
the user chose in this browser session (``st.session_state``, per model name), else the τ of the model's
calibration record (the embedded model's bundled one, or the model's own from ``calibrate-model``: by its identity
and template, :mod:`core.engine.calibration_record`), else none. :func:`active_threshold` asks it with this
session's τ; :func:`in_force` with the record that decided the stored run.

**One τ in force, everywhere, at every moment.** A stored run is never shown with the τ it was run with when
another is in force now: :func:`in_force` re-decides its verdict from the Z and L it already holds
(:func:`core.engine.scoring.rejudge`, no model call), and every stored run the pages read goes through it
(:mod:`components.state`). So changing τ — on the Evaluate page, or the τ setting — changes the verdict at
once, without a new run, and the τ is not part of a run's cache key.

How τ is applied is the session's τ setting (:func:`tau_mode`, the persistent value :data:`keys.TAU_MODE`,
chosen on the Evaluate page): ``"length"`` (default) applies τ(L) with the inconclusive band, ``"paper"`` the
paper's one constant τ (:meth:`core.engine.threshold.Threshold.for_mode`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict

import streamlit as st

from components import keys
from core.engine.calibration_record import ModelCalibration, record_of_result
from core.engine.result import DualPathResult
from core.engine.scoring import rejudge
from core.engine.tau_resolution import resolve_tau
from core.engine.threshold import DEFAULT_TAU_MODE, TAU_MODES, Threshold, check_model

logger = logging.getLogger(__name__)


def _store() -> dict[str, dict]:
    if keys.THRESHOLDS not in st.session_state:
        st.session_state[keys.THRESHOLDS] = {}
    return st.session_state[keys.THRESHOLDS]


def set_active_threshold(model_name: str, threshold: Threshold, source: str) -> None:
    """Use ``threshold`` for ``model_name`` for the rest of this session (a JSON-ready copy is stored).

    Raises:
        ValueError: the τ was calibrated for another model (:func:`core.engine.threshold.check_model`).
    """
    check_model(threshold, model_name)
    _store()[model_name] = {"threshold": asdict(threshold), "source": source}


def clear_active_threshold(model_name: str) -> None:
    """Forget the session's τ for ``model_name`` (back to the bundled/default one)."""
    _store().pop(model_name, None)


def tau_mode() -> str:
    """The session's τ setting: ``"length"`` (τ(L) with the inconclusive band, the default) or ``"paper"``."""
    mode = st.session_state.get(keys.store_key(keys.TAU_MODE), DEFAULT_TAU_MODE)
    return mode if mode in TAU_MODES else DEFAULT_TAU_MODE


def session_threshold(model_name: str) -> tuple[Threshold | None, str | None]:
    """The τ set in this session for ``model_name`` and its source sentence, or ``(None, None)``.

    A stored τ that no longer passes the threshold file's checks (:meth:`Threshold.from_dict`: e.g. a τ(L) that
    is 0 or infinite at some length, kept by an older version of the app) is forgotten, with a warning in the
    log, rather than failing every page that asks for the τ in force.
    """
    entry = _store().get(model_name)
    if not entry:
        return None, None
    try:
        return Threshold.from_dict(entry["threshold"]), str(entry["source"])
    except (ValueError, KeyError, TypeError) as exc:
        logger.warning("Forgot the session's τ for %s: it fails the threshold checks (%s)", model_name, exc)
        clear_active_threshold(model_name)
        return None, None


def active_threshold(model_name: str, calibration: ModelCalibration | None = None) -> tuple[Threshold | None, str]:
    """The τ in force for ``model_name``, as the session's τ setting applies it, and where it came from: the
    session's τ, else the τ of ``calibration`` (the model's record; without one, the embedded model's bundled τ or
    none — a run then gets its own record's τ from the engine)."""
    own, source = session_threshold(model_name)
    session = None if own is None else (own, source or "set in this session")
    return resolve_tau(model_name, calibration=calibration, session=session, mode=tau_mode()).pair()


def in_force(result: DualPathResult | None) -> DualPathResult | None:
    """``result`` with its verdict under the τ in force now for its model (itself when that is the τ it has)."""
    if result is None:
        return None
    return rejudge(result, *active_threshold(result.model, record_of_result(result)))
