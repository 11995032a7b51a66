"""First paint in a real browser: how long a first visitor waits for a page's title, its inputs and the model.

For each page (``--pages``), a fresh ``streamlit run app.py`` (nothing imported, no model loaded) and a fresh
Debian chromium tab (Playwright) open the page's URL; from the navigation it times:

* **anything** — the first element of the page's main area is on screen (a heading, or a "Starting" notice);
* **title** — the page's first heading is on screen;
* **inputs** — its first input widget (text area, select box or radio) in the main area is on screen;
* **model** — the sidebar's "Loaded model" facts are on screen (the model is loaded and the page goes on);
* **idle** — the script has finished its run.

``--root`` picks the checkout to serve (e.g. an older commit unpacked elsewhere, for a before/after table). The
machine may be shared: read the ratios, not the seconds. Nothing is asserted.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/first_paint.py --pages start Dual_Path RADAR Evaluate
    HF_HUB_OFFLINE=1 .venv/bin/python bench/first_paint.py --via-start --pages Dual_Path RADAR Evaluate
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
ANYTHING = '[data-testid="stMain"] [data-testid="stElementContainer"]'
TITLE = '[data-testid="stMain"] h1'
INPUTS = (
    '[data-testid="stMain"] [data-testid="stTextArea"], [data-testid="stMain"] [data-testid="stSelectbox"], '
    '[data-testid="stMain"] [data-testid="stRadio"]'
)
MODEL = '[data-testid="stSidebar"] :text("Loaded model")'
IDLE = (
    "() => document.querySelector('[data-test-script-state]')?.getAttribute('data-test-script-state') === 'notRunning'"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(root: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A fresh server of ``root``'s app.py (its own ``core`` first on the path)."""
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
           str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"streamlit exited early; see {log}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"streamlit was not healthy within 120 s; see {log}")


def visit(browser: Any, url: str, path: str, timeout_s: float, via_start: bool = False) -> dict[str, float | None]:
    """Seconds from the navigation to the title, the inputs, the model's facts and the end of the run.

    With ``via_start`` the tab opens the landing page first and, once its example picker is on screen (the
    libraries are imported; the model is still loading), goes to ``path``: the times are from that navigation.
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
    seen: dict[str, float | None] = {"anything": None, "title": None, "inputs": None, "model": None, "idle": None}
    deadline = t0 + timeout_s
    while time.perf_counter() < deadline and None in seen.values():
        now = time.perf_counter() - t0
        for name, selector in (("anything", ANYTHING), ("title", TITLE), ("inputs", INPUTS), ("model", MODEL)):
            if seen[name] is None and page.locator(selector).first.is_visible():
                seen[name] = now
        if seen["title"] is not None and seen["idle"] is None and page.evaluate(IDLE):
            seen["idle"] = now
        if seen["idle"] is not None and seen["model"] is None and now - seen["idle"] > 2:
            break  # finished without the model's facts (a page that does not need the model)
        page.wait_for_timeout(100)
    context.close()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", nargs="+", default=["start", "Dual_Path", "RADAR", "Evaluate"])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to serve (default: this one)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--via-start",
        action="store_true",
        help="open the landing page first and go to each page once its inputs are on screen (model still loading)",
    )
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("Debian's chromium is not on PATH (apt-get install chromium).", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    def fmt(x: float | None) -> str:
        return "—" if x is None else f"{x:.1f}"

    how = "via the landing page (libraries imported, model loading)" if args.via_start else "nothing imported"
    print(f"Serving {args.root}; a fresh server per page ({how}).\n")
    print("| page | anything s | title s | inputs s | model loaded s | run finished s |")
    print("|---|---|---|---|---|---|")
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as tmp:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        for path in args.pages:
            proc, url = start_server(args.root.resolve(), Path(tmp) / f"{path}.log")
            try:
                seen = visit(browser, url, path, args.timeout, via_start=args.via_start)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            cells = " | ".join(fmt(seen[k]) for k in ("anything", "title", "inputs", "model", "idle"))
            print(f"| {path} | {cells} |", flush=True)
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
