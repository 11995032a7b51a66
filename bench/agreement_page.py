"""The agreement view's share of the Dual Path page's run (issue 27), measured in the page itself, per example.

One process (the model loads once); for each repeat and each chosen bundled example (the order alternates each
repeat), a fresh AppTest session of ``app.py`` opens the Dual Path page, types the example and presses "Run both
paths". It times the page's run — the whole script run: both answers generated and streamed into the page, the
headline, the verdict, the agreement view, the charts — and, inside it, the agreement view
(``components.agreement.assess``, every cheap detector). The background prefetch is off (it starts after the
page has returned). Prints per example the medians of the run, of the view and of ``added = view ÷ (run −
view)``: what the view adds to the rest of the page's run, the issue's measure. Nothing is asserted.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python bench/agreement_page.py --examples 0 3 7 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from _common import set_threads
from profile_app import PAGE_TIMEOUT, _time_agreement, _timed_run

ROOT = Path(__file__).resolve().parents[1]


def one_run(example) -> tuple[float, float]:
    """(the page's run s, the agreement view s) of one fresh session running ``example``."""
    from streamlit.testing.v1 import AppTest

    from components import keys

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=PAGE_TIMEOUT)
    _timed_run(at)  # the landing page (the model loads once per process)
    at.switch_page("pages/1_Dual_Path.py")
    _timed_run(at)
    at.text_area(key=keys.widget_key(keys.QUERY)).input(example.query)
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input(example.context)
    at.button(key=keys.RUN).click()
    spent = _time_agreement()
    run_s, _ = _timed_run(at)
    if not spent:
        raise RuntimeError("the page drew no agreement view")
    return run_s, sum(spent)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, nargs="+", default=[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["READ_OR_RECALL_PREFETCH"] = "0"
    set_threads(args.threads)
    from core.examples import load_examples

    examples = load_examples()
    one_run(examples[args.examples[0]])  # warm-up: the model's load, first-use imports and assets
    seen: dict[int, list[tuple[float, float]]] = {i: [] for i in args.examples}
    for rep in range(args.repeats):
        order = args.examples if rep % 2 == 0 else list(reversed(args.examples))
        for index in order:
            seen[index].append(one_run(examples[index]))
    print("| example | page run s (median) | agreement view s | the view adds |\n|---|---|---|---|")
    added_all = []
    for index, runs in seen.items():
        added = [view / (run - view) for run, view in runs]
        added_all.append(statistics.median(added))
        print(
            f"| {index} {examples[index].query} | {statistics.median(r for r, _ in runs):.2f} | "
            f"{statistics.median(v for _, v in runs):.2f} | {statistics.median(added):.0%} |"
        )
    print(f"\nexamples={args.examples} repeats={args.repeats} threads={args.threads}")
    print(f"added_max={max(added_all):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
