"""Every page of the app on one model, in Streamlit's AppTest (as ``tests/app`` drives them), with the time each took.

The app's loader is pointed at the model (loaded once; ``components.page.load_model``, the seam the AppTests use),
the Dual Path page runs one example, then every other page opens on that run. For each page it prints the seconds,
the exceptions and error boxes (first line each) and how many warnings it showed. No assertion: what a second model
(e.g. ``--model gemma3-270m``) can and cannot show goes into docs/models.md.

    python bench/pages_on_model.py [--model gemma3-270m] [--tokens 8] [--timeout 900]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PAGES = sorted(p.name for p in (ROOT / "pages").glob("[0-9]*_*.py"))
QUERY = "What is the capital of Veltria?"
CONTEXT = "The capital of the Republic of Veltria is Marrowgate, a port city founded by salt traders."


def _first_line(value: object) -> str:
    return str(value).strip().splitlines()[0][:200] if str(value).strip() else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from streamlit.testing.v1 import AppTest

    from components import page
    from core.model.loading import load_model

    handle = load_model(args.model, device="cpu")
    page.load_model = lambda *a, **k: handle
    page._load_handle.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=args.timeout)
    at.session_state["ror.s.max_new_tokens"] = args.tokens
    at.session_state["ror.s.score_window"] = args.tokens
    at.run()
    for name in PAGES:
        start = time.perf_counter()
        try:
            at.switch_page(f"pages/{name}").run()
            if name.startswith("1_"):
                at.text_area(key="ror.w.query").input(QUERY)
                at.text_area(key="ror.w.context").input(CONTEXT)
                at.button(key="ror.run").click().run()
            problems = [_first_line(e.value) for e in at.exception] + [_first_line(e.value) for e in at.error]
        except Exception as exc:  # noqa: BLE001 - reported, the next page runs
            problems = [f"{type(exc).__name__}: {_first_line(exc)}"]
        seconds = time.perf_counter() - start
        print(f"{name}: {seconds:.0f} s, {len(at.warning)} warning(s), problems: {problems or 'none'}", flush=True)
        for w in at.warning:
            print(f"    warning: {_first_line(w.value)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
