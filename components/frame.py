"""A page's first paint: its tab title, heading and introduction, on screen before the page imports its libraries.

This module imports Streamlit only. A page script imports nothing else at its top, draws its header with
:func:`first_paint`, and imports its libraries (the model's: PyTorch, transformers; its own: scikit-learn,
SciPy, captum, plotly — seconds on a server's first run of the page) only after it, so the title and the
introduction are on screen while they import and while the model loads (:func:`components.page.open_page`)::

    import streamlit as st

    from components import frame


    def draw_header() -> None:
        st.title("Attention")
        frame.draw_intro("Plain words.", "The precise definition.", "The source.")


    frame.first_paint("Attention", draw_header)

    from components.page import open_page  # after the first paint, on purpose (pages/ may import late)
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

APP_TITLE = "Read or Recall"


def page_title(title: str | None) -> str:
    """The browser tab's title: ``"<title> · Read or Recall"``, or the app's name alone."""
    return f"{title} · {APP_TITLE}" if title else APP_TITLE


def draw_intro(plain: str, precise: str, citation: str) -> None:
    """A page's introduction for a newcomer: one plain sentence, the precise definition (collapsed), the source."""
    st.markdown(plain)
    with st.expander("Precisely", icon=":material/functions:"):
        st.markdown(precise)
    st.caption(citation)


def first_paint(title: str, draw_header: Callable[[], None]) -> None:
    """The page's tab title (wide layout) and its header, drawn before anything heavy is imported."""
    st.set_page_config(page_title=page_title(title), layout="wide")
    draw_header()
