"""A calibration's scoring stage against ``evaluate --detectors cheap --swap-test`` on the same rows (issue 41 B).

One process, one loaded model, the first ``--rows`` bundled calibration rows that fit the model's token budget
(``assets/validation/rows.csv``, knownness not asked: both sides score the same rows). Each repeat times, in
alternating order:

  evaluate — :func:`core.evaluation.evaluate.evaluate_rows` with every cheap detector and ``swap_test=True`` (the
             rows labeled alternately: the labels only feed the metrics, not the work), its default batch size;
  calibrate — what ``calibrate-model``'s scoring stages do for the same rows: :func:`score_rows` in batches of
             :func:`batch_size_for` (every live detector's score and the fitted detectors' per-row features from
             one recorded run per row), ReDeEP's every-layer PKS of each row (the later ``redeep-pks`` stage: one
             traced forward per stored run), then :func:`swap_stage`'s swap tests of the rows whose context agrees
             with memory.

Prints the median seconds per row of each and, as its last line, ``calibration_ratio=<median calibrate /
evaluate>`` (wall, per row; the issue's bar is ≤ 2).

    python bench/calibration_cost.py [--rows 16] [--repeats 2] [--threads 0] [--model embedded]
"""

from __future__ import annotations

import argparse
import statistics

from _common import median_line, set_threads, time_alternating

from core.detectors.agreement import cheap_detectors
from core.engine import DualPathSettings
from core.engine.axes import observe
from core.engine.swap import run_swap_tests
from core.evaluation.calibrate.budget import batch_size_for
from core.evaluation.calibrate.rows import read_rows
from core.evaluation.calibrate.score import SWAP_LEVEL, fits_budget, score_rows
from core.evaluation.constructions import AGREEING, CALIBRATION
from core.evaluation.data import LabeledRow
from core.evaluation.evaluate import evaluate_rows
from core.methods.crm import load_basis
from core.methods.redeep import DEFAULT_K_PERCENT, redeep_trace, row_means
from core.model.loading import load_model
from core.model.prompts import resolve_template


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    set_threads(args.threads)
    handle = load_model(args.model)
    settings = DualPathSettings()
    rows = [r for r in read_rows() if r.split == CALIBRATION and fits_budget(handle, r, settings)][: args.rows]
    template = resolve_template(settings.template, handle.tokenizer).key
    basis = load_basis(handle, template)
    batch = batch_size_for(handle, settings)
    labeled = [LabeledRow(i + 1, r.query, r.context, ("grounded", "memorized")[i % 2]) for i, r in enumerate(rows)]
    names = [d.name for d in cheap_detectors()]
    agreeing = sum(r.relation == AGREEING for r in rows)

    def evaluate() -> object:
        return evaluate_rows(handle, labeled, settings, detectors=names, swap_test=True, noise_sigmas=(), n_boot=10)

    def calibrate() -> object:
        records = []
        for start in range(0, len(rows), batch):
            records += score_rows(handle, rows[start : start + batch], settings, basis)
        for r in records:  # what redeep-pks adds per row (after the headline's fits)
            row_means(redeep_trace(handle, r.result, DEFAULT_K_PERCENT))
        todo = [r for r in records if r.row.relation == AGREEING]
        for start in range(0, len(todo), batch):
            part = todo[start : start + batch]
            spans = [observe(r.result, SWAP_LEVEL).span for r in part]
            run_swap_tests(handle, [r.result for r in part], spans, batch_size=batch)
        return records

    rounds, _ = time_alternating({"evaluate": evaluate, "calibrate": calibrate}, args.repeats)
    n = len(rows)
    print(f"model={handle.info.name} rows={n} agreeing={agreeing} calibrate_batch={batch} repeats={args.repeats}")
    for name in ("evaluate", "calibrate"):
        print(median_line(f"{name} s/row", [r[name] / n for r in rounds], "s", digits=2))
    ratio = statistics.median(r["calibrate"] / r["evaluate"] for r in rounds)
    print(f"calibration_ratio={ratio:.2f}")


if __name__ == "__main__":
    main()
