"""The main flows in a real browser: `streamlit run app.py` driven by Playwright with Debian's chromium."""

from __future__ import annotations

import os
import re
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
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "screenshot.png"
CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SERVER_START_TIMEOUT_S = 120
RUN_TIMEOUT_MS = 300_000  # a full dual-path run of the embedded model on a busy CPU
VERDICT = re.compile("Likely recalled from memory|Context used|Uncalibrated")
SCRIPT = "<script>alert(1)</script>"

pytestmark = [pytest.mark.browser, pytest.mark.slow]

if CHROMIUM is None:
    pytest.skip(
        "Debian's chromium is not on PATH (install it with `apt-get install chromium` or `make browser`); "
        "Playwright cannot download its own browsers here.",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited early with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"streamlit did not become healthy within {timeout:.0f} s")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `streamlit run app.py` on a free port; always terminated at teardown."""
    port = _free_port()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "streamlit", "run", "app.py",
                "--server.headless", "true",
                "--server.port", str(port),
                "--server.address", "127.0.0.1",
                "--browser.gatherUsageStats", "false",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            try:
                _wait_healthy(url, proc, SERVER_START_TIMEOUT_S)
            except (RuntimeError, TimeoutError) as exc:
                pytest.fail(f"{exc}; server log:\n{log.read_text(errors='replace')[-3000:]}")
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture()
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        yield page
    finally:
        context.close()


def _open_dual_path(page: Page, url: str) -> None:
    page.goto(f"{url}/Dual_Path")
    page.get_by_role("heading", name="Dual Path").wait_for()
    page.get_by_role("textbox", name="Query", exact=True).wait_for()


def _fill(page: Page, label: str, text: str, *, commit: bool = True) -> None:
    """Type into a text area; ``commit`` presses Ctrl+Enter, otherwise the value is sent on blur."""
    box = page.get_by_role("textbox", name=label, exact=True)
    box.fill(text)
    if commit:
        box.press("Control+Enter")


def _set_max_tokens(page: Page, n: int) -> None:
    box = page.get_by_role("spinbutton", name="Max new tokens per answer", exact=True)
    box.fill(str(n))
    box.press("Enter")


def _run_and_wait(page: Page) -> None:
    page.get_by_role("button", name="Run both paths").click()
    page.get_by_role("heading", name="RePCS verdict").wait_for(timeout=RUN_TIMEOUT_MS)
    page.get_by_text(VERDICT).first.wait_for(timeout=RUN_TIMEOUT_MS)
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for(timeout=RUN_TIMEOUT_MS)


def _answers(page: Page) -> list[str]:
    """The texts of the two answer code blocks (the first two on the page)."""
    blocks = page.locator('[data-testid="stCode"]')
    return [blocks.nth(i).inner_text().strip() for i in range(2)]


def _screenshot_whole_page(page: Page, path: Path) -> None:
    """Streamlit scrolls inside its main container, so grow the viewport to its height before the shot."""
    height = page.evaluate(
        "() => Math.max(...['[data-testid=\"stMain\"]', '[data-testid=\"stAppViewContainer\"]']"
        ".map(s => document.querySelector(s)).filter(Boolean).map(e => e.scrollHeight), 1000)"
    )
    page.set_viewport_size({"width": 1440, "height": min(int(height) + 40, 6000)})
    page.wait_for_timeout(1500)  # let plotly re-layout at the new size
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)


def test_dual_path_flow_and_screenshot(server: str, page: Page) -> None:
    _open_dual_path(page, server)
    _set_max_tokens(page, 32)
    _fill(page, "Query", "What is the capital of Veltria?")
    # Commit the context (Ctrl+Enter) before clicking Run: clicking Run while the text area still holds an
    # uncommitted value races the blur's rerun against the click, and the click can be lost.
    _fill(page, "Context (the retrieved passage)", "The capital of the Republic of Veltria is Marrowgate.")
    _run_and_wait(page)

    assert page.get_by_text("Retrieval path (query + context)").first.is_visible()
    assert page.get_by_text("Parametric path (query only)").first.is_visible()
    answers = _answers(page)
    assert all(a and a != "…" for a in answers), answers
    page.get_by_text("The exact prompts").click()
    prompts = page.locator('[data-testid="stCode"]').filter(has_text="Republic of Veltria")
    assert prompts.count() >= 1, "the run used the context typed just before clicking Run"
    page.get_by_text("The exact prompts").click()
    assert page.get_by_text("Z = Σ KL over the window").first.is_visible()
    page.locator(".js-plotly-plot").first.wait_for()
    _screenshot_whole_page(page, SCREENSHOT)
    assert SCREENSHOT.stat().st_size > 10_000


def test_script_input_is_inert(server: str, page: Page) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    _open_dual_path(page, server)
    _set_max_tokens(page, 8)
    _fill(page, "Query", SCRIPT)
    _fill(page, "Context (the retrieved passage)", SCRIPT)
    _run_and_wait(page)

    page.get_by_text("The exact prompts").click()
    literal = page.locator('[data-testid="stCode"]').filter(has_text=SCRIPT)
    literal.first.wait_for()
    assert literal.count() >= 2, "both prompts show the input literally"
    assert page.locator("script", has_text="alert(1)").count() == 0, "no script element was injected"
    page.wait_for_timeout(500)
    assert dialogs == []


EVAL_SCREENSHOT = ROOT / "docs" / "evaluate.png"
EVAL_CSV = (
    "query,context,label,parametric_correct\n"
    "What is the capital of France?,Paris is the capital of France.,memorized,true\n"
    "Who wrote Hamlet?,Hamlet is a tragedy by William Shakespeare.,memorized,true\n"
    "How many legs does a spider have?,Spiders are arachnids with eight legs.,memorized,true\n"
    "What is the capital of Veltria?,The capital of Veltria is Marrowgate.,grounded,false\n"
    "Who founded the Orrin Guild?,The Orrin Guild was founded by Tamsin Vell.,grounded,false\n"
    "How many moons does Kessarine have?,The planet Kessarine has five moons.,grounded,false\n"
).encode()


def test_evaluate_upload_run_and_screenshot(server: str, page: Page) -> None:
    """A real file upload on the Evaluate page, a run of the default detectors, the ROC figure and table."""
    page.goto(f"{server}/Evaluate")
    page.get_by_role("heading", name="Evaluate").first.wait_for()
    _set_max_tokens(page, 6)
    page.get_by_text("Upload a CSV", exact=True).click()
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(
        files=[{"name": "six_rows.csv", "mimeType": "text/csv", "buffer": EVAL_CSV}]
    )
    page.get_by_text(re.compile(r"six_rows\.csv: 6 rows · 3 memorized · 3 grounded")).wait_for()
    page.get_by_role("button", name="Run the evaluation").click()
    page.get_by_text("6 / 6 rows scored").first.wait_for(timeout=RUN_TIMEOUT_MS)
    page.locator(".js-plotly-plot").first.wait_for(timeout=RUN_TIMEOUT_MS)
    page.locator(".js-plotly-plot text", has_text="False-positive rate").first.wait_for()
    assert page.get_by_role("button", name="Metrics (CSV)").is_visible()
    _screenshot_whole_page(page, EVAL_SCREENSHOT)
    assert EVAL_SCREENSHOT.stat().st_size > 10_000
