"""Dual Path: the same model answers with the context and without it; where do the two paths diverge?

The page reads top to bottom like the UI: inputs, the two answers (streamed live while running), the headline
verdict with the answer span it read (which model it belongs to and the calibration record that decided it, the
model's calibration card, or “Calibrate this model” for a model without one; a verdict of another model than the one
loaded now is labeled and not shown), the swap test (on request), the RePCS verdict, the per-token divergence
chart, the top-k candidates at one position, the CRM statistics, warnings, and the export. All maths lives in
``core``; all drawing in ``components``.
"""

from __future__ import annotations

from components import frame

frame.first_paint(
    "Dual Path",
    plain="The model answers your question twice — once with the passage, once without — and the page measures how "
    "much the passage changed its answer: little change suggests it answered from memory.",
    precise="The same model answers with the context (retrieval path) and without it (parametric path). The parametric "
    "path is then scored on the retrieval answer's own tokens, so at each position t both paths predict the "
    "same token; $\\mathrm{KL}_t = \\mathrm{KL}(P_{\\text{retrieval},t} \\,\\|\\, P_{\\text{parametric},t})$ in "
    "nats, and $Z = \\sum_{t<T} \\mathrm{KL}_t$ over the first $T$ answer tokens is compared with a calibrated "
    "threshold $\\tau$.",
    citation="RePCS (2025) §III, eq. 2 and Algorithm 1; the KL statistics are CRM (2025) level 2.",
)  # on screen while the imports below run

import time

import streamlit as st

from components import keys, prologue

early = prologue.begin(with_inputs=True)  # the example picker, the query and the context: light modules only
# a click while the model loads starts the run once it is ready (the page waits behind the loading notice)
clicked = st.button("Run both paths", type="primary", key=keys.RUN, icon=":material/play_arrow:")
estimate_line = st.empty()  # the run's time estimate, once the model is loaded

from components import agreement, calibrate_view, panels, prefetch, state, swap_view, url_state, widgets
from components.page import PageContext, open_page
from components.stored_runs import start_hint
from core.engine.estimate import describe_estimate, dual_path_run_estimate, observe_dual_path
from core.engine.result import DualPathResult, result_digest
from core.engine.swap_verdict import NEVER, default_mode


def run_estimate(page: PageContext, query: str = "", context: str = "") -> str:
    """The line under the button: the last Dual Path runs' whole wait (answers, scoring, the agreement view),
    scaled to this run's units of work; before the first, the unit costs (this model's, or its size at this
    machine's pace)."""
    budget = page.config.settings.max_new_tokens
    line = describe_estimate(dual_path_run_estimate(page.handle, budget, query, context))
    if st.session_state.get(keys.SWAP_AUTO, default_mode() != NEVER):
        line += " · where context and memory agree on the answer, a swap test follows (its own estimate then)"
    return line


def draw_answers(page: PageContext, query: str, context: str, run: bool) -> tuple[DualPathResult | None, bool]:
    """Stream a new run when asked (or reuse the stored one); otherwise show the latest stored answers. Returns
    the result and whether the model ran in this script run."""
    if run:
        result, ran = widgets.run_or_reuse(page.config, page.handle, query, context)
        if result is not None and not ran:
            st.toast("Same inputs and settings as an earlier run: showing its stored result.")
            panels.draw_answers(result)
        if result is not None:
            return result, ran
    result = state.select_result(page.config, query, context)
    if result is None:
        return None, False
    if not state.is_current(page.config, query, context):
        st.info(
            "Showing the previous run: the inputs or settings have changed since. "
            "Press **Run both paths** to analyze them."
        )
    panels.draw_answers(result)
    return result, False


def main() -> None:
    page = open_page("Dual Path", early=early)
    query, context, run = early.query, early.context, clicked or state.pop_run_request()
    estimate_line.caption(run_estimate(page, query, context))
    st.divider()
    started = time.monotonic()
    result, ran = draw_answers(page, query, context, run)
    url_state.sync(page.config)  # the run just made and the chosen model go into the page's link (a reload keeps them)
    if result is None:
        st.info(start_hint("Run both paths", query, context, needs_context=True))
        calibrate_view.draw_section(page.handle)
        return
    st.divider()
    if not calibrate_view.draw_owner(result, page.handle):  # another model's verdict: labeled, not shown as this one's
        calibrate_view.draw_section(page.handle)
        return
    result = swap_view.with_stored(page.handle, result)  # where context and memory agree, a swap test decides
    head = result.head  # the headline decided once, when the result was built (carried by its swap test)
    panels.draw_headline(head)
    calibrate_view.draw_card(result)
    calibrate_view.draw_section(page.handle)
    swap = swap_view.draw(page.handle, result, head)
    panels.draw_verdict(result)
    panels.draw_warnings(result)
    agreement.draw(page.handle, result, result_digest(result))
    panels.draw_divergence_chart(result)
    panels.draw_topk(result)
    panels.draw_crm_statistics(result)
    st.divider()
    panels.draw_export(result, swap)
    if ran:  # the whole wait of this run measures the next estimate, shown under the button at once
        observe_dual_path(page.handle, time.monotonic() - started, result)
        estimate_line.caption(run_estimate(page, query, context))
    prefetch.after_run(page.handle, result)  # the views' passes, in the background once the result is drawn


main()
