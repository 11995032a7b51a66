"""The Evaluate page against ``python -m core evaluate``: rows per minute on the same rows and detectors.

One process, one loaded model (the app's shared handle): the CLI's function
(:func:`core.evaluation.evaluate.evaluate_rows`) and the Evaluate page (``pages/9_Evaluate.py`` in AppTest:
the bundled probe set, a stratified sample of ``--rows`` rows, the page's default detectors — the CLI's
``--detectors cheap`` — or those of ``--detectors``, and its default settings; the run button pressed, timed
until the page has drawn its results) take turns, in alternating order, after a warm-up run of two rows that
pays the first-use costs (artefacts, fits) for both. Both run :class:`core.evaluation.scheduler.EvaluationJob`
batch by batch; the page adds its progress bar (moved at every generated token) and draws its result tabs.

It prints rows per minute for each and their ratio, and whether both scored the same numbers. Nothing is
asserted on times (the machine may be shared; read the ratio).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/evaluate_page.py --rows 8 --repeats 1
    HF_HUB_OFFLINE=1 .venv/bin/python bench/evaluate_page.py --rows 4 --detectors repcs,ppl,crm_lts,radar
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "pages" / "9_Evaluate.py")
DATA = ROOT / "assets" / "probes" / "probes.csv"
TIMEOUT = 3600.0


def cli_run(handle: Any, rows: list[Any], detectors: list[str]) -> tuple[float, dict[int, dict[str, Any]]]:
    """Seconds of one :func:`evaluate_rows` and each row's scores."""
    from core.engine import DualPathSettings
    from core.evaluation.evaluate import evaluate_rows

    t0 = time.perf_counter()
    report = evaluate_rows(handle, rows, DualPathSettings(), detectors=detectors)
    seconds = time.perf_counter() - t0
    return seconds, {r["row"]: r["scores"] for r in report["rows"]}


def page_run(n_rows: int, detectors: list[str] | None) -> tuple[float, dict[int, dict[str, Any]], list[str]]:
    """Seconds from the run button to the drawn results on the Evaluate page, each row's raw scores and the
    page's detectors."""
    from streamlit.testing.v1 import AppTest

    from components import keys

    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT).run()
    (sample,) = [n for n in at.number_input if n.label.startswith("Rows to score")]
    sample.set_value(n_rows).run()
    if detectors is not None:
        at.multiselect(key=keys.widget_key(keys.EVAL_DETECTORS)).set_value(detectors).run()
    if at.exception:
        raise RuntimeError(at.exception)
    at.button(key=keys.scoped(keys.EVAL_JOB_MAIN, "run")).click()
    t0 = time.perf_counter()
    at.run(timeout=TIMEOUT)
    seconds = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(at.exception)
    job = at.session_state[keys.EVAL_JOB_MAIN]
    if job.n_done != n_rows:
        raise RuntimeError(f"the page scored {job.n_done} of {n_rows} rows ({job.status}, {job.error})")
    return seconds, {r["row"]: r["scores"] for r in job.scored_records()}, list(job.spec.detectors)


def same_scores(a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]]) -> str:
    """How many raw scores both runs have and how many of them are equal (relative 1e-6), the largest relative
    difference of each detector that differs, and the detectors only one run scored (the cross-validated ones,
    filled out of fold)."""
    compared = equal = 0
    worst: dict[str, float] = {}
    one_sided: set[str] = set()
    for row in a.keys() | b.keys():
        for name in (a.get(row) or {}).keys() | (b.get(row) or {}).keys():
            x, y = (a.get(row) or {}).get(name), (b.get(row) or {}).get(name)
            if x is None and y is None:
                continue
            if x is None or y is None:
                one_sided.add(name)
                continue
            compared += 1
            same = math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9)
            equal += same
            if not same:
                worst[name] = max(worst.get(name, 0.0), abs(x - y) / max(abs(x), abs(y), 1e-12))
    shown = ", ".join(f"{name} {gap:.1e}" for name, gap in sorted(worst.items(), key=lambda kv: -kv[1]))
    out = f"{equal} of {compared} equal" + (f" (largest relative difference per detector: {shown})" if worst else "")
    return out + (f"; scored by one run only (out of fold): {', '.join(sorted(one_sided))}" if one_sided else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--detectors", default="cheap", help="'cheap' (the page's default choice) or names")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    from components import page
    from core.cli.commands.evaluate import detector_names
    from core.evaluation.data import read_labeled_csv, stratified_sample

    handle = page._load_handle("embedded", None)  # the app's shared handle: AppTest's page runs find it loaded
    all_rows = read_labeled_csv(DATA)
    rows = stratified_sample(all_rows, args.rows)
    cheap = detector_names(args.detectors)
    chosen = None if args.detectors == "cheap" else cheap
    cli_run(handle, stratified_sample(all_rows, 2), cheap)  # warm-up: first-use costs paid for both
    cli_s, page_s = [], []
    cli_scores: dict[int, dict[str, Any]] = {}
    page_scores: dict[int, dict[str, Any]] = {}
    page_detectors: list[str] = []
    for rep in range(args.repeats):
        order = ("cli", "page") if rep % 2 == 0 else ("page", "cli")
        for who in order:
            if who == "cli":
                seconds, cli_scores = cli_run(handle, rows, cheap)
                cli_s.append(seconds)
            else:
                seconds, page_scores, page_detectors = page_run(len(rows), chosen)
                page_s.append(seconds)
            print(f"{who}: {seconds:.1f} s for {len(rows)} rows", flush=True)
    cli_rate = 60 * len(rows) / statistics.median(cli_s)
    page_rate = 60 * len(rows) / statistics.median(page_s)
    print()
    print("| run | rows | detectors | s (median) | rows/min | ratio to the CLI |")
    print("|---|---|---|---|---|---|")
    cli_median, page_median = statistics.median(cli_s), statistics.median(page_s)
    print(f"| `evaluate_rows` (CLI) | {len(rows)} | {len(cheap)} | {cli_median:.1f} | {cli_rate:.2f} | 1.00 |")
    print(
        f"| Evaluate page (AppTest) | {len(rows)} | {len(page_detectors)} | {page_median:.1f} | "
        f"{page_rate:.2f} | {page_rate / cli_rate:.2f} |"
    )
    print()
    same = same_scores(cli_scores, page_scores)
    print(f"same detectors: {sorted(page_detectors) == sorted(cheap)}; scores: {same}")


if __name__ == "__main__":
    main()
