"""The agreement view's cost against the Dual Path run it explains (issue 27), on the embedded model.

One process, one loaded model, the first bundled example (or ``--example N``). Each repeat:

  run        — ``run_dual_path`` with the page's default settings (generate both paths + the scoring pass)
  agreement  — ``core.detectors.agreement.assess`` on that result with a fresh ``DetectorInput`` (every cheap
               detector: its threshold and its score; the shared passes paid once, as on the page)

then, once, each cheap detector on its own fresh input in the view's order (``detector_threshold`` alone, then
``judge``), so a reader sees who pays for what. The first repeat is a warm-up (first-use loads of assets,
imports) and is reported apart. Prints medians (wall and process CPU seconds), ``agreement_cpu_ratio=`` and, as
its last line, ``agreement_ratio=<median assess/run>`` (wall).

    python bench/agreement_cost.py [--repeats 3] [--threads 1] [--example 0]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--example", type=int, default=0)
    args = parser.parse_args()
    set_threads(args.threads)
    handle = load_model(device="cpu")
    example = load_examples()[args.example]
    settings = DualPathSettings()
    state: dict[str, object] = {}

    def run() -> None:
        state["result"] = run_dual_path(handle, example.query, example.context, settings)

    def view() -> None:
        result = state.get("result") or run_dual_path(handle, example.query, example.context, settings)
        assess(handle, result, inp=detector_input(handle, result))

    warm_run, _ = _timed(run)
    warm_view, _ = _timed(view)
    print(f"warm-up (first use in this process): run {warm_run:.2f} s, agreement {warm_view:.2f} s")
    timed, cpu = with_cpu_time({"run": run, "agreement": view})
    rounds, _ = time_alternating(timed, args.repeats)
    for name in ("run", "agreement"):
        print(median_line(name, [r[name] for r in rounds], "s", digits=2))
        print(median_line(f"{name} cpu", cpu[name], "s", digits=2))

    result = state["result"]
    print(f"\n{'detector (view order)':24s} {'threshold s':>12s} {'judge s':>9s}  score")
    for detector in cheap_detectors():
        inp = detector_input(handle, result)
        t_thr, _ = _timed(detector_threshold, detector, inp)
        inp = detector_input(handle, result)
        t_judge, verdict = _timed(judge, detector, inp)
        shown = verdict.score if verdict.error is None else f"error: {verdict.error[:60]}"
        print(f"{detector.name:24s} {t_thr:12.3f} {t_judge:9.3f}  {shown}")
    ratio = statistics.median(r["agreement"] / r["run"] for r in rounds)
    print(f"\nexample={args.example} threads={args.threads} repeats={args.repeats} detectors={len(cheap_detectors())}")
    print(f"agreement_cpu_ratio={statistics.median(a / b for a, b in zip(cpu['agreement'], cpu['run'])):.2f}")
    print(f"agreement_ratio={ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
