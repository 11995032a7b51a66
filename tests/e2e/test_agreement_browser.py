"""The agreement view in a real browser: after a Dual Path run, every detector's verdict on one screen.

Writes ``agreement.png`` (the section alone) into the ``artifacts`` folder; ``make screenshots`` copies it to
``docs/agreement.png`` for the README.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.engine.verdict import DISPLAY
from tests.e2e.conftest import RUN_TIMEOUT_MS, AppPage

AGREEMENT_SCREENSHOT = "agreement.png"  # docs/agreement.png after `make screenshots`
SECTION = ".st-key-agreement_view"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_agreement_view_and_screenshot(app: AppPage, artifacts: Path) -> None:
    app.dual_path_run(
        "What is the capital of France?", "Paris is the capital and largest city of France.", max_new_tokens=32
    )
    page = app.page
    section = page.locator(SECTION)
    section.get_by_role("heading", name="Every detector on this example").wait_for(timeout=RUN_TIMEOUT_MS)
    app.wait_idle(RUN_TIMEOUT_MS)
    app.fail_on_error()
    section.get_by_text("Context reliance:").first.wait_for()  # each group's own summary (issue 23 part 3)
    assert section.get_by_text("They conflict").count() == 0, "no count across groups"
    table = section.locator('[data-testid="stDataFrame"]').first
    table.wait_for()
    box = table.bounding_box()
    assert box is not None and box["width"] <= page.viewport_size["width"], "the table fits the page"
    assert section.get_by_role("link", name="RADAR", exact=True).count() == 1, "each detector links to its page"
    assert section.get_by_role("button", name="Run Self-Critique").count() == 1
    assert section.get_by_text("on this machine").count() >= 2, "an estimate next to each costly button"
    text = section.inner_text()
    assert "Likely recalled" not in text and "Context used" not in text, "only the shared verdict wording"
    assert any(words in page.locator("body").inner_text() for words in DISPLAY.values())
    page.set_viewport_size({"width": 1440, "height": 1400})
    section.scroll_into_view_if_needed()
    page.wait_for_timeout(1000)  # the data grid draws on a canvas
    shot = artifacts / AGREEMENT_SCREENSHOT
    shot.parent.mkdir(parents=True, exist_ok=True)
    section.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
