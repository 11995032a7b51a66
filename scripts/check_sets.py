"""Check the calibration sets against the embedded model, and the labeled evaluation sets under assets/sets/.

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

It also checks every set under ``assets/sets/<name>/`` (no model): ``<name>.csv`` loads with
``core.evaluation.data.read_labeled_csv`` and is ``<name>_source.csv`` plus ``parametric_correct``; the label
counts match the README's ``Rows: N (M memorized, G grounded)`` line and are balanced (45–55 % memorized);
``answer`` is verbatim in every context (``shift_unanswerable``: absent from the memorized rows' contexts); no
query or context repeats one of the calibration sets, the probes, the conflict set, the examples, the CRM
prompts, the RADAR prompts or another set's (after casefolding and removing punctuation), and no memorized
query is a near-duplicate (same content words) of a known-fact query there; ``shift_paraphrase`` queries share at
most half of their content words (names aside) with their context; ``shift_topic_matched`` pairs are one
memorized and one grounded row filling the same template. ``--annotate`` asks the model those sets' queries once
without context (greedy, ``max_new_tokens=32``, batches of 8) and writes ``<name>.csv`` with ``parametric_correct``
(labels are never changed by it; the answers go to ``out/sets/<name>.behavior.json``).

    HF_HUB_OFFLINE=1 python scripts/check_sets.py [--sets clean memorized] [--max-new-tokens 32]
                                                  [--limit N] [--json report.json] [--static-only]
                                                  [--threads 1] [--annotate [SET ...]]

Exit status: 0 when the files are well formed (the model-based counts are reported, not enforced), 1 when a
file check fails.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
from pathlib import Path

import numpy as np
from _common import add_threads_arg, contains, file_checks_pass, filled_rows, read_csv, set_threads, short
from _labeled_sets import CAL, EXAMPLES, LABELS, SETS_DIR, labeled_set_checks, set_names

from core.io import REPO_ROOT

COLUMNS = ["query", "context", "answer"]
SETS = ("clean", "memorized")


def static_checks(sets: dict[str, list[dict[str, str]]]) -> list[str]:
    """Problems with the files themselves (no model needed)."""
    problems: list[str] = []
    queries: dict[str, set[str]] = {}
    for name, rows in sets.items():
        seen: set[str] = set()
        for where, row in filled_rows(name, rows, COLUMNS, problems):
            if row["answer"] not in row["context"]:
                problems.append(f"{where}: answer {row['answer']!r} is not verbatim in its context")
            key = row["query"].strip().casefold()
            if key in seen:
                problems.append(f"{where}: duplicate query {row['query']!r}")
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


def annotate(names: list[str], max_new_tokens: int, batch_size: int = 8) -> None:
    """Ask the model every source row's query once *without* context and write ``<name>.csv`` = source +
    ``parametric_correct``.

    The parametric prompt of :func:`core.engine.prepare_prompts` (the same one the dual-path engine uses) is
    generated greedily, ``max_new_tokens`` tokens, in left-padded batches of ``batch_size`` rows sorted by length
    (:func:`core.engine.generation.generate_greedy`). ``parametric_correct`` is ``true`` when that answer contains
    ``answer`` (case-insensitively). Labels are never changed. The answers go to
    ``out/sets/<name>.behavior.json``.
    """
    from core.engine import DualPathSettings, prepare_prompts
    from core.engine.generation import generate_greedy
    from core.io import atomic_write_json, atomic_write_text
    from core.model.loading import load_model

    handle = load_model()
    settings = DualPathSettings(max_new_tokens=max_new_tokens)
    for name in names:
        source = read_csv(SETS_DIR / name / f"{name}_source.csv")
        prompts = [prepare_prompts(handle, r["query"], r["context"], settings).parametric.ids for r in source]
        order = sorted(range(len(source)), key=lambda i: len(prompts[i]))
        answers: dict[int, str] = {}
        for b in range(0, len(order), batch_size):
            batch = order[b : b + batch_size]
            for i, (ids, _, _) in zip(batch, generate_greedy(handle, [prompts[i] for i in batch], settings)):
                answers[i] = handle.tokenizer.decode(ids, skip_special_tokens=True).strip()
            print(f"{name}: {len(answers)}/{len(source)} rows", flush=True)
        report = [
            {
                "row": i + 1,
                "label": row["label"],
                "query": row["query"],
                "answer": row["answer"],
                "parametric_correct": contains(row["answer"], answers[i]),
                "parametric_answer": answers[i],
            }
            for i, row in enumerate(source)
        ]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=[*source[0], "parametric_correct"], lineterminator="\r\n")
        writer.writeheader()
        for row, entry in zip(source, report):
            writer.writerow({**row, "parametric_correct": "true" if entry["parametric_correct"] else "false"})
        atomic_write_text(SETS_DIR / name / f"{name}.csv", buf.getvalue())
        atomic_write_json(REPO_ROOT / "out" / "sets" / f"{name}.behavior.json", report)
        for lab in LABELS:
            sub = [e for e in report if e["label"] == lab]
            hits = sum(e["parametric_correct"] for e in sub)
            print(f"{name} {lab}: the no-context answer contains the expected answer in {hits}/{len(sub)} rows")


def rejoin(name: str) -> None:
    """Rewrite ``<name>.csv`` as the current source plus the ``parametric_correct`` column of the existing file.

    The column depends on the query alone (the parametric prompt has no context), so contexts can be edited
    without a model run; any changed, added or removed query is refused (run ``--annotate`` then).
    """
    from core.io import atomic_write_text

    source = read_csv(SETS_DIR / name / f"{name}_source.csv")
    built = read_csv(SETS_DIR / name / f"{name}.csv")
    if [r["query"] for r in source] != [r["query"] for r in built]:
        raise SystemExit(f"{name}: the queries changed since {name}.csv was built; run --annotate {name}")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*source[0], "parametric_correct"], lineterminator="\r\n")
    writer.writeheader()
    for row, old in zip(source, built):
        writer.writerow({**row, "parametric_correct": old["parametric_correct"]})
    atomic_write_text(SETS_DIR / name / f"{name}.csv", buf.getvalue())
    print(f"{name}: rebuilt {name}.csv from the source and the existing parametric_correct column")


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
    parser.add_argument(
        "--annotate",
        nargs="*",
        metavar="SET",
        default=None,
        help="run the sets under assets/sets/ (all, or these) once and write <set>.csv with parametric_correct",
    )
    parser.add_argument(
        "--rejoin",
        nargs="+",
        metavar="SET",
        default=None,
        help="rebuild <set>.csv from its edited source, keeping parametric_correct (queries must be unchanged)",
    )
    add_threads_arg(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    sets = {name: read_csv(CAL / f"{name}.csv", COLUMNS) for name in args.sets}
    problems = static_checks(sets)
    for name, rows in sets.items():
        print(f"{name}.csv: {len(rows)} rows")
    if args.annotate is not None:
        unknown = sorted(set(args.annotate) - set(set_names()))
        if unknown:
            parser.error(f"unknown set(s) {unknown}; the sets are {set_names()}")
        set_threads(args.threads)
        annotate(args.annotate or set_names(), args.max_new_tokens)
    for name in args.rejoin or []:
        rejoin(name)
    labeled_problems, notes = labeled_set_checks()
    for line in notes:
        print(line)
    if not file_checks_pass(problems + labeled_problems):
        return 1
    if args.static_only or args.annotate is not None or args.rejoin:
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
