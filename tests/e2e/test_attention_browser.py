"""The Attention page in a real browser: after a dual-path run, open it from the sidebar and click a heatmap
cell; that head's attention pattern opens over the prompt tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import ERRORS, RUN_TIMEOUT_MS, AppPage

N_LAYERS, N_HEADS = 30, 9  # the embedded SmolLM2
LAYER, HEAD = 10, 4  # the cell the test clicks

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_attention_page_opens_a_head_when_a_cell_is_clicked(app: AppPage, artifacts: Path) -> None:
    app.dual_path_run(
        "What is the capital of Veltria?", "The capital of the Republic of Veltria is Marrowgate.", max_new_tokens=6
    )

    page = app.page
    # client-side navigation keeps the session (and its last run); the sidebar's link (the agreement view links
    # the Lookback Lens row to the Attention page too)
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Attention").click()
    # the heading, or the app's error box (then fail at once with its message instead of a long timeout)
    heading = page.get_by_role("heading", name="Attention entropy per head")
    heading.or_(page.locator(ERRORS)).first.wait_for(timeout=RUN_TIMEOUT_MS)
    app.fail_on_error()
    app.wait_idle(RUN_TIMEOUT_MS)
    app.fail_on_error()
    charts = page.locator('[data-testid="stPlotlyChart"]')
    charts.nth(3).wait_for()
    assert charts.count() == 4
    plot_area = charts.first.locator(".nsewdrag").first
    plot_area.wait_for()
    plot_area.scroll_into_view_if_needed()  # the mouse clicks at viewport coordinates: the map must be on screen
    page.wait_for_timeout(300)
    box = plot_area.bounding_box()
    assert box is not None
    x = box["x"] + (HEAD + 0.5) / N_HEADS * box["width"]
    y = box["y"] + box["height"] - (LAYER + 0.5) / N_LAYERS * box["height"]
    page.mouse.move(x, y)
    page.wait_for_timeout(300)
    page.mouse.click(x, y)
    page.get_by_text(f"layer {LAYER} · head {HEAD}").first.wait_for(timeout=RUN_TIMEOUT_MS)
    page.locator('[data-testid="stPlotlyChart"]').nth(4).wait_for()
    app.settle(RUN_TIMEOUT_MS)
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 5
    # the pattern's axes are the prompt's tokens
    ticks = page.locator('[data-testid="stPlotlyChart"]').nth(4).locator(".xtick text").all_text_contents()
    assert len(ticks) > 10
    assert any("capital" in t for t in ticks), ticks[:40]
    app.screenshot_whole_page(artifacts / "attention.png")
