"""Build the evaluation probe set ``assets/probes/probes.csv`` from its hand-written source.

Reads ``assets/probes/probes_source.csv`` (columns ``query,context,label,answer``; ``label`` is
``memorized`` or ``grounded``), asks the embedded model each query *without* context (the parametric path
of the dual-path engine, greedy, ``max_new_tokens=32``), and writes ``assets/probes/probes.csv`` with the
extra column ``parametric_correct`` (``true`` when the parametric answer contains ``answer``,
case-insensitively). Re-running reproduces the file (greedy decoding, fp32 on CPU).

It also checks the files: labels, empty cells, duplicate queries, ``answer`` verbatim in ``context``, and
that no probe query or context repeats one of ``assets/calibration/`` or ``assets/examples/examples.json``
(the probe set must be disjoint from the calibration sets). With ``--conflict`` it also runs
``assets/probes/conflict.csv`` (``query,context,answer_context,answer_memory``) and reports, without
changing that file, how often the retrieval answer follows the context and how often the parametric
answer gives the remembered fact.

    HF_HUB_OFFLINE=1 python scripts/build_probes.py [--conflict] [--static-only] [--json report.json] [--threads 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
from pathlib import Path
from typing import Any

from _common import add_threads_arg, contains, file_checks_pass, filled_rows, read_csv, set_threads, short

from core.io import ASSETS, REPO_ROOT

PROBES = ASSETS / "probes"
SOURCE = PROBES / "probes_source.csv"
OUTPUT = PROBES / "probes.csv"
CONFLICT = PROBES / "conflict.csv"
CAL = ASSETS / "calibration"
EXAMPLES = ASSETS / "examples" / "examples.json"
SOURCE_COLUMNS = ["query", "context", "label", "answer"]
OUTPUT_COLUMNS = [*SOURCE_COLUMNS, "parametric_correct"]
CONFLICT_COLUMNS = ["query", "context", "answer_context", "answer_memory"]
LABELS = ("memorized", "grounded")
MAX_NEW_TOKENS = 32


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def reserved_texts() -> tuple[set[str], set[str]]:
    """Queries and contexts of the calibration sets and the bundled examples."""
    queries: set[str] = set()
    contexts: set[str] = set()
    for name in ("clean", "memorized"):
        path = CAL / f"{name}.csv"
        if path.is_file():
            for row in read_csv(path, ["query", "context", "answer"]):
                queries.add(_key(row["query"]))
                contexts.add(_key(row["context"]))
    if EXAMPLES.is_file():
        for ex in json.loads(EXAMPLES.read_text(encoding="utf-8")):
            queries.add(_key(str(ex.get("query", ""))))
            contexts.add(_key(str(ex.get("context", ""))))
    return queries, contexts


def static_checks(rows: list[dict[str, str]], conflict: list[dict[str, str]] | None) -> list[str]:
    problems: list[str] = []
    cal_queries, cal_contexts = reserved_texts()
    seen: set[str] = set()
    for where, row in filled_rows("probe", rows, SOURCE_COLUMNS, problems):
        if row["label"] not in LABELS:
            problems.append(f"{where}: label {row['label']!r} is not one of {LABELS}")
        if row["answer"] not in row["context"]:
            problems.append(f"{where}: answer {row['answer']!r} is not verbatim in its context")
        q = _key(row["query"])
        if q in seen:
            problems.append(f"{where}: duplicate query {row['query']!r}")
        seen.add(q)
        if q in cal_queries or _key(row["context"]) in cal_contexts:
            problems.append(f"{where}: repeats a calibration or example query/context: {row['query']!r}")
    for where, row in filled_rows("conflict", conflict or [], CONFLICT_COLUMNS, problems):
        if row["answer_context"] not in row["context"]:
            problems.append(f"{where}: answer_context {row['answer_context']!r} not verbatim in context")
        if contains(row["answer_memory"], row["context"]):
            problems.append(f"{where}: the context mentions the remembered answer {row['answer_memory']!r}")
        if _key(row["query"]) in cal_queries:
            problems.append(f"{where}: repeats a calibration or example query: {row['query']!r}")
    return problems


def _probe_rows(handle: Any, rows: list[dict[str, str]], settings: Any) -> list[dict[str, object]]:
    """Run every probe, print a line each, write probes.csv with ``parametric_correct`` and print the summary."""
    from core.engine import run_dual_path

    probes: list[dict[str, object]] = []
    out_rows = []
    for i, row in enumerate(rows, start=1):
        res = run_dual_path(handle, row["query"], row["context"], settings)
        para = contains(row["answer"], res.parametric.answer)
        rag = contains(row["answer"], res.retrieval.answer)
        out_rows.append({**{k: row[k] for k in SOURCE_COLUMNS}, "parametric_correct": "true" if para else "false"})
        probes.append(
            {
                "row": i,
                "label": row["label"],
                "query": row["query"],
                "answer": row["answer"],
                "parametric_correct": para,
                "rag_correct": rag,
                "z": round(res.repcs_score, 4),
                "parametric_answer": res.parametric.answer,
                "rag_answer": res.retrieval.answer,
            }
        )
        print(
            f"{i:>3} {row['label']:<9} para={'yes' if para else ' no'} rag={'yes' if rag else ' no'} "
            f"Z={res.repcs_score:7.2f}  {short(row['query'], 60)} -> {row['answer']!r} | "
            f"{short(res.parametric.answer, 50)}",
            flush=True,
        )
    with OUTPUT.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=OUTPUT_COLUMNS)
        writer.writeheader()
        writer.writerows(out_rows)
    print(f"\nwrote {OUTPUT.relative_to(REPO_ROOT)}: {len(out_rows)} rows")
    for label in LABELS:
        sub = [r for r in probes if r["label"] == label]
        if not sub:
            continue
        para = sum(bool(r["parametric_correct"]) for r in sub)
        rag = sum(bool(r["rag_correct"]) for r in sub)
        mean_z = sum(float(r["z"]) for r in sub) / len(sub)
        print(
            f"{label}: parametric answer contains the answer {para}/{len(sub)}; retrieval answer contains it "
            f"{rag}/{len(sub)}; mean Z {mean_z:.2f}"
        )
    return probes


def _conflict_rows(handle: Any, conflict: list[dict[str, str]], settings: Any) -> list[dict[str, object]]:
    """Run every conflict row (report only), print a line each and the summary."""
    from core.engine import run_dual_path

    entries: list[dict[str, object]] = []
    print(f"\n== conflict.csv ({len(conflict)} rows) ==")
    for i, row in enumerate(conflict, start=1):
        res = run_dual_path(handle, row["query"], row["context"], settings)
        entry = {
            "row": i,
            "query": row["query"],
            "z": round(res.repcs_score, 4),
            "rag_follows_context": contains(row["answer_context"], res.retrieval.answer),
            "rag_gives_memory": contains(row["answer_memory"], res.retrieval.answer),
            "parametric_gives_memory": contains(row["answer_memory"], res.parametric.answer),
            "parametric_answer": res.parametric.answer,
            "rag_answer": res.retrieval.answer,
        }
        entries.append(entry)
        print(
            f"{i:>3} ctx={'yes' if entry['rag_follows_context'] else ' no'} "
            f"mem={'yes' if entry['rag_gives_memory'] else ' no'} "
            f"para_mem={'yes' if entry['parametric_gives_memory'] else ' no'} Z={res.repcs_score:7.2f}  "
            f"{short(row['query'], 60)} | {short(res.retrieval.answer, 50)}",
            flush=True,
        )
    n = len(entries)
    follows = sum(bool(e["rag_follows_context"]) for e in entries)
    memory = sum(bool(e["rag_gives_memory"]) for e in entries)
    knows = sum(bool(e["parametric_gives_memory"]) for e in entries)
    mean_z = sum(float(e["z"]) for e in entries) / n
    print(
        f"conflict: retrieval answer follows the context {follows}/{n}; retrieval answer gives the remembered "
        f"fact {memory}/{n}; parametric answer gives the remembered fact {knows}/{n}; mean Z {mean_z:.2f}"
    )
    return entries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conflict", action="store_true", help="also run assets/probes/conflict.csv (report only)")
    parser.add_argument("--static-only", action="store_true", help="only the file checks, no model runs")
    parser.add_argument("--json", type=Path, default=None, help="also write the per-row model answers here")
    add_threads_arg(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    rows = read_csv(SOURCE, SOURCE_COLUMNS)
    conflict = read_csv(CONFLICT, CONFLICT_COLUMNS) if CONFLICT.is_file() else []
    problems = static_checks(rows, conflict)
    counts = {label: sum(r["label"] == label for r in rows) for label in LABELS}
    print(
        f"probes_source.csv: {len(rows)} rows ({counts['memorized']} memorized, {counts['grounded']} grounded); "
        f"conflict.csv: {len(conflict)} rows"
    )
    if not file_checks_pass(problems):
        return 1
    if args.static_only:
        return 0

    from core.engine import DualPathSettings
    from core.model.loading import load_model

    set_threads(args.threads)
    handle = load_model()
    settings = DualPathSettings(max_new_tokens=MAX_NEW_TOKENS)
    report: dict[str, list[dict[str, object]]] = {"probes": [], "conflict": []}
    report["probes"] = _probe_rows(handle, rows, settings)
    if args.conflict and conflict:
        report["conflict"] = _conflict_rows(handle, conflict, settings)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
