"""Read or Recall — the app's navigation and its landing page (what the tool answers, the model, the examples).

Run with ``streamlit run app.py``. The views live in ``pages/``; :func:`navigation` lists them with
``st.navigation`` so the landing page is named :data:`LANDING_TITLE` in the sidebar instead of the script's
file name ("app", which Streamlit's automatic ``pages/`` discovery would show). The URLs stay those of the
discovery (``/Dual_Path``, ``/Evaluate`` …), and every page still runs on its own (``AppTest.from_file``).

Nothing waits before the first paint: this script imports only Streamlit at the top, and every view draws its
title and intro before it imports its libraries (:mod:`components.frame`), so on a server's first run the
navigation and the page's title are on screen while the libraries behind the model (PyTorch, transformers:
seconds, once per server) are imported, and the model itself loads in the background
(:func:`components.page.open_page`).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

DUAL_PATH_PAGE = "pages/1_Dual_Path.py"
LANDING_TITLE = "Start"
"""The landing page's name in the navigation."""
PAGES_DIR = Path(__file__).resolve().parent / "pages"


def draw_intro() -> None:
    """The question the tool answers and how."""
    st.title("Read or Recall")
    st.markdown(
        "Did a retrieval-augmented language model **read** the context you gave it, or **recall** the answer "
        "from what it memorized in training?\n\n"
        "The same model answers your question twice — once **with** the retrieved context (the *retrieval "
        "path*) and once **without** it (the *parametric path*). Where the two paths agree, the context "
        "changed little and the answer may come from memory; where they diverge, the model used the context."
    )
    st.caption(
        "The scores are evidence, not proof: they describe one model on one prompt and can be calibrated on "
        "labeled examples."
    )


def draw_examples() -> None:
    """The example picker, the picked inputs and the way to the Dual Path page."""
    from components import inputs, keys, state

    st.subheader("Start from an example")
    example = inputs.example_picker()
    query, context = state.current_inputs()
    if query or context:
        st.caption("Query")
        st.text(query)
        st.caption("Context")
        st.text(context)
    left, right = st.columns([1, 3])
    with left:
        if st.button(
            "Analyze on the Dual Path page",
            type="primary",
            disabled=example is None and not query,
            key=keys.LANDING_ANALYZE,
        ):
            state.request_run()
            st.switch_page(DUAL_PATH_PAGE)
    with right:
        st.page_link(DUAL_PATH_PAGE, label="Open the Dual Path view", icon=":material/compare_arrows:")


def landing() -> None:
    """The landing page: drawn before the model is loaded; the loading notice (then the model's facts in the
    sidebar) comes last."""
    st.set_page_config(page_title="Read or Recall", layout="wide")
    draw_intro()  # plain Streamlit: on screen before the model's libraries are imported
    from components import prologue  # Streamlit and the light components only

    early = prologue.begin()
    draw_examples()  # the example picker too, before the model's libraries
    from components.page import open_page  # PyTorch and transformers: seconds on a server's first run

    page = open_page(early=early)
    page.handle  # noqa: B018 - wait for the model here, below everything the visitor can already use


def page_scripts() -> list[str]:
    """The views' scripts, ``pages/<n>_<Name>.py``, in their number's order (as the discovery sorted them)."""
    scripts = [p for p in PAGES_DIR.glob("*.py") if p.stem.split("_", 1)[0].isdigit()]
    return [f"pages/{p.name}" for p in sorted(scripts, key=lambda p: int(p.stem.split("_", 1)[0]))]


def navigation() -> list[st.Page]:
    """The landing page (named :data:`LANDING_TITLE`, at the root URL), then every view of ``pages/``."""
    home = st.Page(landing, title=LANDING_TITLE, icon=":material/home:", url_path="start", default=True)
    return [home, *(st.Page(script) for script in page_scripts())]


def main() -> None:
    st.navigation(navigation()).run()  # every view draws its title before it imports its libraries


main()
