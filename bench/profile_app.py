"""Where a visitor waits: imports, the model load, each page's first visit, and what each detector costs per row.

The profile behind docs/performance.md (issue 27). Nothing is asserted; the machine may be shared, so read the
ratios, not the seconds. Sections (``--sections``, default all of them):

* ``imports`` — a fresh interpreter imports what the app's first script run imports (``components.page``,
  the detector catalog, scikit-learn);
* ``load`` — a fresh interpreter loads the embedded model (:func:`core.model.loading.load_model`);
* ``pages`` — one AppTest session through app.py's navigation: the landing page (its first run loads the
  model), a Dual Path run of the first bundled example, then each page's first visit after that run and a
  second run of the same page, each first visit sampled every 10 ms (its three most expensive project
  functions, cumulative); twice, each in a fresh interpreter: without the prefetch of the run's views
  (:mod:`components.prefetch`) and with it (the visits start once it is done);
* ``evaluate`` — ``evaluate --detectors repcs`` and ``--detectors cheap`` on the same stratified rows, each in a
  fresh interpreter (fixed costs included: first-use fits, bases, artefacts), and what each cheap detector adds
  per row on top of the dual-path run (each detector's own calls timed; a shared pass is paid by the first
  detector that needs it).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/profile_app.py                      # everything, ~6 min on 2 cores
    HF_HUB_OFFLINE=1 .venv/bin/python bench/profile_app.py --sections evaluate --rows 8

It prints one markdown table per section.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "assets" / "probes" / "probes.csv"
PAGE_TIMEOUT = 900.0
PROJECT_DIRS = (*tuple(str(ROOT / d) for d in ("core", "components", "pages")), str(ROOT / "app.py"))


# ----------------------------------------------------------------------------------------------------------
# Workers (each runs in a fresh interpreter and prints one JSON line)


def worker_imports() -> dict[str, float]:
    out = {}
    for module in ("streamlit", "torch", "transformers", "components.page", "core.detectors.catalog", "sklearn"):
        t0 = time.perf_counter()
        __import__(module)
        out[module] = time.perf_counter() - t0
    return out


def worker_load() -> dict[str, float]:
    from core.model.loading import load_model

    t0 = time.perf_counter()
    load_model()
    return {"load_model": time.perf_counter() - t0}


def _rows(n: int) -> list[Any]:
    from core.evaluation.data import read_labeled_csv, stratified_sample

    return stratified_sample(read_labeled_csv(DATA), n)


def cheap_names() -> list[str]:
    """What ``--detectors cheap`` scores (core/cli/commands/evaluate.py)."""
    from core.cli.commands.evaluate import detector_names

    return detector_names("cheap")


def worker_evaluate(detectors: str, n_rows: int) -> dict[str, Any]:
    """One ``evaluate`` of ``n_rows`` stratified rows after the model load, with each part timed."""
    import core.evaluation.evaluate as evaluate_mod
    import core.evaluation.scheduler as scheduler
    import core.evaluation.scoring as scoring
    from core.engine import DualPathSettings
    from core.model.loading import load_model

    t0 = time.perf_counter()
    handle = load_model()
    load_s = time.perf_counter() - t0
    spent: dict[str, float] = defaultdict(float)
    names = cheap_names() if detectors == "cheap" else detectors.split(",")

    def timed(name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t

        return call

    resolve = scoring.resolve_detectors

    def resolve_timed(chosen: Any) -> dict[str, Any]:
        out = {}
        for name, det in resolve(chosen).items():
            changes = {"score": timed(name, det.score)}
            if det.features is not None:
                changes["features"] = timed(name, det.features)
            out[name] = dataclasses.replace(det, **changes)
        return out

    scheduler.resolve_detectors = resolve_timed
    scoring.score_batch = timed("dual-path batch (generate + teacher-forced)", scoring.score_batch)
    evaluate_mod.summarize = timed("summary (metrics, bootstrap)", evaluate_mod.summarize)
    rows = _rows(n_rows)
    t0 = time.perf_counter()
    evaluate_mod.evaluate_rows(handle, rows, DualPathSettings(), detectors=names)
    total = time.perf_counter() - t0
    return {"load_s": load_s, "total_s": total, "rows": len(rows), "parts": dict(spent), "detectors": names}


def run_worker(*args: str) -> dict[str, Any]:
    """Run this script as a worker in a fresh interpreter; its last stdout line is JSON."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", *args], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------------------
# Pages (in this process, one AppTest session)


class Sampler:
    """A small sampling profiler of every thread but its own (AppTest runs the page in a script thread, which
    cProfile does not see): every ``interval`` seconds it notes each project function on a stack once, so a
    function's count × interval is its cumulative time."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.counts: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                seen = set()
                while frame is not None:
                    path, name = frame.f_code.co_filename, frame.f_code.co_name
                    if path.startswith(PROJECT_DIRS) and name not in SKIPPED:
                        seen.add(f"{Path(path).relative_to(ROOT)}:{name}")
                    frame = frame.f_back
                self.counts.update(seen)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def top(self, n: int = 3) -> str:
        """The ``n`` project functions with the most cumulative time."""
        return ", ".join(f"`{where}` {count * self.interval:.1f} s" for where, count in self.counts.most_common(n))


SKIPPED = {"<module>", "main", "run", "open_page", "landing", "_run_script", "exec_func_with_error_handling"}


def _timed_run(at: Any, profile: bool = False) -> tuple[float, str]:
    sampler = Sampler() if profile else None
    t0 = time.perf_counter()
    if sampler is not None:
        sampler.__enter__()
    try:
        at.run(timeout=PAGE_TIMEOUT)
    finally:
        if sampler is not None:
            sampler.__exit__()
    seconds = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(f"page raised: {at.exception}")
    return seconds, sampler.top() if sampler is not None else ""


def _time_agreement() -> list[float]:
    """Time the Dual Path page's agreement view (``components.agreement.assess``); returns the list it fills."""
    try:
        import components.agreement as view
    except ImportError:
        return []
    spent: list[float] = []
    assess = view.assess

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return assess(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t0)

    view.assess = timed
    return spent


def profile_pages(prefetched: bool = True) -> list[tuple[str, float, float | None, str]]:
    """``(page, first visit s, second run s, what the first visit spent its time on)`` in one session.

    With ``prefetched`` the run's views are prepared in the background after the Dual Path run
    (:mod:`components.prefetch`, as under ``streamlit run``); the first visits start once that is done (a
    visitor reading the result), and a row says how long it took after the run's page had returned.
    """
    os.environ["READ_OR_RECALL_PREFETCH"] = "1" if prefetched else "0"
    from streamlit.testing.v1 import AppTest

    from components import keys
    from core.examples import load_examples

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=PAGE_TIMEOUT)
    out = []
    first, top = _timed_run(at, profile=True)
    second, _ = _timed_run(at)
    out.append(("Start (app.py), first run: loads the model", first, second, top))
    example = load_examples()[0]
    at.switch_page("pages/1_Dual_Path.py")
    first, top = _timed_run(at, profile=True)
    at.text_area(key=keys.widget_key(keys.QUERY)).input(example.query)
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input(example.context)
    at.button(key=keys.RUN).click()
    agreement = _time_agreement()
    run_s, run_top = _timed_run(at, profile=True)
    out.append(("1 Dual Path (before a run)", first, None, top))
    out.append(("1 Dual Path: the run of the first example", run_s, None, run_top))
    if agreement:
        out.append(("… of which the agreement view (`assess`: every cheap detector)", sum(agreement), None, ""))
    if prefetched:
        from components import prefetch

        t0 = time.perf_counter()
        done = (
            at.session_state[prefetch.SESSION_KEY].wait(PAGE_TIMEOUT)
            if prefetch.SESSION_KEY in at.session_state
            else False
        )
        waited = time.perf_counter() - t0
        out.append((f"the run's views prepared in the background ({'done' if done else 'NOT done'})", waited, None, ""))
    for script in sorted((ROOT / "pages").glob("[0-9]*_*.py"), key=lambda p: int(p.stem.split("_", 1)[0])):
        if script.name.startswith("1_"):
            continue
        at.switch_page(f"pages/{script.name}")
        first, top = _timed_run(at, profile=True)
        second, _ = _timed_run(at)
        out.append(
            (f"{script.stem.replace('_', ' ', 1).replace('_', ' ')} (first visit after the run)", first, second, top)
        )
    return out


# ----------------------------------------------------------------------------------------------------------
# Tables


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def imports_table() -> str:
    result = run_worker("imports")
    rows = [[f"`import {m}`", f"{s:.2f}"] for m, s in result.items()]
    return "Imports (fresh interpreter, in this order; each line is what that import adds)\n\n" + table(
        ["what", "s"], rows
    )


def load_table() -> str:
    result = run_worker("load")
    return "Model load (fresh interpreter, imports done)\n\n" + table(
        ["what", "s"], [["`load_model()` (embedded)", f"{result['load_model']:.2f}"]]
    )


def worker_pages(mode: str) -> list[tuple[str, float, float | None, str]]:
    return profile_pages(prefetched=mode == "on")


def pages_table() -> str:
    """Both modes side by side, each in a fresh interpreter (no cache shared between them): without the
    prefetch (what a first visit computes itself) and with it."""
    off, on = run_worker("pages", "off"), run_worker("pages", "on")
    found = {name: (first, second, top) for name, first, second, top in off}
    rows = []
    for name, first, second, top in on:
        before = found.get(name)
        rows.append(
            [
                name,
                "—" if before is None else f"{before[0]:.2f}",
                f"{first:.2f}",
                "—" if second is None else f"{second:.2f}",
                (before[2] if before is not None else "") or "—",
                top or "—",
            ]
        )
    return "Pages (AppTest, one session per column, the model loaded by the first run)\n\n" + table(
        [
            "page",
            "no prefetch: first visit s",
            "prefetch: first visit s",
            "prefetch: second run s",
            "where the first visit's time went (no prefetch)",
            "(prefetch)",
        ],
        rows,
    )


def evaluate_table(n_rows: int) -> str:
    repcs = run_worker("evaluate", "repcs", str(n_rows))
    cheap = run_worker("evaluate", "cheap", str(n_rows))
    n = cheap["rows"]
    base = repcs["total_s"] / n
    rows = [
        ["`--detectors repcs` (fixed costs included)", f"{repcs['total_s']:.1f}", f"{base:.2f}", "1.00"],
        [
            f"`--detectors cheap` ({len(cheap['detectors'])} detectors, fixed costs included)",
            f"{cheap['total_s']:.1f}",
            f"{cheap['total_s'] / n:.2f}",
            f"{cheap['total_s'] / repcs['total_s']:.2f}",
        ],
    ]
    for part, seconds in sorted(cheap["parts"].items(), key=lambda kv: -kv[1]):
        rows.append([f"… of which {part}", f"{seconds:.1f}", f"{seconds / n:.2f}", f"{seconds / repcs['total_s']:.2f}"])
    head = (
        f"Evaluate on {n} stratified rows of assets/probes/probes.csv (seed 42), default settings, each run in a "
        f"fresh interpreter after its model load; ratio = to `--detectors repcs`. A shared pass is paid by the "
        f"first detector that needs it (in registry order).\n\n"
    )
    return head + table(["run", "s", "s per row", "ratio"], rows)


SECTIONS = {"imports": imports_table, "load": load_table, "pages": pages_table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default="imports,load,pages,evaluate")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        result = {"imports": worker_imports, "load": worker_load}.get(kind)
        if kind == "pages":
            out: Any = worker_pages(rest[0])
        else:
            out = result() if result else worker_evaluate(rest[0], int(rest[1]))
        print(json.dumps(out))
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"Machine: {os.cpu_count()} CPUs visible; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    for section in args.sections.split(","):
        text = evaluate_table(args.rows) if section == "evaluate" else SECTIONS[section]()
        print(f"### {section}\n\n{text}\n", flush=True)


if __name__ == "__main__":
    main()
