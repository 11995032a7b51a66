"""A lens' cost per row against RePCS alone (issue 24), on the embedded model.

Side by side in one run, several repeats, order alternated each repeat, over the same rows of the behavior set's
report split:
  repcs   — ``evaluate``'s batched scoring of the rows (one padded generate + one teacher-forced forward per
            batch) and the ``repcs`` detector (Z from the result: free)
  <lens>  — the same, plus the lens' detectors on each row: ``lookback`` (one traced forward of the retrieval
            prompt + answer, shared by ``lookback``, ``lookback_cv`` and ``lookback_mean``), ``redeep`` (the same
            traced forward and the logit lens before/after the chosen layers' MLPs, shared by ``redeep``,
            ``redeep_ecs`` and ``redeep_pks``) or ``cheap`` (every detector ``evaluate --detectors cheap`` scores,
            over the stratified rows ``evaluate`` samples from ``assets/probes/probes.csv``, seed 42)
Prints medians (wall and process CPU seconds: with one thread the CPU time is the steadier on a shared machine),
the rows a detector failed on (one-token answers), ``<lens>_cpu_ratio=`` and as its last line
``<lens>_ratio=<median lens/repcs>`` (wall).

    python bench/lens_cost.py --lens lookback [--rows 8] [--repeats 3] [--threads 1]
    python bench/lens_cost.py --lens redeep [--rows 4] [--repeats 2]
    python bench/lens_cost.py --lens cheap --rows 8 --repeats 2 --tokens 0   # issue 27: cheap vs repcs per row
"""

from __future__ import annotations

import argparse
import csv
import statistics

from _common import median_line, set_threads, time_alternating, with_cpu_time

from core.cli.commands.evaluate import detector_names
from core.engine import DualPathSettings
from core.evaluation.data import LabeledRow, read_labeled_csv, stratified_sample
from core.evaluation.scoring import resolve_detectors, score_records
from core.io import asset_path
from core.model.loading import load_model

LENSES = {
    "lookback": ["lookback", "lookback_cv", "lookback_mean"],
    "redeep": ["redeep", "redeep_ecs", "redeep_pks"],
    "cheap": [],
}


def pick_rows(lens: str, n: int) -> list[LabeledRow]:
    """The behavior set's first ``n`` report rows, or for ``cheap`` the rows ``evaluate`` would sample."""
    if lens == "cheap":
        return stratified_sample(read_labeled_csv(asset_path("probes", "probes.csv")), n)
    with asset_path("behavior", "behavior.csv").open(encoding="utf-8", newline="") as fh:
        picked = [r for r in csv.DictReader(fh) if r["split"] == "report"][:n]
    return [LabeledRow(i + 1, r["query"], r["context"], r["label"]) for i, r in enumerate(picked)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lens", choices=sorted(LENSES), required=True)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64, help="max new tokens and T (0: the defaults)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    set_threads(args.threads)
    handle = load_model(device="cpu")
    rows = pick_rows(args.lens, args.rows)
    settings = (
        DualPathSettings(max_new_tokens=args.tokens, score_window=args.tokens) if args.tokens else DualPathSettings()
    )
    names = detector_names("cheap") if args.lens == "cheap" else ["repcs", *LENSES[args.lens]]
    detectors = {"repcs": resolve_detectors(["repcs"]), args.lens: resolve_detectors(names)}

    def job(name: str):
        def run() -> int:
            records = score_records(handle, rows, settings, detectors[name])
            return sum(1 for r in records if r.get("errors"))

        return run

    jobs = {name: job(name) for name in detectors}
    for fn in jobs.values():  # warm-up
        fn()
    timed, cpu = with_cpu_time(jobs)
    rounds, last = time_alternating(timed, args.repeats)
    for name in jobs:
        print(median_line(name, [r[name] / len(rows) for r in rounds], "s/row", digits=2))
        print(median_line(f"{name} cpu", [c / len(rows) for c in cpu[name]], "s/row", digits=2))
    ratio = statistics.median(r[args.lens] / r["repcs"] for r in rounds)
    cpu_ratio = statistics.median(a / b for a, b in zip(cpu[args.lens], cpu["repcs"]))
    print(f"rows={len(rows)} tokens<={args.tokens} threads={args.threads} repeats={args.repeats}")
    print(f"rows a detector failed on: {last[args.lens]}")
    print(f"{args.lens}_cpu_ratio={cpu_ratio:.2f}")
    print(f"{args.lens}_ratio={ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
