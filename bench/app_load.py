"""The app under load: K browser sessions run the Dual Path example while another session runs a noise ablation.

One real ``streamlit run app.py`` (public mode on, as in the container), one Debian chromium driven by
Playwright, one browser context (= one Streamlit session) per visitor:

1. **Solo**: one session runs the example alone; its result JSON is the reference.
2. For each K (``--ks``, default 1 4 8): a noise session first runs the clean analysis of the same example on
   the Ablations page; then, at once, the K sessions press "Run both paths" and the noise session presses
   "Run with noise". The model serves one run at a time, first come first served, so later sessions wait
   (and see "Queued: N runs ahead").

Per K it prints: runs completed, errors, p50 / p95 seconds from the click to the verdict and their ratio to
K = 1, how many sessions saw the queued notice, and how many results equal the solo run's **bit for bit**
(the downloaded result JSON, every field but ``timings``). Nothing is asserted on times (the machine is
shared); the exit code is 1 when a run failed or a result differs from the solo run.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/app_load.py --ks 1 4 8

Needs Debian's chromium on PATH (``apt-get install chromium``) and the playwright package.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _browser as browsers

from core.examples import load_examples

ROOT = Path(__file__).resolve().parents[1]
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
QUEUED = '[data-testid="stAlertContentInfo"]:has-text("Queued:")'
QUERY_LABEL, CONTEXT_LABEL = "Query", "Context (the retrieved passage)"
HEADER = "   K  completed  errors  p50 s  p95 s  p50/p50(K=1)  p95/p95(K=1)  queued  same as solo  noise run s"


@dataclass
class Visitor:
    """One browser context on the app and what happened to its run."""

    name: str
    page: Any
    clicked: float = 0.0
    seconds: float | None = None
    error: str | None = None
    saw_queue: bool = False
    result: dict[str, Any] | None = field(default=None, repr=False)


# ----------------------------------------------------------------------------------------------------------
# The server


# ----------------------------------------------------------------------------------------------------------
# One session's steps (all on the main thread: Playwright's sync API is single-threaded)


def wait_idle(page: Any, timeout_s: float) -> None:
    page.wait_for_timeout(800)  # let a rerun that an interaction triggers start
    page.wait_for_function(browsers.IDLE, timeout=timeout_s * 1000)


def open_page(browser: Any, url: str, path: str, heading: str, name: str, timeout_s: float) -> Visitor:
    context = browser.new_context(viewport={"width": 1440, "height": 1100}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(timeout_s * 1000)
    page.goto(f"{url}/{path}")
    page.get_by_role("heading", name=heading).first.wait_for()
    wait_idle(page, timeout_s)
    return Visitor(name, page)


def fill_inputs(v: Visitor, query: str, context: str, timeout_s: float) -> None:
    for label, text in ((QUERY_LABEL, query), (CONTEXT_LABEL, context)):
        box = v.page.get_by_role("textbox", name=label, exact=True)
        box.fill(text)
        box.press("Control+Enter")
        wait_idle(v.page, timeout_s)


def download_result(v: Visitor) -> dict[str, Any]:
    with v.page.expect_download() as info:
        v.page.get_by_role("button", name="Download the result (JSON)").first.click()
    data = json.loads(Path(info.value.path()).read_text(encoding="utf-8"))
    data.pop("timings", None)
    return data


def poll(visitors: list[Visitor], done_locator: str, deadline: float) -> None:
    """Until each visitor shows ``done_locator`` (or an error): record its time and whether it was queued."""
    pending = list(visitors)
    while pending and time.monotonic() < deadline:
        for v in list(pending):
            try:
                if not v.saw_queue and v.page.locator(QUEUED).count():
                    v.saw_queue = True
                if v.page.locator(ERRORS).count():
                    v.error = v.page.locator(ERRORS).first.inner_text()[:300]
                elif v.page.locator(done_locator).count():
                    v.seconds = time.monotonic() - v.clicked
                else:
                    continue
            except Exception as exc:  # noqa: BLE001 - a page that broke: count it as an error
                v.error = f"{type(exc).__name__}: {exc}"[:300]
            pending.remove(v)
        time.sleep(0.2)
    for v in pending:
        v.error = "timed out"


VERDICT = (
    'h2:has-text("RePCS verdict"), h3:has-text("RePCS verdict"), [data-testid="stHeading"]:has-text("RePCS verdict")'
)


def run_round(browser: Any, url: str, example: Any, k: int, timeout_s: float, noise: bool) -> dict[str, Any]:
    """K Dual Path sessions (and the noise session) started together; returns this round's figures."""
    noise_v = None
    if noise:
        noise_v = open_page(browser, url, "Ablations", "Ablations", "noise", timeout_s)
        fill_inputs(noise_v, example.query, example.context, timeout_s)
        noise_v.page.get_by_role("button", name="Run the clean analysis").click()
        noise_v.page.get_by_role("button", name="Run with noise").wait_for(timeout=timeout_s * 1000)
        wait_idle(noise_v.page, timeout_s)
    visitors = [open_page(browser, url, "Dual_Path", "Dual Path", f"v{i}", timeout_s) for i in range(k)]
    for v in visitors:
        fill_inputs(v, example.query, example.context, timeout_s)
    if noise_v is not None:
        noise_v.clicked = time.monotonic()
        noise_v.page.get_by_role("button", name="Run with noise").click()
    for v in visitors:
        v.clicked = time.monotonic()
        v.page.get_by_role("button", name="Run both paths").click()
    deadline = time.monotonic() + timeout_s
    poll(visitors, VERDICT, deadline)
    for v in visitors:
        if v.error is None:
            try:
                wait_idle(v.page, timeout_s)
                v.result = download_result(v)
            except Exception as exc:  # noqa: BLE001
                v.error = f"download: {type(exc).__name__}: {exc}"[:300]
    noise_s = None
    if noise_v is not None:
        try:
            wait_idle(noise_v.page, max(1.0, deadline - time.monotonic()))
            if noise_v.page.locator(ERRORS).count():
                noise_v.error = noise_v.page.locator(ERRORS).first.inner_text()[:300]
            noise_s = time.monotonic() - noise_v.clicked
        except Exception as exc:  # noqa: BLE001
            noise_v.error = f"{type(exc).__name__}"
    for v in [*visitors, *([noise_v] if noise_v else [])]:
        v.page.context.close()
    return {"visitors": visitors, "noise": noise_v, "noise_s": noise_s}


def _pct(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 4, 8], help="concurrent Dual Path sessions")
    parser.add_argument("--example", default="veltria-capital", help="the bundled example's id")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per round")
    parser.add_argument("--no-noise", action="store_true", help="leave out the noise-ablation session")
    parser.add_argument("--not-public", action="store_true", help="run the app without READ_OR_RECALL_PUBLIC=1")
    args = parser.parse_args()
    chromium = browsers.chromium()
    if chromium is None:
        print("Debian's chromium is not on PATH (apt-get install chromium).", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    example = next(e for e in load_examples() if e.id == args.example)
    log = Path(tempfile.mkdtemp(prefix="app-load-")) / "server.log"
    proc, url = browsers.start_server(log, env=None if args.not_public else {"READ_OR_RECALL_PUBLIC": "1"})
    failed = False
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True, args=browsers.CHROMIUM_ARGS)
            solo = run_round(browser, url, example, 1, args.timeout, noise=False)["visitors"][0]
            if solo.result is None:
                print(f"the solo run failed: {solo.error}; server log: {log}", file=sys.stderr)
                return 1
            print(f"solo run: {solo.seconds:.1f} s to the verdict · verdict {solo.result.get('verdict')!r} · "
                  f"Z = {solo.result.get('repcs_score'):.4f}")  # fmt: skip
            print()
            print(
                "   K  completed  errors  p50 s  p95 s  p50/p50(K=1)  p95/p95(K=1)  queued  same as solo  noise run s"
            )
            base: tuple[float, float] | None = None
            for k in args.ks:
                r = run_round(browser, url, example, k, args.timeout, noise=not args.no_noise)
                done = [v for v in r["visitors"] if v.seconds is not None and v.error is None]
                errors = [v for v in r["visitors"] if v.error is not None]
                if r["noise"] is not None and r["noise"].error:
                    errors.append(r["noise"])
                times = sorted(v.seconds for v in done)
                same = sum(v.result == solo.result for v in done if v.result is not None)
                p50, p95 = (_pct(times, 50), _pct(times, 95)) if times else (float("nan"), float("nan"))
                if base is None and times:
                    base = (p50, p95)
                ratio = (p50 / base[0], p95 / base[1]) if base else (float("nan"), float("nan"))
                noise_s = f"{r['noise_s']:.1f}" if r["noise_s"] is not None else "—"
                print(f"{k:>4}  {len(done):>5}/{k:<3}  {len(errors):>6}  {p50:>5.1f}  {p95:>5.1f}  {ratio[0]:>12.2f}  "
                      f"{ratio[1]:>12.2f}  {sum(v.saw_queue for v in r['visitors']):>6}  {same:>6}/{len(done):<5}  "
                      f"{noise_s:>11}")  # fmt: skip
                for v in errors:
                    print(f"      error in {v.name}: {v.error}")
                failed = failed or bool(errors) or same != len(done)
            browser.close()
    finally:
        browsers.stop_server(proc)
    print(f"\nserver log: {log}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
