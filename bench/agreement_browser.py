"""The agreement view's share of a Dual Path run as a person sees it: a real browser, per bundled example.

One server (``streamlit run app.py``, offline; its model loads once), Debian's chromium (Playwright). For each
repeat and each chosen example, a fresh browser context (a new session: nothing stored) opens the Dual Path page,
types the example's query and context and presses "Run both paths". From the click it times:

* **run** — the RePCS verdict's heading is on screen (both answers streamed, scored, the headline drawn);
* **view** — the agreement view's first group summary is on screen (every cheap detector scored: it comes next
  on the page);
* **table** — the first group's table is on screen (a data grid: in a fresh tab its first draw also loads the
  grid's script, a browser-side cost).

* **all drawn** — the page's run has ended (the divergence chart, which comes after the agreement view, is drawn).

Prints per example the medians and two shares of the view (``view − run``, its scoring): against the time to the
verdict (a strict reading: the answers and the verdict alone) and against the rest of the whole run (everything
the run draws, the view's scoring taken out). Nothing is asserted (the machine may be shared: read the ratios).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/agreement_browser.py --examples 0 3 7 2 --repeats 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _browser as browsers

VERDICT = 'h3:has-text("RePCS verdict"), h2:has-text("RePCS verdict"), h4:has-text("RePCS verdict")'
SUMMARY = '.st-key-agreement_view :text("Context reliance:")'
"""The first group's summary line: drawn once every cheap detector is scored, right before the group's table."""
TABLE = '.st-key-agreement_view [data-testid="stDataFrame"]'
"""The first group's table (a data grid: its first draw in a fresh tab also loads the grid's script)."""
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
LOADED = '[data-testid="stSidebar"] :text("Loaded model")'


def one_run(browser: Any, url: str, query: str, context: str, timeout_s: float) -> tuple[float, float, float, float]:
    """Seconds from the click to the verdict, to the agreement view's first summary, to its first table and to the
    end of the page's run (everything drawn), in a fresh session."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = ctx.new_page()
    try:
        page.goto(f"{url}/Dual_Path")
        page.locator(LOADED).first.wait_for(timeout=timeout_s * 1000)
        page.wait_for_function(browsers.IDLE, timeout=timeout_s * 1000)
        for label, text in (("Query", query), ("Context (the retrieved passage)", context)):
            box = page.get_by_role("textbox", name=label, exact=True)
            box.fill(text)
            box.press("Control+Enter")
            page.wait_for_timeout(300)
            page.wait_for_function(browsers.IDLE, timeout=timeout_s * 1000)
        t0 = time.perf_counter()
        page.get_by_role("button", name="Run both paths").click()
        moments: dict[str, float] = {}
        deadline = t0 + timeout_s
        while len(moments) < 3 and time.perf_counter() < deadline:
            if page.locator(ERRORS).first.is_visible():
                raise RuntimeError(page.locator(ERRORS).first.inner_text()[:300])
            for name, selector in (("run", VERDICT), ("view", SUMMARY), ("table", TABLE)):
                if name not in moments and page.locator(selector).first.is_visible():
                    moments[name] = time.perf_counter() - t0
            page.wait_for_timeout(20)
        if len(moments) < 3:
            raise RuntimeError(f"timed out: saw {moments}")
        page.wait_for_function(browsers.IDLE, timeout=timeout_s * 1000)
        page.locator('[data-testid="stPlotlyChart"]').first.wait_for(timeout=timeout_s * 1000)
        done = time.perf_counter() - t0
        return moments["run"], moments["view"], moments["table"], done
    finally:
        ctx.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, nargs="+", default=[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    chromium = browsers.chromium()
    if chromium is None:
        print("Debian's chromium is not on PATH (apt-get install chromium).", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    from core.examples import load_examples

    examples = load_examples()
    seen: dict[int, list[tuple[float, float, float, float]]] = {i: [] for i in args.examples}
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as tmp:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=browsers.CHROMIUM_ARGS)
        proc, url = browsers.start_server(Path(tmp) / "server.log", env={"OMP_NUM_THREADS": "1"})
        try:
            warm = examples[args.examples[0]]
            one_run(browser, url, warm.query, warm.context, args.timeout)  # the model's load, first-use costs
            for rep in range(args.repeats):
                for index in args.examples if rep % 2 == 0 else list(reversed(args.examples)):
                    seen[index].append(one_run(browser, url, examples[index].query, examples[index].context, 300))
        finally:
            browsers.stop_server(proc)
            browser.close()
    print(
        "| example | click → verdict s | → the view's first summary s | → its first table s | → all drawn s | "
        "the view ÷ click → verdict | the view ÷ the rest of the whole run |"
    )
    print("|---|---|---|---|---|---|---|")
    for index, runs in seen.items():
        verdict = [(view - run) / run for run, view, _, _ in runs]
        whole = [(view - run) / (done - (view - run)) for run, view, _, done in runs]

        def med(k: int, runs=runs) -> str:
            return f"{statistics.median(r[k] for r in runs):.2f}"

        print(
            f"| {index} {examples[index].query} | {med(0)} | {med(1)} | {med(2)} | {med(3)} | "
            f"{statistics.median(verdict):.0%} | {statistics.median(whole):.0%} |"
        )
    print(f"\nexamples={args.examples} repeats={args.repeats} (OMP_NUM_THREADS=1 on the server)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
