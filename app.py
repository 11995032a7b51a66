"""Read or Recall — landing page: what the tool answers, the model (sidebar) and the examples.

Run with ``streamlit run app.py``. The views live in ``pages/`` (Streamlit's multipage discovery).
"""

from __future__ import annotations

import streamlit as st

from components import inputs, keys, state
from components.page import open_page

DUAL_PATH_PAGE = "pages/1_Dual_Path.py"


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


def main() -> None:
    open_page()
    draw_intro()
    draw_examples()


main()
