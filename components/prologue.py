"""The light half of a page's prologue: what must come before a page's first widget, with no heavy import.

This module and what it imports (:mod:`components.inputs`, :mod:`components.state`,
:mod:`components.url_state`, :mod:`components.controls`, :mod:`components.keys`) load Streamlit and the
standard library only — no PyTorch, transformers, scikit-learn, SciPy, captum or pandas (a test imports them
in a fresh interpreter and checks). So a page draws its inputs right after its first paint
(:func:`components.frame.first_paint`), and they are on screen while the page imports its libraries (seconds
on a server's first run) and while the model loads::

    frame.first_paint("Ablations", plain=..., precise=..., citation=...)

    from components import prologue

    early = prologue.begin(with_inputs=True)  # the example picker, the query and the context

    import streamlit as st  # the page's libraries, after its inputs on purpose

    from components.page import open_page

    def main() -> None:
        page = open_page("Ablations", early=early)  # the sidebar; the model loads in the background
        query, context = early.query, early.context

The widgets keep their keys and their persistent values (:func:`components.state.persistent`): a page that
draws them early draws them once, and :func:`components.page.open_page` does not repeat :func:`begin`.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from components import inputs, state, url_state


@dataclass(frozen=True)
class Early:
    """What a page drew before its libraries were imported.

    Attributes:
        notices: the place, above the page's inputs, of the model's loading notice and of its load error.
        query, context: the shared inputs' values, when the page drew them (``begin(with_inputs=True)``).
    """

    notices: DeltaGenerator
    query: str = ""
    context: str = ""


def begin(*, with_inputs: bool = False) -> Early:
    """Everything a page run does before its first widget, then (``with_inputs``) the example picker and the
    shared query and context (:func:`components.inputs.draw_inputs`).

    Once per page run, before any widget: the app's navigation (:func:`use_the_apps_navigation`), the app's
    style, the session's run count (:func:`components.state.begin_run`), a link's or a reload's inputs
    (:func:`components.url_state.restore`), and the place of the model's notices. A link that carries run
    settings imports the engine here to check them (the only heavy import on this path).
    """
    use_the_apps_navigation()
    inputs.use_app_style()
    state.begin_run()
    url_state.restore()  # a reload or a shared link: the last run's inputs and settings, before any widget
    early = Early(notices=st.container())
    if not with_inputs:
        return early
    query, context = inputs.draw_inputs()
    return Early(notices=early.notices, query=query, context=context)


def use_the_apps_navigation() -> None:
    """Make sure app.py's ``st.navigation`` names the pages (the landing page "Start", not "app").

    Streamlit decides once per server process whether the ``pages/`` folder is an old-style page list: it is
    while no run has called ``st.navigation`` yet. When the first run after a start is a view's URL
    (``/Dual_Path``), Streamlit runs that view directly, app.py's navigation is skipped and the sidebar lists
    the folder's file names. This turns the old style off and reruns, through app.py, on the same page. It
    does nothing under app.py's own navigation, or when the app's main script is not app.py (a test that
    opens one page's script).
    """
    from streamlit.runtime import Runtime
    from streamlit.runtime.pages_manager import PagesManager  # Streamlit's own switch; no public equivalent
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    main = getattr(getattr(ctx, "pages_manager", None), "main_script_path", "") or ""
    # only under a real server: AppTest re-decides the folder's style at every run (its runtime is a mock)
    served = Runtime.exists() and type(Runtime.instance()) is Runtime
    if served and PagesManager.uses_pages_directory and str(main).endswith("app.py"):
        PagesManager.uses_pages_directory = False
        st.rerun()
