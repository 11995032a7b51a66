"""The session's RePCS threshold τ: "use this τ" on the Evaluate page sets it for the whole app.

Order of precedence in :func:`active_threshold`:

1. a τ the user chose in this browser session (``st.session_state``, per model name), e.g. calibrated on the
   Evaluate page;
2. :func:`core.methods.repcs.threshold_for` — the bundled calibration of the embedded model, or its labeled
   fallback.

The shared live run (:func:`components.widgets.run_live`) passes ``active_threshold(handle.info.name)`` to
``run_dual_path``, and the session's τ is part of the result cache key, so every page applies the same τ.

How τ is applied is the session's τ setting (:func:`tau_mode`, the persistent value :data:`keys.TAU_MODE`,
chosen on the Evaluate page): ``"length"`` (default) applies τ(L) with the inconclusive band, ``"paper"`` the
paper's one constant τ (:meth:`core.methods.repcs.Threshold.for_mode`). It is part of the cache key too.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import streamlit as st

from components import keys
from core.methods.repcs import DEFAULT_TAU_MODE, TAU_MODES, Threshold, threshold_for


def _store() -> dict[str, dict[str, Any]]:
    if keys.THRESHOLDS not in st.session_state:
        st.session_state[keys.THRESHOLDS] = {}
    return st.session_state[keys.THRESHOLDS]


def set_active_threshold(model_name: str, threshold: Threshold, source: str) -> None:
    """Use ``threshold`` for ``model_name`` for the rest of this session (a JSON-ready copy is stored)."""
    _store()[model_name] = {"threshold": asdict(threshold), "source": source}


def clear_active_threshold(model_name: str) -> None:
    """Forget the session's τ for ``model_name`` (back to the bundled/default one)."""
    _store().pop(model_name, None)


def session_thresholds() -> dict[str, Any]:
    """Every τ set in this session, by model name, and the τ setting under :data:`keys.TAU_MODE` (JSON-ready;
    part of the result cache key)."""
    return {**st.session_state.get(keys.THRESHOLDS, {}), keys.TAU_MODE: tau_mode()}


def tau_mode() -> str:
    """The session's τ setting: ``"length"`` (τ(L) with the inconclusive band, the default) or ``"paper"``."""
    mode = st.session_state.get(keys.store_key(keys.TAU_MODE), DEFAULT_TAU_MODE)
    return mode if mode in TAU_MODES else DEFAULT_TAU_MODE


def session_threshold(model_name: str) -> tuple[Threshold | None, str | None]:
    """The τ set in this session for ``model_name`` and its source sentence, or ``(None, None)``."""
    entry = _store().get(model_name)
    if not entry:
        return None, None
    return Threshold.from_dict(entry["threshold"]), str(entry["source"])


def active_threshold(model_name: str) -> tuple[Threshold | None, str]:
    """The τ in force for ``model_name``, as the session's τ setting applies it, and where it came from."""
    threshold, source = session_threshold(model_name)
    if threshold is not None:
        return threshold.for_mode(tau_mode()), source or "set in this session"
    return threshold_for(model_name, mode=tau_mode())
