"""Run a method on its button, or show the run this browser session already has (Self-Critique, SMA).

The pages keep their runs as plain dicts in a :func:`~components.lru.session_lru` keyed by everything that
changes the run (model, inputs, settings). :func:`run_or_show` is the one rule they share: a click on the
Run button runs the method unless this key is stored; otherwise the page shows this key's stored run, else
the run it showed last (saying so), else a hint of where to start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import streamlit as st

from components.lru import SessionLRU

R = TypeVar("R", bound="Storable")

SAME_RUN_MESSAGE = "Same inputs and settings as an earlier run: showing its stored result."


def start_hint(button: str, query: str, context: str, *, needs_context: bool, extra: str = "") -> str:
    """What to do when this session has no run yet: fill what is missing, or press ``button`` when the boxes
    already hold what the method needs ("Type or pick a query…" only while the query box is empty).

    Args:
        button: the Run button's label.
        query, context: the inputs as they are now.
        needs_context: whether the method needs a context as well as a query.
        extra: a sentence added at the end (e.g. a faster alternative).
    """
    missing = [
        name
        for name, text, needed in (("a query", query, True), ("a context", context, needs_context))
        if needed and not text.strip()
    ]
    if missing:
        hint = f"Type or pick {' and '.join(missing)}, then press **{button}**."
    else:
        hint = f"Press **{button}** to analyze this query{' and context' if context.strip() else ''}."
    return f"{hint} {extra}".strip()


class Storable(Protocol):
    """A run that round-trips through a plain dict (what the session keeps)."""

    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any: ...


def run_or_show(
    runs: SessionLRU[dict[str, Any]],
    key: str,
    kind: type[R],
    *,
    run: bool,
    compute: Callable[[], R | None],
    button: str,
    nothing_yet: str,
) -> tuple[str, R, bool] | None:
    """Run when asked (unless ``key`` is stored), else pick the stored run to show.

    Args:
        runs: the page's runs (plain dicts, ``kind.to_dict``); their current entry is the run shown last.
        key: the run's cache key for the current inputs and settings.
        kind: the run's class (its ``from_dict`` reads a stored run back).
        run: whether the Run button was clicked in this script run.
        compute: runs the method (drawing its own progress); ``None`` once it has shown why it failed.
        button: the Run button's label (named in the "previous run" note).
        nothing_yet: what to say when this session has no run at all.

    Returns:
        ``(shown key, run, fresh)``: ``fresh`` is ``True`` when the run was computed in this script run (its
        answers are already on the page). ``None`` when there is nothing to show (or the run failed).
    """
    if run and key in runs:
        st.toast(SAME_RUN_MESSAGE)
    elif run:
        result = compute()
        if result is None:
            return None
        runs.put(key, result.to_dict())
        runs.set_current(key)
        return key, result, True
    data = runs.get(key)
    if data is not None:
        runs.set_current(key)
        return key, kind.from_dict(data), False
    data = runs.current()
    if data is None:
        st.info(nothing_yet)
        return None
    st.info(f"Showing the previous run: the inputs or settings have changed since. Press **{button}** to analyze them.")
    return str(runs.current_key()), kind.from_dict(data), False
