"""Rows per minute of ``evaluate --ray`` with 1 and 2 Ray workers, side by side on this machine.

One local Ray (``--cpus``, default every core), the embedded model on the CPU in each worker (one CPU and one
torch thread per worker), RePCS only, the first ``--rows`` labeled rows of assets/probes/probes.csv (both
labels alternating). Each repeat runs every worker count once, the order alternated between repeats; every run
starts its own actors, which load the model, so two figures are printed per run:

  total    — rows / (submit → last result), start-up and model loads included (what a short run sees);
  scoring  — rows / (time after the last worker had its model) (what a long run approaches).

Last lines: ``ratio_total=…`` and ``ratio_scoring=…`` (median rows/min of the most workers ÷ of 1 worker).
On a machine with W free cores the scoring ratio of 2 workers can approach 2 only when W ≥ 2 and nothing else
runs; a shared machine gives less. Equality of the two runs' rows is checked and printed.
"""

from __future__ import annotations

import argparse
import os
import statistics

from _common import median_line

from core.engine import DualPathSettings
from core.evaluation import read_labeled_csv
from core.io import asset_path
from core.scale.cluster import connect, disconnect, resources
from core.scale.ray_eval import evaluate_on_ray
from core.scale.spec import ModelSpec, planning_handle


def load_rows(n: int) -> list:
    rows = read_labeled_csv(asset_path("probes", "probes.csv"))
    mem = [r for r in rows if r.label == "memorized"]
    gro = [r for r in rows if r.label == "grounded"]
    return [r for pair in zip(mem, gro) for r in pair][:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=16, help="T (= max new tokens)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cpus", type=int, default=None, help="CPUs of the local Ray (default: every core)")
    args = parser.parse_args()

    counts = [int(w) for w in args.workers.split(",")]
    session = connect("local", num_cpus=args.cpus or os.cpu_count())
    try:
        spec = ModelSpec(device="cpu")
        planner = planning_handle(spec)
        settings = DualPathSettings(max_new_tokens=args.tokens, score_window=args.tokens)
        rows = load_rows(args.rows)
        total: dict[int, list[float]] = {w: [] for w in counts}
        scoring: dict[int, list[float]] = {w: [] for w in counts}
        startup: dict[int, list[float]] = {w: [] for w in counts}
        reports: dict[int, dict] = {}
        for rep in range(args.repeats):
            for w in counts if rep % 2 == 0 else list(reversed(counts)):
                report = evaluate_on_ray(
                    spec, rows, settings, detectors=["repcs"], batch_size=args.batch_size, noise_sigmas=(),
                    n_boot=10, workers=w, planner=planner,
                )  # fmt: skip
                stats = report["ray"]
                total[w].append(stats["items_per_minute"])
                scoring[w].append(stats["scoring_per_minute"])
                startup[w].append(stats["startup_s"])
                reports[w] = report
        print(
            f"model={planner.info.name} device=cpu T={args.tokens} rows={len(rows)} batch_size={args.batch_size} "
            f"repeats={args.repeats} ray_cpus={resources().get('CPU', 0):g} machine_cores={os.cpu_count()} "
            f"load_avg_1m={os.getloadavg()[0]:.1f}"
        )
        for w in counts:
            print(median_line(f"{w} worker(s) total  ", total[w], "rows/min", width=20))
            print(median_line(f"{w} worker(s) scoring", scoring[w], "rows/min", width=20))
            print(median_line(f"{w} worker(s) startup", startup[w], "s", width=20))
        first = reports[counts[0]]["rows"]
        for w in counts[1:]:
            same = sum(
                a["rag_answer"] == b["rag_answer"] and a["repcs_score"] == b["repcs_score"]
                for a, b in zip(first, reports[w]["rows"])
            )
            print(f"agreement {counts[0]} vs {w} worker(s): {same}/{len(first)} rows identical (answer and Z)")
        lo, hi = counts[0], counts[-1]
        print(f"ratio_total={statistics.median(total[hi]) / statistics.median(total[lo]):.2f}")
        print(f"ratio_scoring={statistics.median(scoring[hi]) / statistics.median(scoring[lo]):.2f}")
    finally:
        disconnect(session)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
