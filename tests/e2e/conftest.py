"""Browser-test fixtures: one real `streamlit run app.py` for the whole session, Debian's chromium driven by
Playwright, and :class:`AppPage`, the few interactions every browser test needs, written so that they wait
for the app the way a person does (for the page to stop running) instead of racing its reruns.

Screenshots and other artefacts go to :func:`artifacts` (``$READ_OR_RECALL_ARTIFACTS``, default the ignored
``out/e2e/``), never into the tracked tree: ``make screenshots`` runs the README flows with the variable set
and copies the two images into ``docs/`` itself. A failing browser test leaves a screenshot of its page there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bench._browser import CHROMIUM_ARGS, ServerError, chromium, start_server, stop_server

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS_ENV = "READ_OR_RECALL_ARTIFACTS"
DEFAULT_ARTIFACTS = ROOT / "out" / "e2e"
CHROMIUM = chromium()
SERVER_START_TIMEOUT_S = 120
RUN_TIMEOUT_MS = 300_000  # a full dual-path run of the embedded model on a busy CPU
STEP_TIMEOUT_MS = 120_000  # one rerun after an interaction (the first one loads the model)
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'


class Server:
    """A running app: its URL and the tail of its log (for failure messages)."""

    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log

    def log_tail(self, n_chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n_chars:]
        except OSError:
            return "(no server log)"


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """The folder browser tests write screenshots into: ``$READ_OR_RECALL_ARTIFACTS`` (relative paths are taken
    from the repository root) or ``out/e2e/`` (ignored by git). Created if missing; never inside ``docs/``
    unless the caller asked for it."""
    folder = Path(os.environ.get(ARTIFACTS_ENV) or DEFAULT_ARTIFACTS)
    if not folder.is_absolute():
        folder = ROOT / folder
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the test item, so the ``app`` fixture knows whether its test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real `streamlit run app.py` on a free port, shared by every browser test; always terminated."""
    if CHROMIUM is None:
        pytest.skip(
            "Debian's chromium is not on PATH (`apt-get install chromium` or `make browser`); "
            "Playwright cannot download its own browsers here."
        )
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    try:
        proc, url = start_server(log, timeout_s=SERVER_START_TIMEOUT_S)
    except ServerError as exc:
        pytest.fail(f"{exc}; log:\n{log.read_text(errors='replace')[-3000:]}")
    try:
        yield Server(url, log)
    finally:
        stop_server(proc)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not on PATH (`apt-get install chromium` or `make browser`).")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class AppPage:
    """One browser tab on the app (its own Streamlit session), with interactions that wait like a user."""

    def __init__(self, page: Page, server: Server) -> None:
        self.page = page
        self.server = server

    # -- waiting ------------------------------------------------------------------------------------------
    def wait_idle(self, timeout_ms: int = STEP_TIMEOUT_MS) -> None:
        """Wait until the app's script is not running (what the running indicator shows a person)."""
        self.page.wait_for_function(
            "() => document.querySelector('[data-test-script-state]')?.getAttribute('data-test-script-state')"
            " === 'notRunning'",
            timeout=timeout_ms,
        )

    def settle(self, timeout_ms: int = STEP_TIMEOUT_MS) -> None:
        """After an interaction: let the rerun it triggers start (up to 1.5 s), then wait for it to end."""
        self.page.evaluate(
            """() => new Promise(resolve => {
                const el = document.querySelector('[data-test-script-state]');
                const running = () => el && el.getAttribute('data-test-script-state') === 'running';
                if (!el || running()) return resolve(true);
                const obs = new MutationObserver(() => { if (running()) { obs.disconnect(); resolve(true); } });
                obs.observe(el, {attributes: true});
                setTimeout(() => { obs.disconnect(); resolve(false); }, 1500);
            })"""
        )
        self.wait_idle(timeout_ms)

    def fail_on_error(self) -> None:
        """Fail with the app's own message when it shows an error box or an exception."""
        errors = self.page.locator(ERRORS)
        if errors.count():
            pytest.fail(f"the app showed an error: {errors.first.inner_text()[:2000]}")

    def diagnose(self, what: str) -> str:
        """A failure message with what the page shows and the server log's tail."""
        text = self.page.locator('[data-testid="stMain"]').first.inner_text()[-3000:]
        return f"{what}\n--- page text ---\n{text}\n--- server log ---\n{self.server.log_tail()}"

    # -- navigation and input -----------------------------------------------------------------------------
    def open(self, path: str, heading: str) -> None:
        self.page.goto(f"{self.server.url}/{path}")
        self.page.get_by_role("heading", name=heading).first.wait_for(timeout=RUN_TIMEOUT_MS)
        self.wait_idle(RUN_TIMEOUT_MS)  # the first page of a session may load the model

    def fill(self, label: str, text: str) -> None:
        """Type into a text area and commit it (Ctrl+Enter), then check the app kept what was typed."""
        self.wait_idle()
        box = self.page.get_by_role("textbox", name=label, exact=True)
        box.fill(text)
        box.press("Control+Enter")
        self.settle()
        assert box.input_value() == text, self.diagnose(f"the {label!r} box lost what was typed")

    def set_number(self, label: str, value: int) -> None:
        self.wait_idle()
        box = self.page.get_by_role("spinbutton", name=label, exact=True)
        box.fill(str(value))
        box.press("Enter")
        self.settle()
        assert box.input_value() == str(value), self.diagnose(f"{label!r} did not keep {value}")

    def click_and_wait(self, button: str, done: Any, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
        """Click a button once the app is idle and wait for ``done`` (a locator) or an error box."""
        self.wait_idle()
        self.page.get_by_role("button", name=button).click()
        outcome = done.or_(self.page.locator(ERRORS)).first
        try:
            outcome.wait_for(timeout=timeout_ms)
        except Exception as exc:  # noqa: BLE001 - a timeout: say what the page shows instead
            pytest.fail(self.diagnose(f"after clicking {button!r}: {type(exc).__name__}"))
        self.fail_on_error()

    def run_dual_path(self) -> None:
        """Press Run, then wait for the verdict heading, the run to end and the divergence chart."""
        self.click_and_wait("Run both paths", self.page.get_by_role("heading", name="RePCS verdict"))
        self.wait_idle(RUN_TIMEOUT_MS)
        self.page.locator('[data-testid="stPlotlyChart"]').first.wait_for()

    def dual_path_run(self, query: str, context: str, max_new_tokens: int) -> None:
        """Open the Dual Path page, set the answer length, type the query and the context, and run both paths."""
        self.open("Dual_Path", "Dual Path")
        self.set_number("Max new tokens per answer", max_new_tokens)
        self.fill("Query", query)
        self.fill("Context (the retrieved passage)", context)
        self.run_dual_path()

    def screenshot_whole_page(self, path: Path) -> None:
        """Streamlit scrolls inside its main container, so grow the viewport to its height before the shot."""
        height = self.page.evaluate(
            "() => Math.max(...['[data-testid=\"stMain\"]', '[data-testid=\"stAppViewContainer\"]']"
            ".map(s => document.querySelector(s)).filter(Boolean).map(e => e.scrollHeight), 1000)"
        )
        self.page.set_viewport_size({"width": 1440, "height": min(int(height) + 40, 7000)})
        self.page.wait_for_timeout(1500)  # let plotly re-layout at the new size
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=True)


@pytest.fixture
def app(request: pytest.FixtureRequest, browser: Browser, server: Server, artifacts: Path) -> Iterator[AppPage]:
    """A fresh browser context (a new Streamlit session) on the shared server; when the test fails, a
    screenshot of its page is saved as ``<artifacts>/failed-<test name>.png``."""
    context = browser.new_context(viewport={"width": 1440, "height": 1100})
    page = context.new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    try:
        yield AppPage(page, server)
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            # the page may be gone; the test's own failure is what matters
            with contextlib.suppress(Exception):
                page.screenshot(path=str(artifacts / f"failed-{request.node.name}.png"), full_page=True)
    finally:
        context.close()
