"""The Attention page in a real browser: after a dual-path run, open it from the sidebar and click a heatmap
cell; that head's attention pattern opens over the prompt tokens."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
SERVER_START_TIMEOUT_S = 120
RUN_TIMEOUT_MS = 300_000
N_LAYERS, N_HEADS = 30, 9  # the embedded SmolLM2
LAYER, HEAD = 10, 4  # the cell the test clicks

pytestmark = [pytest.mark.browser, pytest.mark.slow]

if CHROMIUM is None:
    pytest.skip("Debian's chromium is not on PATH (`make browser` installs it).", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `streamlit run app.py` on a free port; always terminated at teardown."""
    port = _free_port()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.headless",
                "true",
                "--server.port",
                str(port),
                "--server.address",
                "127.0.0.1",
                "--browser.gatherUsageStats",
                "false",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + SERVER_START_TIMEOUT_S
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"streamlit did not start; log:\n{log.read_text(errors='replace')[-3000:]}")
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                        if response.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture()
def page() -> Iterator[Page]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1440, "height": 1100})
        page = context.new_page()
        page.set_default_timeout(120_000)
        try:
            yield page
        finally:
            context.close()
            browser.close()


def _run_example(page: Page, url: str) -> None:
    page.goto(f"{url}/Dual_Path")
    page.get_by_role("heading", name="Dual Path").wait_for()
    tokens = page.get_by_role("spinbutton", name="Max new tokens per answer", exact=True)
    tokens.fill("6")
    tokens.press("Enter")
    query = page.get_by_role("textbox", name="Query", exact=True)
    query.fill("What is the capital of Veltria?")
    query.press("Control+Enter")
    context = page.get_by_role("textbox", name="Context (the retrieved passage)", exact=True)
    context.fill("The capital of the Republic of Veltria is Marrowgate.")
    context.press("Control+Enter")
    page.get_by_role("button", name="Run both paths").click()
    page.get_by_role("heading", name="RePCS verdict").wait_for(timeout=RUN_TIMEOUT_MS)


def _wait_idle(page: Page) -> None:
    """Wait until the script run triggered by the last interaction has finished."""
    page.wait_for_timeout(500)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=RUN_TIMEOUT_MS)
    page.wait_for_timeout(500)


def test_attention_page_opens_a_head_when_a_cell_is_clicked(server: str, page: Page) -> None:
    _run_example(page, server)
    # client-side navigation keeps the session (and its last run)
    page.get_by_role("link", name="Attention").click()
    page.get_by_role("heading", name="Attention entropy per head").wait_for(timeout=RUN_TIMEOUT_MS)
    charts = page.locator('[data-testid="stPlotlyChart"]')
    charts.nth(3).wait_for()
    assert charts.count() == 4
    plot_area = charts.first.locator(".nsewdrag").first
    plot_area.wait_for()
    box = plot_area.bounding_box()
    assert box is not None
    x = box["x"] + (HEAD + 0.5) / N_HEADS * box["width"]
    y = box["y"] + box["height"] - (LAYER + 0.5) / N_LAYERS * box["height"]
    page.mouse.move(x, y)
    page.wait_for_timeout(300)
    page.mouse.click(x, y)
    page.get_by_text(f"layer {LAYER} · head {HEAD}").first.wait_for(timeout=RUN_TIMEOUT_MS)
    page.locator('[data-testid="stPlotlyChart"]').nth(4).wait_for()
    _wait_idle(page)
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 5
    # the pattern's axes are the prompt's tokens
    ticks = page.locator('[data-testid="stPlotlyChart"]').nth(4).locator(".xtick text").all_text_contents()
    assert len(ticks) > 10
    assert any("capital" in t for t in ticks), ticks[:40]
    if os.environ.get("ROR_SCREENSHOT_DIR"):
        height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
        page.set_viewport_size({"width": 1440, "height": min(int(height) + 40, 7000)})
        page.wait_for_timeout(1500)
        page.screenshot(path=str(Path(os.environ["ROR_SCREENSHOT_DIR"]) / "attention.png"), full_page=True)
