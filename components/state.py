"""The app's state in ``st.session_state``: persistent widget values, the shared inputs and the result cache.

Nothing here decides what a page looks like: :func:`persistent` draws only the widget its caller passes.
Every key is a constant of :mod:`components.keys`.

* **Persistent values** (stores ``ror.s.<name>``) must survive page switches: the sidebar settings, the
  query and context, each page's controls. Streamlit discards a widget's state when a page that does not
  draw it runs, and treats same-keyed widgets on two pages as different widgets, so every persistent
  widget is drawn through :func:`persistent`: keyed ``ror.w.<name>``, seeded from its store before each
  draw (only when the widget lacks that value: see :func:`seed_widget`), copied back into the store by its
  ``on_change`` callback.
* **Results**: a :func:`~components.lru.session_lru` under ``ror.results`` maps a key made of (model,
  revision, query, context, settings) to a :class:`~core.engine.result.DualPathResult`; ``ror.last`` is the
  key of the most recent one. Re-rendering or switching pages therefore never re-runs the model, and the same
  inputs and settings are never run twice. The τ is not part of the key: every stored run is read through
  :func:`components.threshold_state.in_force`, which re-decides its verdict under the τ in force now.

Changing a stored value (:func:`set_inputs`, :func:`set_stored`) shows in its widget from the widget's next
draw, so do it in ``on_change``/``on_click`` callbacks (which run before the page) or before the widget.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from components import keys
from components.lru import SessionLRU, session_lru

if TYPE_CHECKING:  # the engine (PyTorch) is imported by a result's first use, not by a page's inputs
    from core.engine import DualPathSettings
    from core.engine.result import DualPathResult

MAX_CACHED_RESULTS = 24
"""Dual-path results kept per browser session (each is a few kB to a few hundred kB)."""


@dataclass(frozen=True)
class AppConfig:
    """What the shared sidebar selected.

    Attributes:
        model_spec: ``"embedded"``, a Hugging Face model id or a local folder
            (see :func:`core.model.loading.load_model`).
        revision: the hub revision for a model id, or ``None``.
        settings: the :class:`~core.engine.dual_path.DualPathSettings` of the next run.
    """

    model_spec: str
    revision: str | None
    settings: DualPathSettings

    @property
    def model_key(self) -> str:
        """A short string naming the model and revision (used in cache keys)."""
        return self.model_spec + (f"@{self.revision}" if self.revision else "")


# ----------------------------------------------------------------------------------------------------------
# Persistent widget values


def persistent(widget: Callable[..., Any], label: str, name: str, default: Any, **kwargs: Any) -> Any:
    """Draw ``widget(label, ...)`` bound to the persistent value ``name`` and return its value.

    The value lives in a store that survives page switches; the widget (key ``ror.w.<name>``) is seeded from
    it before every draw and copies changes back in its ``on_change`` callback (a caller's own ``on_change``,
    ``args`` and ``kwargs`` still run after that). Do not pass ``value=``/``index=``: ``default`` is used
    the first time.

    Example::

        top_k = state.persistent(st.slider, "Top-k", keys.TOP_K, 10, min_value=1, max_value=50)
    """
    store, key = keys.store_key(name), keys.widget_key(name)
    if store not in st.session_state:
        st.session_state[store] = default
    # Streamlit forgets a widget's state on a page that does not draw it, and a widget with the same key on
    # another page is a different widget: re-seeding from the store keeps one value across pages.
    identity = (getattr(widget, "__name__", ""), label, _stable(kwargs))
    seed_widget(key, st.session_state[store], identity=identity)
    user_callback = kwargs.pop("on_change", None)
    user_args = tuple(kwargs.pop("args", None) or ())
    user_kwargs = dict(kwargs.pop("kwargs", None) or {})

    def _keep() -> None:
        st.session_state[store] = st.session_state.get(key)
        if callable(user_callback):
            user_callback(*user_args, **user_kwargs)

    value = widget(label, key=key, on_change=_keep, **kwargs)
    mark_drawn(key, identity=identity)
    return value


def seed_widget(key: str, value: Any, *, identity: object = None) -> None:
    """Give the widget ``key`` this value from its next draw, unless it already holds it.

    Assigning a widget's key in ``st.session_state`` makes Streamlit push the value to the browser on the
    next draw, over whatever the user is typing there and has not yet committed: a slow rerun triggered by
    another widget would wipe it. So the value is assigned only when it may differ from what the widget
    shows: the key has no state, holds another value (set by a callback, an example, a click elsewhere), or
    the widget may be a new one. Streamlit gives a widget a new identity on another page and, for most
    widgets, when its parameters change; ``identity`` names those parameters (e.g. a range that depends on
    the model), and the page is added here. Call :func:`mark_drawn` once the widget is drawn.
    """
    drawn = st.session_state.get(keys.DRAWN, {})
    token = repr((_page_token(), identity))
    run = run_number()
    # A widget the previous script run did not draw (it stopped early, e.g. on a model that failed to load) is
    # gone from the browser, which re-creates it empty unless the value is pushed again (issue 14).
    drawn_lately = drawn.get(key) in ((token, run - 1), (token, run))
    if drawn_lately and key in st.session_state and _same(st.session_state[key], value):
        return
    st.session_state[key] = value


def mark_drawn(key: str, *, identity: object = None) -> None:
    """Record that the widget ``key`` was drawn with this ``identity`` on this page in this script run."""
    st.session_state.setdefault(keys.DRAWN, {})[key] = (repr((_page_token(), identity)), run_number())


def begin_run() -> None:
    """Count a script run of this session (:func:`components.page.open_page` calls it once per run)."""
    st.session_state[keys.RUN_NUMBER] = run_number() + 1


def run_number() -> int:
    """This session's script runs so far (0 before :func:`begin_run` is first called)."""
    return int(st.session_state.get(keys.RUN_NUMBER, 0))


def stored(name: str, default: Any = None) -> Any:
    """The stored value of a persistent widget (whether or not the widget is drawn on this page)."""
    return st.session_state.get(keys.store_key(name), default)


def set_stored(name: str, value: Any) -> None:
    """Set a persistent value. Widgets show it from their next draw (call it in a callback to see it now)."""
    st.session_state[keys.store_key(name)] = value


def _page_token() -> str:
    ctx = get_script_run_ctx()
    return str(getattr(ctx, "page_script_hash", "")) if ctx is not None else ""


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - values that cannot be compared are treated as different
        return False


def _stable(value: Any) -> Any:
    """A repr-stable stand-in for widget parameters (callables by name, not address)."""
    if callable(value):
        return getattr(value, "__qualname__", type(value).__name__)
    if isinstance(value, dict):
        return sorted((str(k), _stable(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    return value


# ----------------------------------------------------------------------------------------------------------
# The shared inputs


def current_inputs() -> tuple[str, str]:
    """The current (query, context), as last typed or picked on any page."""
    return str(stored(keys.QUERY, "") or ""), str(stored(keys.CONTEXT, "") or "")


def set_inputs(query: str, context: str) -> None:
    """Replace the shared query and context (the boxes show them from their next draw: call this in a
    callback, or before :func:`components.inputs.query_and_context` in the script)."""
    set_stored(keys.QUERY, query)
    set_stored(keys.CONTEXT, context)


# ----------------------------------------------------------------------------------------------------------
# Dual-path results


def in_force(result: DualPathResult | None) -> DualPathResult | None:
    """:func:`components.threshold_state.in_force`, imported at a stored run's first read: this module stays
    light (Streamlit only), so a page draws its inputs before it imports the engine (:mod:`components.early`)."""
    from components.threshold_state import in_force as rejudged

    return rejudged(result)


def results() -> SessionLRU[DualPathResult]:
    """The session's dual-path results (an LRU of :data:`MAX_CACHED_RESULTS`; current = the latest)."""
    return session_lru(keys.RESULTS, MAX_CACHED_RESULTS, current=keys.LAST_RESULT)


def request_key(config: AppConfig, query: str, context: str) -> str:
    """The cache key of a run: model, revision, (stripped) inputs and every setting (not the τ: a stored run is
    re-decided under the τ in force when it is read, :func:`components.threshold_state.in_force`)."""
    return json.dumps(
        [
            config.model_spec,
            config.revision,
            query.strip(),
            context.strip(),
            config.settings.to_dict(),
        ],
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )


def cached_result(config: AppConfig, query: str, context: str) -> DualPathResult | None:
    """The stored result for exactly these inputs and settings, if this session has one."""
    return in_force(results().get(request_key(config, query, context)))


def store_result(config: AppConfig, query: str, context: str, result: DualPathResult) -> None:
    """Keep a result for these inputs and settings and make it the current one."""
    cache = results()
    key = request_key(config, query, context)
    cache.put(key, result)
    cache.set_current(key)


def current_result() -> DualPathResult | None:
    """The most recent result of this session (whatever the current inputs are)."""
    return in_force(results().current())


def select_result(config: AppConfig, query: str, context: str) -> DualPathResult | None:
    """The stored result for these inputs and settings (made current), else the most recent one."""
    cache = results()
    key = request_key(config, query, context)
    result = cache.get(key)
    if result is not None:
        cache.set_current(key)
        return in_force(result)
    return in_force(cache.current())


def is_current(config: AppConfig, query: str, context: str) -> bool:
    """Whether :func:`current_result` belongs to these inputs and settings."""
    return results().is_current(request_key(config, query, context))


def request_run() -> None:
    """Ask the next Dual Path page run to start a run with the current inputs (e.g. before switch_page)."""
    st.session_state[keys.RUN_REQUEST] = True


def pop_run_request() -> bool:
    """Whether a run was requested (clears the request)."""
    return bool(st.session_state.pop(keys.RUN_REQUEST, False))
