"""The agreement view's cost against the Dual Path run it explains (issue 27), on the embedded model.

One process, one loaded model, one bundled example (``--example N``, or ``--all`` for every one). Each repeat
times, in alternating order:

  run   — ``run_dual_path`` with the page's default settings (generate both paths + the scoring pass), recording
          nothing: the plain run, the denominator;
  page  — what the Dual Path page does: ``run_dual_path(…, record=True)`` (the run keeps what its own passes read,
          ``result.internals``) and then ``core.detectors.agreement.assess`` on it (every cheap detector: its
          threshold and its score; the retrieval trace and CRM's h^0 read from the run, not recomputed);
  alone — ``assess`` on a plain result (no recording: the shared retrieval pass and CRM's h^0 run their own
          forwards), the view as it cost before the run recorded anything.

The first repeat is a warm-up (first-use loads of assets, imports) and is reported apart. Prints medians (wall and
process CPU seconds), the split of ``page`` into its run and its view, then once each cheap detector on its own
fresh input in the view's order (``detector_threshold`` alone, then ``judge``), and as its last line
``agreement_ratio=<median (page − run) / run>`` (wall): what the view adds to a run on the page.

    python bench/agreement_cost.py [--repeats 3] [--threads 1] [--example 0 | --all]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import median_line, set_threads, time_alternating, with_cpu_time

from core.detectors.agreement import assess, cheap_detectors, detector_input, detector_threshold, judge
from core.engine import DualPathSettings, run_dual_path
from core.examples import load_examples
from core.model.loading import load_model


def _timed(fn, *args) -> tuple[float, object]:
    t0 = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - t0, value


def _measure(handle, example, repeats: int) -> dict[str, list[float]]:
    settings = DualPathSettings()
    split: dict[str, list[float]] = {"page run": [], "page view": []}
    plain: dict[str, object] = {}

    def run() -> None:
        plain["result"] = run_dual_path(handle, example.query, example.context, settings)

    def page() -> None:
        t0 = time.perf_counter()
        result = run_dual_path(handle, example.query, example.context, settings, record=True)
        t1 = time.perf_counter()
        assess(handle, result, inp=detector_input(handle, result))
        split["page run"].append(t1 - t0)
        split["page view"].append(time.perf_counter() - t1)

    def alone() -> None:
        result = plain.get("result") or run_dual_path(handle, example.query, example.context, settings)
        assess(handle, result, inp=detector_input(handle, result))

    for name, job in (("run", run), ("page", page), ("alone", alone)):
        print(f"warm-up {name}: {_timed(job)[0]:.2f} s")
    split = {k: [] for k in split}
    timed, cpu = with_cpu_time({"run": run, "page": page, "alone": alone})
    rounds, _ = time_alternating(timed, repeats)
    for name in ("run", "page", "alone"):
        print(median_line(name, [r[name] for r in rounds], "s", digits=2))
        print(median_line(f"{name} cpu", cpu[name], "s", digits=2))
    for name, values in split.items():
        print(median_line(name, values, "s", digits=2))
    return {
        "added": [(r["page"] - r["run"]) / r["run"] for r in rounds],
        "alone": [r["alone"] / r["run"] for r in rounds],
        "added_cpu": [(p - r) / r for p, r in zip(cpu["page"], cpu["run"])],
        "result": [plain["result"]],  # type: ignore[list-item]
    }


def _per_detector(handle, result) -> None:
    print(f"\n{'detector (view order)':24s} {'threshold s':>12s} {'judge s':>9s}  score")
    for detector in cheap_detectors():
        inp = detector_input(handle, result)
        t_thr, _ = _timed(detector_threshold, detector, inp)
        inp = detector_input(handle, result)
        t_judge, verdict = _timed(judge, detector, inp)
        shown = verdict.score if verdict.error is None else f"error: {verdict.error[:60]}"
        print(f"{detector.name:24s} {t_thr:12.3f} {t_judge:9.3f}  {shown}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--example", type=int, default=0)
    parser.add_argument("--all", action="store_true", help="every bundled example, one after the other")
    args = parser.parse_args()
    set_threads(args.threads)
    handle = load_model(device="cpu")
    examples = load_examples()
    chosen = range(len(examples)) if args.all else [args.example]
    added, alone = [], []
    for index in chosen:
        print(f"\n## example {index}: {examples[index].query}")
        found = _measure(handle, examples[index], args.repeats)
        added.append(statistics.median(found["added"]))
        alone.append(statistics.median(found["alone"]))
        print(
            f"example={index} added={added[-1]:.2f} added_cpu={statistics.median(found['added_cpu']):.2f} "
            f"alone={alone[-1]:.2f}"
        )
        if not args.all:
            _per_detector(handle, found["result"][0])
    print(f"\nexamples={len(added)} threads={args.threads} repeats={args.repeats} detectors={len(cheap_detectors())}")
    print(f"before_ratio={statistics.median(alone):.2f}  (the view alone on a plain run ÷ the run)")
    print(f"agreement_ratio={statistics.median(added):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
