"""The example picker and the shared query/context boxes (bound to the persistent values of
:mod:`components.state`, so they keep their text across pages)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from components import keys, state
from components.text import escape_markdown, plain_message
from core.examples import KINDS, Example, load_examples
from core.io import asset_path


def examples() -> list[Example]:
    """The bundled examples, or an empty list (with a warning on the page) when they cannot be read."""
    try:
        return load_examples()
    except (OSError, ValueError) as exc:
        st.warning(f"The bundled examples could not be read: {plain_message(str(exc))}")
        return []


EDITED_FROM = "example_edited_from"
"""The persistent name of the example the inputs were edited from (the picker then names none)."""


def _apply_example(by_id: dict[str, Example]) -> None:
    """Callback: fill the shared inputs with the picked example (runs before the page is drawn)."""
    example = by_id.get(state.stored(keys.EXAMPLE) or "")
    if example is not None:
        state.set_inputs(example.query, example.context)
        state.set_stored(EDITED_FROM, None)


def _restore(by_id: dict[str, Example], example_id: str) -> None:
    """Callback: pick ``example_id`` again and fill the inputs with it."""
    state.set_stored(keys.EXAMPLE, example_id)
    _apply_example(by_id)


def _leave_edited_example(by_id: dict[str, Example]) -> None:
    """Inputs typed over a picked example are the visitor's own: the picker names no example from now on, on
    every page (it said the old example's name on the other pages), and the example is kept to restore."""
    picked = by_id.get(state.stored(keys.EXAMPLE) or "")
    if picked is not None and not is_example_input(picked, *state.current_inputs()):
        state.set_stored(keys.EXAMPLE, None)
        state.set_stored(EDITED_FROM, picked.id)


def example_picker() -> Example | None:
    """A select box over the bundled examples; picking one fills the query and context boxes.

    Shows what the example is and what to expect while the inputs are the example's own; once they are edited,
    the box names no example and a caption says which one they were edited from (with a button to restore it).
    Returns the picked example, or ``None``.
    """
    items = examples()
    by_id = {e.id: e for e in items}
    if state.stored(keys.EXAMPLE) not in by_id:
        state.set_stored(keys.EXAMPLE, None)
    _leave_edited_example(by_id)
    choice = state.persistent(
        st.selectbox,
        "Example",
        keys.EXAMPLE,
        None,
        options=list(by_id),
        index=None,
        format_func=lambda i: by_id[i].label,
        placeholder="Pick an example to fill in the query and the context…",
        on_change=_apply_example,
        args=(by_id,),
    )
    example = by_id.get(choice) if choice else None
    if example is not None:
        st.info(f"**What to expect.** {escape_markdown(example.expect)}")
        st.caption(escape_markdown(KINDS.get(example.kind, example.kind)))
        return example
    edited = by_id.get(state.stored(EDITED_FROM) or "")
    if edited is not None and any(state.current_inputs()):
        st.caption(
            f"Your own query and context, edited from the example “{escape_markdown(edited.label)}”: its “what to "
            "expect” no longer applies."
        )
        st.button(
            "Restore the example's query and context",
            key=keys.EXAMPLE_RESTORE,
            on_click=_restore,
            args=(by_id, edited.id),
            icon=":material/undo:",
        )
    return None


def is_example_input(example: Example, query: str, context: str) -> bool:
    """Whether the inputs are still the example's own (surrounding whitespace aside)."""
    return (query.strip(), context.strip()) == (example.query.strip(), example.context.strip())


STYLE = asset_path("static", "app.css")
"""The app's static style rules (lighter placeholders, metric values that wrap instead of being cut); no user
text ever goes into it. Every page injects it (:func:`components.page.open_page`)."""


def use_app_style() -> None:
    """Inject :data:`STYLE` (a static CSS file of the repository) once per page run."""
    if STYLE.is_file():
        st.html(STYLE)


def input_area(name: str, label: str, **kwargs: Any) -> str:
    """A text area bound to the shared input ``name`` (:data:`~components.keys.QUERY` or
    :data:`~components.keys.CONTEXT`)."""
    return str(state.persistent(st.text_area, label, name, "", **kwargs) or "")


def query_and_context() -> tuple[str, str]:
    """The shared query and context text areas; returns their current values."""
    query = input_area(
        keys.QUERY,
        "Query",
        height=90,
        placeholder="e.g. What is the capital of Veltria?",
        help="The question both paths answer.",
    )
    context = input_area(
        keys.CONTEXT,
        "Context (the retrieved passage)",
        height=160,
        placeholder="e.g. The capital of the Republic of Veltria is Marrowgate.",
        help="Only the retrieval path sees it. Nothing is cut: a context over the model's token budget is refused.",
    )
    return query, context


def draw_inputs() -> tuple[str, str]:
    """The example picker, then the shared query and context; returns their current values."""
    example_picker()
    return query_and_context()
