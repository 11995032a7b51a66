"""First paint in a real browser: how long a first visitor waits for a page's title, its inputs and the model.

For each page (``--pages``), a fresh ``streamlit run app.py`` (nothing imported, no model loaded) and a fresh
Debian chromium tab (Playwright) open the page's URL; from the navigation it times:

* **anything** — the first element of the page's main area is on screen (a heading, or a "Starting" notice);
* **title** — the page's first heading is on screen;
* **inputs** — its first input widget (text area, select box or radio) in the main area is on screen;
* **model** — the sidebar's "Loaded model" facts are on screen (the model is loaded and the page goes on);
* **idle** — the script has finished its run.

``--root`` picks the checkouts to serve (e.g. an older commit unpacked elsewhere and this one, for a before/after
table measured side by side: each page is visited on each root in turn). The machine may be shared: read the
ratios, not the seconds. Nothing is asserted.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/first_paint.py --pages start Dual_Path RADAR Evaluate
    HF_HUB_OFFLINE=1 .venv/bin/python bench/first_paint.py --via-start --pages Attention RADAR --root /tmp/before .
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _browser as browsers

ANYTHING = '[data-testid="stMain"] [data-testid="stElementContainer"]'
TITLE = '[data-testid="stMain"] h1'
INPUTS = (
    '[data-testid="stMain"] [data-testid="stTextArea"], [data-testid="stMain"] [data-testid="stSelectbox"], '
    '[data-testid="stMain"] [data-testid="stRadio"]'
)
MODEL = '[data-testid="stSidebar"] :text("Loaded model")'
MOMENTS = ("anything", "title", "inputs", "model", "idle")


def visit(browser: Any, url: str, path: str, timeout_s: float, via_start: bool = False) -> dict[str, float | None]:
    """Seconds from the navigation to the title, the inputs, the model's facts and the end of the run.

    With ``via_start`` the tab opens the landing page first and, once its example picker is on screen (the model
    is still loading; the picker now comes before the app imports PyTorch, so the libraries may be importing too),
    goes to ``path``: the times are from that navigation.
    """
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    if via_start:
        page.goto(f"{url}/start", wait_until="commit")
        page.locator(INPUTS).first.wait_for(timeout=timeout_s * 1000)
        if page.locator(MODEL).first.is_visible():
            print(f"note: the model was loaded before {path} was opened", file=sys.stderr)
    t0 = time.perf_counter()
    page.goto(f"{url}/{path}", wait_until="commit")
    seen: dict[str, float | None] = dict.fromkeys(MOMENTS)
    deadline = t0 + timeout_s
    while time.perf_counter() < deadline and None in seen.values():
        now = time.perf_counter() - t0
        for name, selector in (("anything", ANYTHING), ("title", TITLE), ("inputs", INPUTS), ("model", MODEL)):
            if seen[name] is None and page.locator(selector).first.is_visible():
                seen[name] = now
        if seen["title"] is not None:  # the last time the script stopped (a rerun starts it again)
            idle = page.evaluate(browsers.IDLE)
            seen["idle"] = (seen["idle"] if seen["idle"] is not None else now) if idle else None
        if seen["idle"] is not None and seen["model"] is None and now - seen["idle"] > 2:
            break  # finished without the model's facts (a page that does not need the model)
        page.wait_for_timeout(100)
    context.close()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", nargs="+", default=["start", "Dual_Path", "RADAR", "Evaluate"])
    parser.add_argument(
        "--root",
        type=Path,
        nargs="+",
        default=[browsers.ROOT],
        help="the checkouts to serve (default: this one); with several, each page is visited on each in turn",
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--via-start",
        action="store_true",
        help="open the landing page first and go to each page once its inputs are on screen (model still loading)",
    )
    args = parser.parse_args()
    chromium = browsers.chromium()
    if chromium is None:
        print("Debian's chromium is not on PATH (apt-get install chromium).", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    def fmt(x: float | None) -> str:
        return "—" if x is None else f"{x:.1f}"

    how = "via the landing page's example picker (model loading)" if args.via_start else "nothing imported"
    roots = [root.resolve() for root in args.root]
    for i, root in enumerate(roots):
        print(f"root {i}: {root}")
    print(f"A fresh server per page and root ({how}); seconds from the navigation.\n")
    print("| page | root | " + " | ".join(f"{m} s" for m in MOMENTS) + " |")
    print("|---|---|" + "---|" * len(MOMENTS))
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as tmp:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=browsers.CHROMIUM_ARGS)
        for path in args.pages:
            for i, root in enumerate(roots):
                proc, url = browsers.start_server(Path(tmp) / f"{path}-{i}.log", root=root)
                try:
                    seen = visit(browser, url, path, args.timeout, via_start=args.via_start)
                finally:
                    browsers.stop_server(proc)
                print(f"| {path} | {i} | " + " | ".join(fmt(seen[k]) for k in MOMENTS) + " |", flush=True)
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
