"""Check the calibration sets against the embedded model.

Runs every row of ``assets/calibration/clean.csv`` and ``assets/calibration/memorized.csv`` through the
dual-path engine (greedy, ``max_new_tokens=32`` by default) and prints, per row, whether the expected
``answer`` occurs (case-insensitively) in the parametric path's own answer (no context) and in the
retrieval path's answer (with context), with Z; then a summary per set.

A memorized row is only useful if the model knows the fact without context (parametric hit); a clean row
is only useful if the model can read the answer from the context (retrieval hit) and, ideally, does not
already produce it without the context.

Before any model run it also checks the files themselves: the header, empty cells, duplicate queries,
that each ``answer`` occurs verbatim in its ``context``, that the two sets share no query, and that no
clean row reuses a query of ``assets/examples/examples.json``.

    HF_HUB_OFFLINE=1 python scripts/check_sets.py [--sets clean memorized] [--max-new-tokens 32]
                                                  [--limit N] [--json report.json] [--static-only]
                                                  [--threads 1]

Exit status: 0 when the files are well formed (the model-based counts are reported, not enforced), 1 when a
file check fails.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from _common import add_threads_arg, contains, empty_cells, file_checks_pass, read_csv, set_threads, short

from core.io import ASSETS

CAL = ASSETS / "calibration"
EXAMPLES = ASSETS / "examples" / "examples.json"
COLUMNS = ["query", "context", "answer"]
SETS = ("clean", "memorized")


def static_checks(sets: dict[str, list[dict[str, str]]]) -> list[str]:
    """Problems with the files themselves (no model needed)."""
    problems: list[str] = []
    queries: dict[str, set[str]] = {}
    for name, rows in sets.items():
        seen: set[str] = set()
        for i, row in enumerate(rows, start=1):
            empty = empty_cells(row, COLUMNS)
            if empty:
                problems.append(f"{name} row {i}: empty {', '.join(empty)}")
                continue
            if row["answer"] not in row["context"]:
                problems.append(f"{name} row {i}: answer {row['answer']!r} is not verbatim in its context")
            key = row["query"].strip().casefold()
            if key in seen:
                problems.append(f"{name} row {i}: duplicate query {row['query']!r}")
            seen.add(key)
        queries[name] = seen
    if len(queries) == 2:
        for q in sorted(queries["clean"] & queries["memorized"]):
            problems.append(f"query in both sets: {q!r}")
    if "clean" in queries and EXAMPLES.is_file():
        examples = json.loads(EXAMPLES.read_text(encoding="utf-8"))
        ex_queries = {str(e.get("query", "")).strip().casefold() for e in examples}
        ex_contexts = {str(e.get("context", "")).strip().casefold() for e in examples}
        for i, row in enumerate(sets["clean"], start=1):
            if row["query"].strip().casefold() in ex_queries or row["context"].strip().casefold() in ex_contexts:
                problems.append(f"clean row {i}: overlaps assets/examples/examples.json")
    return problems


def _quantile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.quantile(np.asarray(values, dtype=float), q))


def run_checks(
    sets: dict[str, list[dict[str, str]]], max_new_tokens: int, numbers: dict[str, list[int]] | None = None
) -> dict[str, list[dict[str, object]]]:
    """Run each row through the engine; ``numbers`` gives the rows' 1-based numbers in their file."""
    from core.engine import DualPathSettings, run_dual_path
    from core.model.loading import load_model

    handle = load_model()
    settings = DualPathSettings(max_new_tokens=max_new_tokens)
    print(f"model: {handle.info.name}; max_new_tokens={max_new_tokens}; Z summed over the whole answer")
    results: dict[str, list[dict[str, object]]] = {}
    for name, rows in sets.items():
        print(f"\n== {name}.csv ({len(rows)} rows) ==")
        print("row  para rag     Z  query -> answer | parametric answer | retrieval answer")
        out = []
        nums = (numbers or {}).get(name) or list(range(1, len(rows) + 1))
        for i, row in zip(nums, rows):
            res = run_dual_path(handle, row["query"], row["context"], settings)
            para_hit = contains(row["answer"], res.parametric.answer)
            rag_hit = contains(row["answer"], res.retrieval.answer)
            out.append(
                {
                    "row": i,
                    "query": row["query"],
                    "answer": row["answer"],
                    "para_hit": para_hit,
                    "rag_hit": rag_hit,
                    "z": round(res.repcs_score, 4),
                    "n_tokens": len(res.answer_token_ids),
                    "parametric_answer": res.parametric.answer,
                    "rag_answer": res.retrieval.answer,
                }
            )
            print(
                f"{i:>3}  {'yes' if para_hit else ' no'}  {'yes' if rag_hit else ' no'} {res.repcs_score:7.2f}  "
                f"{short(row['query'], 60)} -> {row['answer']!r} | {short(res.parametric.answer, 50)} | "
                f"{short(res.retrieval.answer, 50)}",
                flush=True,
            )
        results[name] = out
    return results


def summarize(results: dict[str, list[dict[str, object]]]) -> list[str]:
    lines = ["", "== summary =="]
    means: dict[str, float] = {}
    for name, out in results.items():
        n = len(out)
        if not n:
            continue
        para = sum(bool(r["para_hit"]) for r in out)
        rag = sum(bool(r["rag_hit"]) for r in out)
        zs = [float(r["z"]) for r in out]
        means[name] = sum(zs) / n
        lines.append(
            f"{name}: parametric answer contains the expected answer {para}/{n}; retrieval answer contains it "
            f"{rag}/{n}; Z mean {means[name]:.2f}, median {_quantile(zs, 0.5):.2f}, "
            f"5th percentile {_quantile(zs, 0.05):.2f}, min {min(zs):.2f}, max {max(zs):.2f}"
        )
        if name == "memorized":
            miss = [r["row"] for r in out if not r["para_hit"]]
            lines.append(f"  memorized rows the model does not know without context: {miss or 'none'}")
        if name == "clean":
            miss = [r["row"] for r in out if not r["rag_hit"]]
            leak = [r["row"] for r in out if r["para_hit"]]
            lines.append(f"  clean rows whose retrieval answer misses the answer: {miss or 'none'}")
            lines.append(f"  clean rows the model answers without context: {leak or 'none'}")
    if "clean" in means and "memorized" in means:
        lines.append(
            f"mean Z clean − mean Z memorized = {means['clean'] - means['memorized']:.2f} nats "
            "(at these settings; scripts/calibrate_threshold.py computes the bundled τ and Δ)"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--limit", type=int, default=None, help="check only the first N rows of each set")
    parser.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=None,
        help="check only these 1-based row numbers of each set (e.g. after rewriting them)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the per-row results here")
    parser.add_argument("--static-only", action="store_true", help="only the file checks, no model runs")
    add_threads_arg(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    sets = {name: read_csv(CAL / f"{name}.csv", COLUMNS) for name in args.sets}
    problems = static_checks(sets)
    for name, rows in sets.items():
        print(f"{name}.csv: {len(rows)} rows")
    if not file_checks_pass(problems):
        return 1
    if args.static_only:
        return 0
    set_threads(args.threads)
    numbers: dict[str, list[int]] = {name: list(range(1, len(rows) + 1)) for name, rows in sets.items()}
    if args.rows is not None:
        numbers = {name: [i for i in args.rows if 1 <= i <= len(rows)] for name, rows in sets.items()}
    if args.limit is not None:
        numbers = {name: nums[: args.limit] for name, nums in numbers.items()}
    results = run_checks(
        {name: [sets[name][i - 1] for i in nums] for name, nums in numbers.items()}, args.max_new_tokens, numbers
    )
    for line in summarize(results):
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
