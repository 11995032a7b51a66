"""The last run's inputs and settings in the page's URL, so a reload or a shared link restores them.

Streamlit keeps a session's state only while its browser tab is connected: a reload starts a new session. So
every page run writes the last dual-path run's query, context and run settings to ``st.query_params``
(:func:`sync`), and the first page run of a new session reads them back into the shared inputs and the sidebar
settings (:func:`restore`) before any widget is drawn. Nothing runs by itself: the restored inputs wait for
the user's **Run** — unless this server process already ran them: every synced run is also kept in a small
process-wide cache keyed by the model and the inputs and settings (:func:`run_key`; a greedy run is the same
for everyone who asks it), and :func:`restore_result` puts that run back into the new session, so a reload
shows the result again. When the restored inputs are a bundled example's, the example is picked again too (with
its "what to expect" box).

Parameters: ``q`` (query), ``c`` (context), ``T`` (score window), ``n`` (max new tokens), ``tpl`` (template),
``k`` (top-k), ``split`` (early/late split), ``m`` and ``rev`` (the model chosen in the sidebar — its ``--model``
value and hub revision — written on every page run, with or without a run, so a reload keeps the model).
Values are checked by :class:`~core.engine.DualPathSettings`; a bad value is ignored (the default stays), never an
error. Texts longer than :data:`MAX_URL_TEXT` characters in all are left out of the URL (browsers and servers limit
URL length), and the page says so.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import streamlit as st

from components import keys, state
from core.examples import load_examples

if TYPE_CHECKING:
    from core.engine import DualPathSettings
    from core.engine.result import DualPathResult
    from core.model.handle import ModelHandle


def _settings_class() -> type[DualPathSettings]:
    """:class:`~core.engine.DualPathSettings`, imported where a setting is checked: :func:`restore` of a link
    without settings runs before a page imports the engine, so that its inputs come first."""
    from core.engine import DualPathSettings

    return DualPathSettings


QUERY, CONTEXT = "q", "c"
MODEL, REVISION = "m", "rev"
"""The sidebar's model (its spec: a hub id, a folder, a GGUF file or a packaged shortcut) and hub revision; absent
for the embedded model."""
SETTINGS = {"T": "score_window", "n": "max_new_tokens", "tpl": "template", "k": "top_k", "split": "kl_split"}
"""URL parameter → :class:`DualPathSettings` field (the persistent value of the same name in the sidebar)."""
MAX_URL_TEXT = 6000
"""Most characters of query + context written to the URL."""
SHARED_RUNS = 64
"""Most runs the process-wide cache behind a reload keeps (the least recently used go first)."""


class SharedRuns:
    """A small thread-safe LRU of dual-path results shared by every session of this server process."""

    def __init__(self, most: int = SHARED_RUNS) -> None:
        self._most = most
        self._runs: OrderedDict[str, DualPathResult] = OrderedDict()
        self._lock = threading.Lock()  # a bookkeeping lock: it never wraps a model call

    def get(self, key: str) -> DualPathResult | None:
        with self._lock:
            result = self._runs.get(key)
            if result is not None:
                self._runs.move_to_end(key)
            return result

    def put(self, key: str, result: DualPathResult) -> None:
        with self._lock:
            self._runs[key] = result
            self._runs.move_to_end(key)
            while len(self._runs) > self._most:
                self._runs.popitem(last=False)


@st.cache_resource(show_spinner=False)
def shared_runs() -> SharedRuns:
    """The process-wide cache behind a reload (one per server process)."""
    return SharedRuns()


def run_key(model: str, query: str, context: str, settings: dict[str, Any]) -> str:
    """The shared cache's key: the model's name, the stripped inputs and every run setting."""
    checked = _settings_class().from_dict(settings).to_dict()
    return json.dumps([model, query.strip(), context.strip(), checked], sort_keys=True, ensure_ascii=False, default=str)


def _setting(field: str, raw: str) -> Any:
    """A setting from its URL text, checked; ``None`` when it is not valid."""
    from core.model.prompts import TEMPLATE_CHOICES

    try:
        value: Any = raw if field == "template" else int(raw)
        if field == "template" and value not in TEMPLATE_CHOICES:
            return None
        _settings_class()(**{field: value}).validate()
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
        _pick_example(query or "", context or "")
        st.session_state[keys.URL_RESULT_PENDING] = True
        restored = True
    for name, field in SETTINGS.items():
        raw = params.get(name)
        value = None if raw is None else _setting(field, raw)
        if value is not None:
            state.set_stored(field, value)
            restored = True
    return _restore_model(params.get(MODEL), params.get(REVISION)) or restored


def _restore_model(spec: str | None, revision: str | None) -> bool:
    """Put the URL's model into the sidebar's persistent values (the model picker reads them when drawn)."""
    spec = (spec or "").strip()
    if not spec or len(spec) > 1000:
        return False
    from core.model.loading import EMBEDDED_MODEL
    from core.public import current_policy

    if spec == EMBEDDED_MODEL:
        state.set_stored(keys.MODEL_CHOICE, EMBEDDED_MODEL)
        return True
    if current_policy().public:  # the public picker's choice is the allow-listed id itself (checked when drawn)
        state.set_stored(keys.MODEL_CHOICE, spec)
        return True
    state.set_stored(keys.MODEL_CHOICE, "custom")
    state.set_stored(keys.MODEL_ID, spec)
    state.set_stored(keys.MODEL_REVISION, (revision or "").strip())
    return True


def model_params(config: state.AppConfig) -> dict[str, str]:
    """The URL parameters of the sidebar's model (none for the embedded model)."""
    from core.model.loading import EMBEDDED_MODEL

    if config.model_spec == EMBEDDED_MODEL:
        return {}
    return {MODEL: config.model_spec, **({REVISION: config.revision} if config.revision else {})}


def _pick_example(query: str, context: str) -> None:
    """Pick the bundled example whose query and context these are (nothing when none is, or they cannot be
    read)."""
    try:
        found = [e for e in load_examples() if (e.query.strip(), e.context.strip()) == (query.strip(), context.strip())]
    except (OSError, ValueError):
        return
    if found:
        state.set_stored(keys.EXAMPLE, found[0].id)


def restore_result(config: state.AppConfig, handle: ModelHandle) -> bool:
    """After a restore from the URL, put this server's stored run of the restored inputs and settings (on the
    model now selected) into the session, as if it had run here. Returns whether a run was found."""
    if not st.session_state.pop(keys.URL_RESULT_PENDING, False):
        return False
    query, context = state.current_inputs()
    found = shared_runs().get(run_key(handle.info.name, query, context, config.settings.to_dict()))
    if found is None or found.model != handle.info.name:
        return False
    state.store_result(config, query, context, found)
    return True


def desired(query: str, context: str, settings: dict[str, Any]) -> dict[str, str]:
    """The URL parameters for a run (texts left out when longer than :data:`MAX_URL_TEXT` in all)."""
    out: dict[str, str] = {}
    if len(query) + len(context) <= MAX_URL_TEXT:
        out[QUERY], out[CONTEXT] = query, context
    defaults = dataclasses.asdict(_settings_class()())
    for name, field in SETTINGS.items():
        if field in settings and settings[field] != defaults.get(field):
            out[name] = str(settings[field])
    return out


def sync(config: state.AppConfig | None = None) -> None:
    """Write the last run's inputs and settings, and the sidebar's model of ``config``, to the URL (only when they
    differ from what it holds). Without a run the URL's other parameters stay as they are (a restored link that
    has not been run yet keeps its texts)."""
    held = st.query_params.to_dict()
    model = {k: v for k, v in held.items() if k in (MODEL, REVISION)} if config is None else model_params(config)
    result = state.current_result()
    if result is None:
        if config is None:
            return
        kept = {k: v for k, v in held.items() if k not in (MODEL, REVISION)}
        wanted = {**kept, **model}
    else:
        shared_runs().put(run_key(result.model, result.query, result.context, result.settings), result)
        wanted = {**desired(result.query, result.context, result.settings), **model}
        if QUERY not in wanted:
            st.caption("The last run's texts are too long for the page's link: a reload keeps only its settings.")
    if held != wanted:
        st.query_params.from_dict(wanted)
