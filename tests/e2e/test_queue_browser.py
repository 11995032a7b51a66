"""Fair sharing in a real browser (issue 15): a visitor behind a running one sees that they are queued, and
closing the running visitor's tab hands the model over within a few tokens instead of at the end of its run.

Visitor A starts a Self-Critique run with a long answer (1,024 new tokens at most: minutes on a CPU). Visitor
B presses Run on the Dual Path page and is queued behind A ("Queued: 1 run ahead"). A's tab is closed: B's run
must start within a few tokens' time. (Self-Critique streams its answer, so Streamlit's own stop at A's next
page update ends it as well as the per-token cancel check does; the check alone, for runs that draw nothing
while generating, is tested in ``tests/unit/model/test_handle_cancel.py`` and ``tests/app/test_public_mode.py``.)
"""

from __future__ import annotations

import contextlib
import time

import pytest

from tests.e2e.conftest import RUN_TIMEOUT_MS, STEP_TIMEOUT_MS, AppPage

pytestmark = [pytest.mark.browser, pytest.mark.slow]
QUERY, CONTEXT = "Query", "Context (the retrieved passage)"
MAX_TOKENS = "Max new tokens per answer"
QUEUED = '[data-testid="stAlertContentInfo"]:has-text("Queued:")'
GENERATING = "Generating r₁, then the critique answer r₂"
HANDOVER_S = 60
"""How soon B's run must start after A's tab closes: a few tokens on a busy CPU (A's 1,024-token answer would
take minutes)."""


def _visitor(browser, server) -> AppPage:
    context = browser.new_context(viewport={"width": 1440, "height": 1100})
    page = context.new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    return AppPage(page, server)


def test_closing_the_running_tab_hands_the_model_to_the_queued_visitor(browser, server) -> None:
    a, b = _visitor(browser, server), _visitor(browser, server)
    try:
        a.open("Self_Critique", "Self-Critique")
        a.set_number(MAX_TOKENS, 1024)
        a.fill(QUERY, "Write a very long story about a dragon who learns to read, in twenty chapters.")
        a.fill(CONTEXT, "Dragons are large, winged reptiles of legend.")
        b.open("Dual_Path", "Dual Path")
        b.fill(QUERY, "What is the capital of Veltria?")
        b.fill(CONTEXT, "The capital of the Republic of Veltria is Marrowgate.")

        a.page.get_by_role("button", name="Run Self-Critique").click()
        a.page.get_by_text(GENERATING).first.wait_for(timeout=STEP_TIMEOUT_MS)  # A's run has started
        a.page.locator(QUEUED).first.wait_for(state="detached", timeout=STEP_TIMEOUT_MS)  # and holds the model
        a.page.wait_for_timeout(1000)
        b.page.get_by_role("button", name="Run both paths").click()
        try:
            b.page.locator(QUEUED).first.wait_for(timeout=STEP_TIMEOUT_MS)
        except Exception as exc:  # say what both pages showed
            raise AssertionError(b.diagnose("B was never queued") + "\n" + a.diagnose("A's page")) from exc
        assert "1 run ahead" in b.page.locator(QUEUED).first.inner_text(), b.diagnose("B is queued behind A")

        closed = time.monotonic()
        a.page.context.close()
        b.page.locator(QUEUED).first.wait_for(state="detached", timeout=HANDOVER_S * 1000)
        handover = time.monotonic() - closed
        assert handover < HANDOVER_S, b.diagnose(f"B waited {handover:.0f} s after A's tab closed")
        b.page.get_by_role("heading", name="RePCS verdict").first.wait_for(timeout=RUN_TIMEOUT_MS)
        b.fail_on_error()
    finally:
        for visitor in (a, b):
            with contextlib.suppress(Exception):  # A's is closed already
                visitor.page.context.close()
