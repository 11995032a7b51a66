"""The widgets every page shares: the sidebar (model and run settings), the loaded model's facts, the two
answer columns and the live dual-path run.

State (persistent values, the result cache) lives in :mod:`components.state`; this module only draws.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import streamlit as st

from components import controls, keys, state
from components.run import run_guarded
from components.state import AppConfig
from components.text import plain_message
from components.threshold_state import active_threshold
from core.engine import (
    PARAMETRIC,
    RETRIEVAL,
    SCORING,
    DualPathSettings,
    StreamEvent,
    prepare_prompts,
    run_dual_path,
)
from core.engine.estimate import dual_path_rest, format_seconds
from core.engine.result import DualPathResult
from core.engine.settings import SLIDER, setting_defaults, setting_specs
from core.io import csv_safe_text
from core.model import families
from core.model.loading import EMBEDDED_MODEL, EMBEDDED_NAME, ModelHandle
from core.model.prompts import TEMPLATES
from core.public import Caps, PublicPolicy, current_policy
from figures.base import PARAMETRIC_TITLE as PARAMETRIC_TITLE  # defined once, beside the figures
from figures.base import RETRIEVAL_TITLE as RETRIEVAL_TITLE

CUSTOM_MODEL = "custom"

_DEFAULTS = DualPathSettings()
_MODEL_CHOICES = {EMBEDDED_MODEL: f"Embedded: {EMBEDDED_NAME.split(' (')[0]} (offline)", CUSTOM_MODEL: "Another model"}


# ----------------------------------------------------------------------------------------------------------
# Sidebar


def sidebar() -> AppConfig:
    """Draw the shared sidebar (model picker and run settings) and return what it selects."""
    with st.sidebar:
        st.header("Model")
        spec, revision = _draw_model_picker()
        st.header("Settings")
        settings = _draw_settings()
        for line in current_policy().describe():
            st.caption(line)
    return AppConfig(model_spec=spec, revision=revision, settings=settings)


def _draw_model_picker() -> tuple[str, str | None]:
    """The model radio and, for another model, its id and revision; returns ``(spec, revision)``.

    In public mode (:mod:`core.public`) the radio offers only the embedded model and the operator's
    allow-list, and nothing can be typed.
    """
    policy = current_policy()
    if policy.public:
        return _draw_public_model_picker(policy)
    choice = controls.choice(st.radio, "Model", keys.MODEL_CHOICE, _MODEL_CHOICES, label_visibility="collapsed")
    if choice != CUSTOM_MODEL:
        return EMBEDDED_MODEL, None
    model_id = state.persistent(
        st.text_input,
        "Hugging Face model id, local folder or GGUF file",
        keys.MODEL_ID,
        "",
        placeholder="e.g. HuggingFaceTB/SmolLM2-360M-Instruct, /models/my-llm or /models/model.Q4_K_M.gguf",
        help=(
            "Any causal language model with safetensors weights, or a GGUF file (or a folder holding one) of an "
            "architecture transformers reads from GGUF: de-quantized once to float32 and cached by the file's "
            "sha256. Remote code is never run."
        ),
    )
    st.caption(families.picker_caption())
    packaged = installed_packaged_models()
    if packaged:
        st.caption("Installed packaged models (type the name): " + "; ".join(packaged) + ".")
    rev = state.persistent(
        st.text_input,
        "Revision (optional)",
        keys.MODEL_REVISION,
        "",
        placeholder="branch, tag or commit",
        help="Pin a hub revision for reproducible results. Ignored for local folders and GGUF files.",
    )
    if model_id.strip():
        return model_id.strip(), (rev.strip() or None)
    st.warning("Enter a model id or folder. Until then the embedded model is used.")
    return EMBEDDED_MODEL, None


def installed_packaged_models() -> list[str]:
    """``"`key` (name; license)"`` for each model packaged as GGUF on PyPI that is installed here
    (:data:`core.model.gguf_files.PACKAGED`; located without importing the packages)."""
    from core.model.gguf_files import PACKAGED

    return [
        f"`{key}` ({p.name.split(' (')[0]}; {p.license.split(' (')[0]})" for key, p in PACKAGED.items() if p.installed()
    ]


def _draw_public_model_picker(policy: PublicPolicy) -> tuple[str, str | None]:
    """Public mode: the embedded model and the allow-listed hub ids (with their pinned revisions), no text box."""
    allowed = {entry.model_id: entry for entry in policy.model_choices()}
    labels = {EMBEDDED_MODEL: _MODEL_CHOICES[EMBEDDED_MODEL], **{k: e.label for k, e in allowed.items()}}
    choice = controls.choice(st.radio, "Model", keys.MODEL_CHOICE, labels, label_visibility="collapsed")
    if not allowed:
        st.caption("This public app runs the embedded model only.")
    if choice not in allowed:
        return EMBEDDED_MODEL, None
    return policy.check_model(choice)


def template_label(key: str) -> str:
    """Readable label of a template choice (``auto`` included)."""
    if key == "auto":
        return "Auto: chat template if any, else A"
    return TEMPLATES[key].label


SIDEBAR_ORDER = ("score_window", "max_new_tokens", "template", "top_k", "kl_split")
"""The sidebar's run settings, top to bottom (each drawn from its :class:`~core.engine.settings.Setting`)."""

_CAPS = {f.name for f in dataclasses.fields(Caps)}


@dataclass(frozen=True)
class WidgetSpec:
    """One sidebar control, generated from a :class:`~core.engine.settings.Setting` (pure data, nothing drawn).

    Attributes:
        kind: ``"slider"``, ``"number"`` or ``"select"``.
        label: the widget's label; ``key``: its persistent value's name (:mod:`components.keys`).
        default: the first-time value (the :class:`DualPathSettings` default).
        low, high, step: a number's bounds (``high`` lowered by a public-mode cap) and step; ``None`` for a select.
        options: a select's ``{value: label}``; ``None`` for a number.
        help: the tooltip (with the unit).
    """

    kind: str
    label: str
    key: str
    default: Any
    low: int | None
    high: int | None
    step: int | None
    options: dict[str, str] | None
    help: str


def settings_widget_specs(policy: PublicPolicy | None = None) -> dict[str, WidgetSpec]:
    """``{field: its sidebar control}`` in :data:`SIDEBAR_ORDER`, from the settings' one definition.

    The persistent value of each control is named after its field (``keys.TOP_K == "top_k"``). A field with a
    public-mode cap of the same name (:class:`core.public.Caps`) gets the lower of its bound and the cap.
    """
    policy = current_policy() if policy is None else policy
    specs, defaults = setting_specs(), setting_defaults()
    out: dict[str, WidgetSpec] = {}
    for name in SIDEBAR_ORDER:
        spec = specs[name]
        tip = spec.help + (f" ({spec.unit})" if spec.unit else "")
        if spec.choices is not None:
            options = {key: template_label(key) for key in spec.choices}
            out[name] = WidgetSpec("select", spec.label, name, defaults[name], None, None, None, options, tip)
            continue
        high = policy.limit(name, spec.high) if name in _CAPS else spec.high
        kind = str(spec.widget)
        out[name] = WidgetSpec(kind, spec.label, name, defaults[name], spec.low, high, spec.step, None, tip)
    return out


def _draw_setting(spec: WidgetSpec) -> Any:
    """Draw one control of :func:`settings_widget_specs` and return its value."""
    if spec.options is not None:
        return controls.choice(st.selectbox, spec.label, spec.key, spec.options, spec.default, help=spec.help)
    widget = st.slider if spec.kind == SLIDER else st.number_input
    bounds = (spec.low, spec.high) if spec.step in (None, 1) else (spec.low, spec.high, spec.step)
    return controls.number(spec.label, spec.key, spec.default, bounds, widget=widget, help=spec.help)


def _draw_settings() -> DualPathSettings:
    """The run settings shared by every page."""
    values = {name: _draw_setting(spec) for name, spec in settings_widget_specs().items()}
    return controls.settings_from(_DEFAULTS, values)


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
        found = families.handle_support(handle)
        for line in [found.summary(), *found.lines()]:
            st.caption(line)


# ----------------------------------------------------------------------------------------------------------
# The two answers


def answer_columns() -> tuple[Any, Any]:
    """Two columns headed with the two paths (used while streaming and when showing a stored result)."""
    left, right = st.columns(2, gap="medium")
    left.subheader(RETRIEVAL_TITLE)
    right.subheader(PARAMETRIC_TITLE)
    return left, right


def show_answer(slot: Any, text: str) -> None:
    """Render an answer literally (a code block: no markdown, no HTML) in a container or placeholder."""
    slot.code(text if text else "…", language=None, wrap_lines=True)


MIME_TYPES = {".csv": "text/csv", ".json": "application/json"}
"""The exports' MIME types, by file ending."""


SMALL_HEADER_CHARS = 8
"""The longest header a "small" table column shows whole; numeric columns with longer headers size to them."""


def fitted_columns(
    frame: Any,
    *,
    pinned: tuple[str, ...] = (),
    text: tuple[str, ...] = (),
    numbers: dict[str, str] | None = None,
    text_width: str = "medium",
) -> dict[str, Any]:
    """The ``column_config`` that keeps a wide table readable in the page's width.

    The identifying columns (``pinned``) stay on screen while the table scrolls sideways, long text columns
    (``text``) get a fixed ``text_width``, "medium" or "large" (a cut cell shows its whole text on hover, and the
    CSV export has it all), and the numeric columns named in ``numbers`` get their printf ``format``. Columns
    ``frame`` lacks are skipped, so one call fits every variant of a table.
    """
    present = set(getattr(frame, "columns", ()))
    config: dict[str, Any] = {}
    for name in pinned:
        if name in present:
            config[name] = st.column_config.Column(name, pinned=True)
    for name in text:
        if name in present:
            config[name] = st.column_config.TextColumn(name, width=text_width)
    for name, fmt in (numbers or {}).items():
        if name in present:  # a small column cuts a long header ("AUC 95% CI low" and "… high" both read "AUC 95% CI")
            width = "small" if len(name) <= SMALL_HEADER_CHARS else None
            config[name] = st.column_config.NumberColumn(name, format=fmt, width=width)
    return config


def download(container: Any, label: str, data: str, file_name: str, *, key: str | None = None, **kwargs: Any) -> None:
    """A download button for ``data`` in ``container`` (``st`` or a column).

    The MIME type follows the file name's ending (:data:`MIME_TYPES`); a click downloads without rerunning
    the page. A CSV passes through :func:`core.io.csv_safe_text` first: a text cell starting with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return gets a leading apostrophe, so a spreadsheet never runs it as a
    formula (numbers stay numbers). ``kwargs`` go to ``download_button`` (e.g. ``help``).
    """
    suffix = PurePath(file_name).suffix
    if suffix not in MIME_TYPES:
        raise ValueError(f"No MIME type for {file_name!r}: exports end in {', '.join(MIME_TYPES)}.")
    if suffix == ".csv":
        data = csv_safe_text(data)
    container.download_button(
        label,
        data=data,
        file_name=file_name,
        mime=MIME_TYPES[suffix],
        on_click="ignore",
        icon=":material/download:",
        key=key,
        **kwargs,
    )


# ----------------------------------------------------------------------------------------------------------
# The live run


def _progress_text(event: StreamEvent) -> str:
    if not event.done:
        return f"Generating… {event.n_tokens} / {event.max_tokens} tokens"
    if event.n_tokens >= event.max_tokens:
        return f"Stopped at the limit of {event.max_tokens} tokens"
    return f"Finished: {event.n_tokens} tokens (end of sequence)"


def rest_of_run(handle: ModelHandle, prepared: Any, steps: dict[str, int], elapsed: float) -> str:
    """`` (answers in 12 s; the rest ≈ 5 s on this machine)``: the Dual Path run's second estimate, once both
    answers' length is known (:func:`core.engine.estimate.dual_path_rest`); ``""`` when nothing is measured."""
    n = max(steps.values(), default=0)
    read = len(prepared.retrieval.ids) + 2 * len(prepared.parametric.ids) + steps.get(RETRIEVAL, 0)
    left = dual_path_rest(handle, max(1, n), read, elapsed)
    return "" if left is None else f" (answers in {elapsed:.0f} s; the rest {format_seconds(left)} on this machine)"


def run_live(handle: ModelHandle, query: str, context: str, settings: DualPathSettings) -> DualPathResult | None:
    """Run both paths while streaming their answers side by side; ``None`` (after an error box) on failure.

    Each path gets a code block that grows token by token and a progress bar; a status box below reports
    generation, then the scoring pass. Input errors (``ValueError`` from the engine, e.g. an empty query or a
    prompt over the token budget) are shown with the engine's message before anything runs; nothing the user
    typed is cleared.
    """
    try:
        prepared = prepare_prompts(handle, query, context, settings)  # cheap: validation and tokenization only
    except ValueError as exc:
        st.error(plain_message(str(exc)))
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
    started, steps = time.monotonic(), {RETRIEVAL: 0, PARAMETRIC: 0}

    def on_event(event: StreamEvent) -> None:
        if event.path == SCORING:
            if event.done:
                status.update(label="Scored: the retrieval answer's tokens on both paths", state="complete")
            else:  # the answers' length is known now: the second estimate, of what is left
                rest = rest_of_run(handle, prepared, steps, time.monotonic() - started)
                status.update(label=f"Scoring: the parametric path teacher-forced on the retrieval answer…{rest}")
            return
        if event.path not in slots:
            return
        steps[event.path] = max(steps[event.path], int(event.n_tokens))
        text, bar = slots[event.path]
        show_answer(text, event.text)
        bar.progress(
            min(1.0, event.n_tokens / max(1, event.max_tokens)) if not event.done else 1.0, text=_progress_text(event)
        )

    def run() -> DualPathResult:
        threshold, source = active_threshold(handle.info.name)
        return run_dual_path(
            handle,
            query,
            context,
            settings,
            threshold=threshold,
            threshold_source=source,
            on_event=on_event,
            record=True,  # the agreement view below reads the run's own passes (core.detectors.shared)
        )

    def failed(exc: Exception) -> None:
        status.update(label="Not run" if isinstance(exc, ValueError) else "Failed", state="error")

    result = run_guarded(run, log="dual-path run failed", on_failure=failed)
    if result is None:
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
    if state.cached_result(config, query, context) is not None:
        return state.select_result(config, query, context), False  # found: made the current result
    result = run_live(handle, query, context, config.settings)
    if result is not None:
        state.store_result(config, query, context, result)
    return result, True
