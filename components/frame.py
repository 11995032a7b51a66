"""A page's first paint: its tab title, heading and introduction, on screen before the page imports its libraries.

This module imports Streamlit only. A page script imports nothing else at its top, draws its title and intro
with :func:`first_paint`, and imports its libraries (the model's: PyTorch, transformers; its own: scikit-learn,
SciPy, captum, plotly — seconds on a server's first run of the page) only after it, so the title and the
introduction are on screen while they import and while the model loads (:func:`components.page.open_page`). A
page with inputs that need no model draws them next, still before its libraries (:mod:`components.prologue`)::

    from components import frame

    frame.first_paint(
        "Attention",
        plain="Where does the model look while it answers?",
        precise="The entropy of each head's attention distribution, in nats.",
        citation="RADAR (2025) appendix D.2.1.",
    )

    import streamlit as st  # after the first paint, on purpose (pages/ may import late: E402 is off there)

    from components.page import open_page
"""

from __future__ import annotations

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


def first_paint(title: str, *, plain: str, precise: str, citation: str, heading: str | None = None) -> None:
    """The page's tab title (wide layout), its heading and its introduction (:func:`draw_intro`), drawn before
    anything heavy is imported.

    Args:
        title: the page's name (the browser tab's ``"<title> · Read or Recall"``; the heading unless ``heading``).
        plain, precise, citation: the introduction: one plain sentence, the precise definition, the source.
        heading: the page's heading when it is not ``title``.
    """
    st.set_page_config(page_title=page_title(title), layout="wide")
    st.title(heading or title)
    draw_intro(plain, precise, citation)
