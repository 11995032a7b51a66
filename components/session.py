"""Shared glue for every page: sidebar, model handle, inputs, result cache and the live dual-path run.

How a page uses it::

    st.set_page_config(page_title="Read or Recall", layout="wide")
    config = session.sidebar()                       # model + settings, identical on every page
    handle = session.get_handle(config.model_spec, config.revision)
    query = session.input_area("query", "Query")     # the shared inputs, kept across pages
    top_k = session.persistent(st.slider, "Top-k", "my_page.top_k", 10, min_value=1, max_value=50)
    ...
    result = session.select_result(config, query, context)  # stored for these inputs, else the latest

State model (all in ``st.session_state``, under keys starting with ``ror.``):

* **Stores** (``ror.s.<name>``) hold the values that must survive page switches: the sidebar settings and
  the query/context. Streamlit discards a widget's state when a page that does not draw it runs, and treats
  same-keyed widgets on two pages as different widgets, so every persistent widget is drawn through
  :func:`persistent`: keyed ``ror.w.<name>``, seeded from its store before each draw (only when the
  widget lacks that value: see :func:`seed_widget`), copied back into the store by its ``on_change`` callback.
* **Results**: ``ror.results`` maps a key made of (model, revision, query, context, settings) to a
  :class:`~core.result.DualPathResult`; ``ror.last`` is the key of the most recent one. Re-rendering or
  switching pages therefore never re-runs the model; the same inputs and settings are never run twice.

Changing a stored value (:func:`set_inputs`, :func:`set_stored`) shows in its widget from the widget's next
draw, so do it in ``on_change``/``on_click`` callbacks (which run before the page) or before the widget.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from components.text import escape_markdown
from components.threshold_state import active_threshold, session_thresholds
from core.engine.dual_path import (
    PARAMETRIC,
    RETRIEVAL,
    SCORING,
    DualPathSettings,
    StreamEvent,
    prepare_prompts,
    run_dual_path,
)
from core.model.loading import EMBEDDED_MODEL, EMBEDDED_NAME, ModelHandle, ModelLoadError, load_model
from core.model.prompts import TEMPLATE_CHOICES, TEMPLATES
from core.engine.result import DualPathResult

logger = logging.getLogger(__name__)

APP_TITLE = "Read or Recall"
RETRIEVAL_TITLE = "Retrieval path (query + context)"
PARAMETRIC_TITLE = "Parametric path (query only)"
MAX_CACHED_RESULTS = 24
"""Results kept per browser session (each is a few kB to a few hundred kB)."""

_DEFAULTS = DualPathSettings()
CUSTOM_MODEL = "custom"
_MODEL_CHOICES = {EMBEDDED_MODEL: f"Embedded: {EMBEDDED_NAME.split(' (')[0]} (offline)", CUSTOM_MODEL: "Another model"}

_STORE = "ror.s."
_WIDGET = "ror.w."
_RESULTS = "ror.results"
_LAST = "ror.last"
_RUN_REQUEST = "ror.run_request"
_DRAWN = "ror.drawn"


@dataclass(frozen=True)
class AppConfig:
    """What the shared sidebar selected.

    Attributes:
        model_spec: ``"embedded"``, a Hugging Face model id or a local folder (see ``core.models.load_model``).
        revision: the hub revision for a model id, or ``None``.
        settings: the :class:`~core.engine.DualPathSettings` of the next run.
    """

    model_spec: str
    revision: str | None
    settings: DualPathSettings

    @property
    def model_key(self) -> str:
        """A short string naming the model and revision (used in cache keys)."""
        return self.model_spec + (f"@{self.revision}" if self.revision else "")


# ----------------------------------------------------------------------------------------------------------
# Persistent widgets


def persistent(widget: Callable[..., Any], label: str, name: str, default: Any, **kwargs: Any) -> Any:
    """Draw ``widget(label, ...)`` bound to the persistent value ``name`` and return its value.

    The value lives in a store that survives page switches; the widget (key ``ror.w.<name>``) is seeded from
    it before every draw and copies changes back in its ``on_change`` callback (a caller's own ``on_change``,
    ``args`` and ``kwargs`` still run after that). Do not pass ``value=``/``index=``: ``default`` is used
    the first time.

    Example::

        top_k = session.persistent(st.slider, "Top-k", "top_k", 10, min_value=1, max_value=50)
    """
    store, key = _STORE + name, _WIDGET + name
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
    drawn = st.session_state.get(_DRAWN, {})
    token = repr((_page_token(), identity))
    if drawn.get(key) == token and key in st.session_state and _same(st.session_state[key], value):
        return
    st.session_state[key] = value


def mark_drawn(key: str, *, identity: object = None) -> None:
    """Record that the widget ``key`` was drawn with this ``identity`` on this page (after drawing it)."""
    st.session_state.setdefault(_DRAWN, {})[key] = repr((_page_token(), identity))


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


def stored(name: str, default: Any = None) -> Any:
    """The stored value of a persistent widget (whether or not the widget is drawn on this page)."""
    return st.session_state.get(_STORE + name, default)


def set_stored(name: str, value: Any) -> None:
    """Set a persistent value. Widgets show it from their next draw (call it in a callback to see it now)."""
    st.session_state[_STORE + name] = value


# ----------------------------------------------------------------------------------------------------------
# Sidebar and model


def sidebar() -> AppConfig:
    """Draw the shared sidebar (model picker and run settings) and return what it selects."""
    with st.sidebar:
        st.header("Model")
        choice = persistent(
            st.radio,
            "Model",
            "model_choice",
            EMBEDDED_MODEL,
            options=list(_MODEL_CHOICES),
            format_func=_MODEL_CHOICES.__getitem__,
            label_visibility="collapsed",
        )
        spec, revision = EMBEDDED_MODEL, None
        if choice == CUSTOM_MODEL:
            model_id = persistent(
                st.text_input,
                "Hugging Face model id or local folder",
                "model_id",
                "",
                placeholder="e.g. HuggingFaceTB/SmolLM2-360M-Instruct or /models/my-llm",
                help="Any causal language model with safetensors weights; remote code is never run.",
            )
            rev = persistent(
                st.text_input,
                "Revision (optional)",
                "model_revision",
                "",
                placeholder="branch, tag or commit",
                help="Pin a hub revision for reproducible results. Ignored for local folders.",
            )
            if model_id.strip():
                spec, revision = model_id.strip(), (rev.strip() or None)
            else:
                st.warning("Enter a model id or folder. Until then the embedded model is used.")

        st.header("Settings")
        score_window = persistent(
            st.number_input,
            "Score window T (answer tokens)",
            "score_window",
            _DEFAULTS.score_window,
            min_value=1,
            max_value=4096,
            step=8,
            help="RePCS sums KL over the first T answer tokens: Z = Σ_{t<T} KL_t.",
        )
        max_new_tokens = persistent(
            st.number_input,
            "Max new tokens per answer",
            "max_new_tokens",
            _DEFAULTS.max_new_tokens,
            min_value=1,
            max_value=1024,
            step=8,
            help="Greedy decoding stops at end-of-sequence or after this many tokens.",
        )
        template = persistent(
            st.selectbox,
            "Prompt template",
            "template",
            _DEFAULTS.template,
            options=list(TEMPLATE_CHOICES),
            format_func=template_label,
            help="Both paths use the same template; the parametric prompt only leaves the context out.",
        )
        top_k = persistent(st.slider, "Top-k candidates shown", "top_k", _DEFAULTS.top_k, min_value=1, max_value=50)
        kl_split = persistent(
            st.number_input,
            "Early/late split (tokens)",
            "kl_split",
            _DEFAULTS.kl_split,
            min_value=1,
            max_value=4096,
            step=4,
            help="CRM level-2 statistics compare the mean KL of the first tokens with the rest.",
        )
    settings = DualPathSettings(
        max_new_tokens=int(max_new_tokens),
        score_window=int(score_window),
        top_k=int(top_k),
        template=str(template),
        kl_split=int(kl_split),
    )
    return AppConfig(model_spec=spec, revision=revision, settings=settings)


def template_label(key: str) -> str:
    """Readable label of a template choice (``auto`` included)."""
    if key == "auto":
        return "Auto: chat template if any, else A"
    return TEMPLATES[key].label


@st.cache_resource(show_spinner="Loading the model (the first load of the embedded model converts it once)…")
def _load_handle(spec: str, revision: str | None) -> ModelHandle:
    """One :class:`ModelHandle` per (model, revision), shared by every session (errors are not cached)."""
    return load_model(spec, revision=revision)


def get_handle(spec: str, revision: str | None = None) -> ModelHandle:
    """The shared handle for a model; on failure shows the loader's message and stops the page."""
    try:
        return _load_handle(spec, revision)
    except ModelLoadError as exc:
        st.error("Could not load the model. " + escape_markdown(str(exc)))
        st.stop()
        raise  # unreachable: st.stop() raises; keeps type checkers satisfied


def draw_model_facts(handle: ModelHandle) -> None:
    """A compact description of the loaded model at the bottom of the sidebar."""
    info = handle.info
    with st.sidebar:
        st.caption("Loaded model")
        st.text(info.name)
        st.caption(
            f"{info.n_layers} layers · {info.n_heads} heads · vocabulary {info.vocab_size:,} · "
            f"{info.device} / {info.dtype} · up to {info.max_tokens:,} tokens"
        )


# ----------------------------------------------------------------------------------------------------------
# Shared inputs


def current_inputs() -> tuple[str, str]:
    """The current (query, context), as last typed or picked on any page."""
    return str(stored("query", "") or ""), str(stored("context", "") or "")


def set_inputs(query: str, context: str) -> None:
    """Replace the shared query and context (the boxes show them from their next draw: call this in a
    callback, or before :func:`input_area` in the script)."""
    set_stored("query", query)
    set_stored("context", context)


def input_area(name: str, label: str, **kwargs: Any) -> str:
    """A text area bound to the shared input ``name`` (``"query"`` or ``"context"``)."""
    return str(persistent(st.text_area, label, name, "", **kwargs) or "")


# ----------------------------------------------------------------------------------------------------------
# Results


def result_key(config: AppConfig, query: str, context: str) -> str:
    """The cache key of a run: model, revision, (stripped) inputs, every setting and the session's τ
    (choosing a τ on the Evaluate page gives new verdicts; going back to the default finds the old ones)."""
    return json.dumps(
        [config.model_spec, config.revision, query.strip(), context.strip(), config.settings.to_dict(),
         session_thresholds()],
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )


def _results() -> dict[str, DualPathResult]:
    if _RESULTS not in st.session_state:
        st.session_state[_RESULTS] = {}
    return st.session_state[_RESULTS]


def cached_result(config: AppConfig, query: str, context: str) -> DualPathResult | None:
    """The stored result for exactly these inputs and settings, if this session has one."""
    return _results().get(result_key(config, query, context))


def store_result(config: AppConfig, query: str, context: str, result: DualPathResult) -> None:
    """Keep a result for these inputs and settings and make it the current one."""
    results = _results()
    key = result_key(config, query, context)
    results.pop(key, None)
    results[key] = result
    while len(results) > MAX_CACHED_RESULTS:
        results.pop(next(iter(results)))
    st.session_state[_LAST] = key


def current_result() -> DualPathResult | None:
    """The most recent result of this session (whatever the current inputs are)."""
    return _results().get(st.session_state.get(_LAST, ""))


def select_result(config: AppConfig, query: str, context: str) -> DualPathResult | None:
    """The stored result for these inputs and settings (made current), else the most recent one."""
    result = cached_result(config, query, context)
    if result is not None:
        st.session_state[_LAST] = result_key(config, query, context)
        return result
    return current_result()


def is_current(config: AppConfig, query: str, context: str) -> bool:
    """Whether :func:`current_result` belongs to these inputs and settings."""
    return st.session_state.get(_LAST) == result_key(config, query, context)


def request_run() -> None:
    """Ask the next dual-path page run to start a run with the current inputs (e.g. before switch_page)."""
    st.session_state[_RUN_REQUEST] = True


def pop_run_request() -> bool:
    """Whether a run was requested (clears the request)."""
    return bool(st.session_state.pop(_RUN_REQUEST, False))


# ----------------------------------------------------------------------------------------------------------
# The live run


def answer_columns() -> tuple[Any, Any]:
    """Two columns headed with the two paths (used while streaming and when showing a stored result)."""
    left, right = st.columns(2, gap="medium")
    left.subheader(RETRIEVAL_TITLE)
    right.subheader(PARAMETRIC_TITLE)
    return left, right


def show_answer(slot: Any, text: str) -> None:
    """Render an answer literally (a code block: no markdown, no HTML) in a container or placeholder."""
    slot.code(text if text else "…", language=None, wrap_lines=True)


def _progress_text(event: StreamEvent) -> str:
    if not event.done:
        return f"Generating… {event.n_tokens} / {event.max_tokens} tokens"
    if event.n_tokens >= event.max_tokens:
        return f"Stopped at the limit of {event.max_tokens} tokens"
    return f"Finished: {event.n_tokens} tokens (end of sequence)"


def run_live(
    handle: ModelHandle, query: str, context: str, settings: DualPathSettings
) -> DualPathResult | None:
    """Run both paths while streaming their answers side by side; ``None`` (after an error box) on failure.

    Each path gets a code block that grows token by token and a progress bar; a status box below reports
    generation, then the scoring pass. Input errors (``ValueError`` from the engine, e.g. an empty query or a
    prompt over the token budget) are shown with the engine's message before anything runs; nothing the user
    typed is cleared.
    """
    try:
        prepare_prompts(handle, query, context, settings)  # cheap: validation and tokenisation only
    except ValueError as exc:
        st.error(escape_markdown(str(exc)))
        return None
    left, right = answer_columns()
    slots: dict[str, tuple[Any, Any]] = {}
    for path, column in ((RETRIEVAL, left), (PARAMETRIC, right)):
        with column:
            text = st.empty()
            show_answer(text, "")
            bar = st.progress(0.0, text="Waiting for the model…")
            slots[path] = (text, bar)
    status = st.status("Generating both answers in one batch…", state="running")

    def on_event(event: StreamEvent) -> None:
        if event.path == SCORING:
            if event.done:
                status.update(label="Scored: the retrieval answer's tokens on both paths", state="complete")
            else:
                status.update(label="Scoring: the parametric path teacher-forced on the retrieval answer…")
            return
        if event.path not in slots:
            return
        text, bar = slots[event.path]
        show_answer(text, event.text)
        bar.progress(min(1.0, event.n_tokens / max(1, event.max_tokens)) if not event.done else 1.0,
                     text=_progress_text(event))

    try:
        threshold, source = active_threshold(handle.info.name)
        result = run_dual_path(
            handle, query, context, settings, threshold=threshold, threshold_source=source, on_event=on_event
        )
    except ValueError as exc:
        status.update(label="Not run", state="error")
        st.error(escape_markdown(str(exc)))
        return None
    except Exception as exc:  # noqa: BLE001 - report any model failure without losing the page
        logger.exception("dual-path run failed")
        status.update(label="Failed", state="error")
        st.error(f"The run failed ({type(exc).__name__}). Details are in the server log.")
        return None
    for path, answer in ((RETRIEVAL, result.retrieval.answer), (PARAMETRIC, result.parametric.answer)):
        show_answer(slots[path][0], answer)  # the final, stripped answer
    return result


def run_or_reuse(
    config: AppConfig, handle: ModelHandle, query: str, context: str
) -> tuple[DualPathResult | None, bool]:
    """The stored result for these inputs and settings, or a fresh live run (stored on success).

    Returns:
        ``(result, ran)``: ``ran`` is ``True`` when the live view was drawn in this script run.
    """
    result = cached_result(config, query, context)
    if result is not None:
        st.session_state[_LAST] = result_key(config, query, context)
        return result, False
    result = run_live(handle, query, context, config.settings)
    if result is not None:
        store_result(config, query, context, result)
    return result, True

