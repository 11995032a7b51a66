"""Persistent controls by kind, and settings forms drawn from a table of them.

Every setting a page keeps is a :func:`components.state.persistent` widget, and most are one of two kinds:
a choice among labeled options (:func:`choice`, :func:`several`) or a number in a range (:func:`number`).
A settings form is a table that maps each field of a settings dataclass to the control that draws it (a
``functools.partial`` of one of these); :func:`draw_form` draws the table column by column and
:func:`settings_from` turns the values into the dataclass.

Example::

    FORM = (
        {"top_k": partial(number, "Top-k", keys.TOP_K, 10, (1, 50), widget=st.slider)},
        {"template": partial(choice, st.selectbox, "Template", keys.TEMPLATE, TEMPLATE_LABELS)},
    )
    settings = settings_from(DualPathSettings(), draw_form(FORM))       # two columns side by side
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import streamlit as st

from components import state

S = TypeVar("S")

Form = Sequence[Mapping[str, Callable[[], Any]]]
"""Columns of ``{settings field: draw its control}`` (drawn left to right, each top to bottom)."""


def choice(
    widget: Callable[..., Any],
    label: str,
    name: str,
    labels: Mapping[Any, str] | Sequence[Any],
    default: Any = None,
    **kwargs: Any,
) -> Any:
    """A persistent single choice (``st.radio``, ``st.selectbox``, ``st.select_slider``) over ``labels``.

    Args:
        widget: the Streamlit widget.
        label: the widget's label.
        name: the persistent value's name (a :mod:`components.keys` constant).
        labels: the options; a mapping shows each option as its value (``format_func``).
        default: the first-time value; the first option when ``None``. A stored value that is no longer an
            option (the options depend on the model or the data) is replaced by it before the draw.
        **kwargs: further widget parameters (``help``, ``horizontal`` …).

    Returns:
        The chosen option.
    """
    options = list(labels)
    if not options:
        raise ValueError(f"The choice {label!r} needs at least one option.")
    default = options[0] if default is None else default
    if state.stored(name, default) not in options:
        state.set_stored(name, default)
    if isinstance(labels, Mapping):
        kwargs.setdefault("format_func", labels.__getitem__)
    return state.persistent(widget, label, name, default, options=options, **kwargs)


def several(label: str, name: str, options: Sequence[Any], default: Sequence[Any], **kwargs: Any) -> list[Any]:
    """A persistent multiple choice (``st.multiselect``) over ``options``.

    Stored values that are no longer options (the options depend on the model or the registry) are dropped
    before the draw. ``kwargs`` are further widget parameters (``format_func``, ``help`` …).
    """
    options = list(options)
    chosen = state.stored(name)
    if chosen is not None:
        state.set_stored(name, [value for value in chosen if value in options])
    return list(state.persistent(st.multiselect, label, name, list(default), options=options, **kwargs))


def number(
    label: str,
    name: str,
    default: float,
    bounds: tuple[float, float] | tuple[float, float, float],
    *,
    widget: Callable[..., Any] = st.number_input,
    **kwargs: Any,
) -> Any:
    """A persistent number (``st.number_input``, or ``widget=st.slider``) within ``bounds``.

    Args:
        bounds: ``(min, max)`` or ``(min, max, step)``.
        **kwargs: further widget parameters (``help``, ``format`` …).
    """
    low, high, *step = bounds
    if step:
        kwargs["step"] = step[0]
    _keep_in_range(label, name, low, high)
    return state.persistent(widget, label, name, default, min_value=low, max_value=high, **kwargs)


def _keep_in_range(label: str, name: str, low: Any, high: Any) -> None:
    """Move a stored value that the bounds no longer admit (a lower cap, another model) to the nearest bound,
    and say so on the page: a value is never replaced silently."""
    value = state.stored(name)
    if value is None or isinstance(value, (list, tuple)):  # range sliders keep their own checks
        return
    try:
        inside = low <= value <= high
    except TypeError:
        return
    if not inside:
        bound = low if value < low else high
        state.set_stored(name, type(value)(bound) if isinstance(value, (int, float)) else bound)
        st.caption(f"{label}: {value} is outside {low}–{high} here, so {bound} is used.")


def draw_controls(controls: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
    """Draw ``{field: draw its control}`` top to bottom and return ``{field: value}``."""
    return {field: draw() for field, draw in controls.items()}


def draw_form(form: Form, *, gap: str = "medium") -> dict[str, Any]:
    """Draw a settings form (one column per mapping, side by side) and return ``{field: value}``."""
    values: dict[str, Any] = {}
    for column, controls in zip(st.columns(len(form), gap=gap), form, strict=True):
        with column:
            values.update(draw_controls(controls))
    return values


def settings_from(defaults: S, values: Mapping[str, Any], **fixed: Any) -> S:
    """A copy of the settings dataclass ``defaults`` with ``values`` (each cast to its field's default type:
    widgets return floats for ints and the like) and the ``fixed`` fields (taken as they are)."""
    cast = {field: type(getattr(defaults, field))(value) for field, value in values.items()}
    return dataclasses.replace(defaults, **cast, **fixed)  # type: ignore[type-var]
