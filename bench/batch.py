"""Rows per minute for the RePCS detector on the embedded model at T = 32: batched vs one by one.

Side by side in one run, on the same rows, order alternated each repeat:
  one_by_one — ``run_dual_path(..., free_parametric=False)`` per row (one generate + one teacher-forced forward
               each: the cheapest exact unbatched score)
  batched    — ``core.engine.batch.score_rows`` (one batched generate + one batched teacher-forced forward per batch
               of ``--batch-size`` rows, length-sorted)
Both stop at end-of-sequence or T tokens (``max_new_tokens = score_window = T``), as evaluation does.
Prints rows/min (median over repeats) for each, the speed-up, and how well the two agree (same answer tokens,
max |ΔZ|). Rows: the first ``--rows`` of assets/probes/probes.csv (both labels), else a built-in set.
Last line: ``speedup=<median batched rows/min ÷ one-by-one rows/min>``.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from _common import median_line, time_alternating

from core.engine import DualPathSettings, run_dual_path, score_rows
from core.evaluation import read_labeled_csv
from core.io import asset_path
from core.model.loading import load_model

PROBES = asset_path("probes", "probes.csv")
BUILTIN = [
    ("What is the capital of France?", "Paris is the capital and largest city of France."),
    ("What is the capital of Veltria?", "The capital of the Republic of Veltria is Marrowgate, a port city."),
    ("Who wrote Romeo and Juliet?", "Romeo and Juliet is a tragedy written by William Shakespeare."),
    ("Who founded the Orrin Guild?", "The Orrin Guild of glassmakers was founded by Tamsin Vell in 1721."),
    ("How many legs does a spider have?", "Spiders are arachnids with eight legs."),
    ("How many moons does Kessarine have?", "The planet Kessarine, discovered in 2031, has five small moons."),
    ("When did World War II end?", "World War II ended in 1945 with the surrender of Japan."),
    ("When was Lake Pemberlune drained?", "Lake Pemberlune in the Hollin Valley was drained in 1898 for farmland."),
    ("What is the chemical symbol for gold?", "Gold is a chemical element with the symbol Au."),
    ("What is the national dish of Quessa?", "The national dish of the island of Quessa is brindlefish stew."),
    ("Where is the Eiffel Tower?", "The Eiffel Tower is a wrought-iron lattice tower in Paris, France."),
    ("Where is the Dovren Observatory?", "The Dovren Observatory sits on Mount Karrow above the town of Esk."),
    ("What is the largest planet?", "Jupiter is the largest planet in the Solar System."),
    ("Who invented the zephyr loom?", "The zephyr loom was invented by the weaver Ilse Marran in 1803."),
    ("What language is spoken in Brazil?", "The official language of Brazil is Portuguese."),
    ("What currency does Veltria use?", "Veltria's currency is the silver crown, divided into 100 pennies."),
]


def load_rows(n: int) -> list[tuple[str, str]]:
    if PROBES.is_file():
        rows = read_labeled_csv(PROBES)
        mem = [r for r in rows if r.label == "memorized"]
        gro = [r for r in rows if r.label == "grounded"]
        mixed = [r for pair in zip(mem, gro) for r in pair]
        if len(mixed) >= n:
            return [(r.query, r.context) for r in mixed[:n]]
    return (BUILTIN * (n // len(BUILTIN) + 1))[:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32, help="T (= max new tokens)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    handle = load_model()
    settings = DualPathSettings(max_new_tokens=args.tokens, score_window=args.tokens)
    rows = load_rows(args.rows)

    def one_by_one() -> list:
        return [run_dual_path(handle, q, c, settings, free_parametric=False) for q, c in rows]

    def batched() -> list:
        return score_rows(handle, rows, settings, batch_size=args.batch_size)

    jobs = {"one_by_one": one_by_one, "batched": batched}
    score_rows(handle, rows[:2], settings, batch_size=2)  # warm-up
    run_dual_path(handle, *rows[0], settings, free_parametric=False)
    rounds, last = time_alternating(jobs, args.repeats)
    rpm = {name: [len(rows) / (r[name] / 60.0) for r in rounds] for name in jobs}
    speedups = [r["one_by_one"] / r["batched"] for r in rounds]
    same = sum(a.answer_token_ids == b.answer_token_ids for a, b in zip(last["one_by_one"], last["batched"]))
    dz = [
        abs(a.repcs_score - b.repcs_score)
        for a, b in zip(last["one_by_one"], last["batched"])
        if a.answer_token_ids == b.answer_token_ids
    ]
    tokens = statistics.mean(r.n_tokens for r in last["one_by_one"])
    print(
        f"model={handle.info.name} device={handle.info.device} T={args.tokens} rows={len(rows)} "
        f"batch_size={args.batch_size} repeats={args.repeats} threads={torch.get_num_threads()} "
        f"mean_answer_tokens={tokens:.1f} source={'probes.csv' if PROBES.is_file() else 'built-in'}"
    )
    for name, values in rpm.items():
        print(median_line(name, values, "rows/min", width=11))
    print(
        f"agreement: {same}/{len(rows)} rows with identical answer tokens; "
        f"max |ΔZ| on those = {max(dz) if dz else float('nan'):.2e} nats"
    )
    print(f"speedup={statistics.median(speedups):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
