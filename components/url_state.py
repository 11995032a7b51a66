"""The last run's inputs and settings in the page's URL, so a reload or a shared link restores them.

Streamlit keeps a session's state only while its browser tab is connected: a reload starts a new session. So
every page run writes the last dual-path run's query, context and run settings to ``st.query_params``
(:func:`sync`), and the first page run of a new session reads them back into the shared inputs and the sidebar
settings (:func:`restore`) before any widget is drawn. Nothing runs by itself: the restored inputs wait for
the user's **Run**.

Parameters: ``q`` (query), ``c`` (context), ``T`` (score window), ``n`` (max new tokens), ``tpl`` (template),
``k`` (top-k), ``split`` (early/late split). Values are checked by :class:`~core.engine.DualPathSettings`; a bad
value is ignored (the default stays), never an error. Texts longer than :data:`MAX_URL_TEXT` characters in all
are left out of the URL (browsers and servers limit URL length), and the page says so.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import streamlit as st

from components import keys, state
from core.engine import DualPathSettings
from core.model.prompts import TEMPLATE_CHOICES

QUERY, CONTEXT = "q", "c"
SETTINGS = {"T": "score_window", "n": "max_new_tokens", "tpl": "template", "k": "top_k", "split": "kl_split"}
"""URL parameter → :class:`DualPathSettings` field (the persistent value of the same name in the sidebar)."""
MAX_URL_TEXT = 6000
"""Most characters of query + context written to the URL."""


def _setting(field: str, raw: str) -> Any:
    """A setting from its URL text, checked; ``None`` when it is not valid."""
    try:
        value: Any = raw if field == "template" else int(raw)
        if field == "template" and value not in TEMPLATE_CHOICES:
            return None
        DualPathSettings(**{field: value}).validate()
    except (TypeError, ValueError):
        return None
    return value


def restore() -> bool:
    """On a session's first page run, put the URL's inputs and settings into the shared state (before any widget
    is drawn). Returns whether anything was restored."""
    if st.session_state.get(keys.URL_RESTORED):
        return False
    st.session_state[keys.URL_RESTORED] = True
    params = st.query_params
    restored = False
    query, context = params.get(QUERY), params.get(CONTEXT)
    if (query or context) and not any(state.current_inputs()):
        state.set_inputs(query or "", context or "")
        restored = True
    for name, field in SETTINGS.items():
        raw = params.get(name)
        value = None if raw is None else _setting(field, raw)
        if value is not None:
            state.set_stored(field, value)
            restored = True
    return restored


def desired(query: str, context: str, settings: dict[str, Any]) -> dict[str, str]:
    """The URL parameters for a run (texts left out when longer than :data:`MAX_URL_TEXT` in all)."""
    out: dict[str, str] = {}
    if len(query) + len(context) <= MAX_URL_TEXT:
        out[QUERY], out[CONTEXT] = query, context
    defaults = dataclasses.asdict(DualPathSettings())
    for name, field in SETTINGS.items():
        if field in settings and settings[field] != defaults.get(field):
            out[name] = str(settings[field])
    return out


def sync() -> None:
    """Write the last run's inputs and settings to the URL (only when they differ from what it holds)."""
    result = state.current_result()
    if result is None:
        return
    wanted = desired(result.query, result.context, result.settings)
    if QUERY not in wanted:
        st.caption("The last run's texts are too long for the page's link: a reload keeps only its settings.")
    if st.query_params.to_dict() != wanted:
        st.query_params.from_dict(wanted)
