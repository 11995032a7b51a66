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
import re
from pathlib import Path

import numpy as np
from _common import add_threads_arg, contains, empty_cells, file_checks_pass, read_csv, set_threads, short

from core.io import ASSETS, REPO_ROOT

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


# ----------------------------------------------------------------------------------------------------------
# The labeled evaluation sets under assets/sets/ (one folder per set)

SETS_DIR = ASSETS / "sets"
SET_COLUMNS = ["query", "context", "label", "answer"]
ANSWER_RULES = {
    "unscreened": "in_context",
    "shift_unanswerable": "absent_if_memorized",
    "shift_paraphrase": "in_context",
    "shift_topic_matched": "in_context",
}
"""How ``answer`` relates to ``context`` per set: verbatim in every context, or (shift_unanswerable) absent from
the memorized rows' contexts (case-insensitively) and verbatim in the grounded rows'."""
COUNTS_LINE = re.compile(r"^Rows: (\d+) \((\d+) memorized, (\d+) grounded\)", re.MULTILINE)
LABELS = ("memorized", "grounded")
PARAPHRASE_MAX_OVERLAP = 0.5
"""shift_paraphrase: at most this share of a query's content words (names excluded) may occur in its context."""
_STOP_WORDS = (
    "a an the of in on at to for from by with and or is are was were be been do does did what which who whom whose "
    "when where why how many much it its this that these those as into than then there their his her he she they "
    "we our you your i me my us not no can could would should will about after before most more"
)
_STOP = frozenset(_STOP_WORDS.split(" "))


def norm_key(text: str) -> str:
    """Casefolded, punctuation removed, whitespace collapsed: the key of the exact-overlap checks."""
    return " ".join(re.sub(r"[^\w]+", " ", text.casefold()).split())


def content_words(text: str) -> frozenset[str]:
    """Content words of ``text`` (stop words dropped, a plural ``s`` stripped): the key of near-duplicates."""
    words = (w[:-1] if len(w) > 3 and w.endswith("s") else w for w in norm_key(text).split())
    return frozenset(w for w in words if w not in _STOP)


def query_overlap(query: str, context: str) -> float:
    """Share of the query's non-name content words that also occur in the context (a 5-letter prefix match).

    Names (capitalized words after the first) are left out: a question about a place must name it."""
    tokens = re.findall(r"[\w'-]+", query)
    plain = [t for i, t in enumerate(tokens) if i == 0 or not t[:1].isupper()]
    words = [w for w in content_words(" ".join(plain)) if not w.isdigit()]
    if not words:
        return 0.0
    stems = {w[:5] for w in content_words(context)}
    return sum(w[:5] in stems for w in words) / len(words)


def reserved_texts() -> dict[str, dict[str, set[str]]]:
    """Queries and contexts of every other bundled file, by file: calibration, probes, conflict, examples, CRM
    prompts and RADAR prompts (``norm_key``)."""
    out: dict[str, dict[str, set[str]]] = {}

    def add(name: str, queries: list[str], contexts: list[str]) -> None:
        out[name] = {"query": {norm_key(q) for q in queries}, "context": {norm_key(c) for c in contexts if c}}

    for name in ("clean", "memorized"):
        rows = read_csv(CAL / f"{name}.csv")
        add(f"calibration/{name}.csv", [r["query"] for r in rows], [r["context"] for r in rows])
    for name in ("probes_source.csv", "probes.csv", "conflict.csv"):
        rows = read_csv(ASSETS / "probes" / name)
        add(f"probes/{name}", [r["query"] for r in rows], [r["context"] for r in rows])
    examples = json.loads(EXAMPLES.read_text(encoding="utf-8"))
    ex_queries = [str(e.get("query", "")) for e in examples]
    add("examples/examples.json", ex_queries, [str(e.get("context", "")) for e in examples])
    crm = json.loads((ASSETS / "crm" / "calibration_prompts.json").read_text(encoding="utf-8"))
    add(
        "crm/calibration_prompts.json",
        [str(p.get("query", "")) for p in crm["prompts"]],
        [str(p.get("context", "")) for p in crm["prompts"]],
    )
    for path in sorted((ASSETS / "radar").glob("*.csv")):
        add(f"radar/{path.name}", [r["prompt"] for r in read_csv(path)], [])
    return out


def reserved_memorized_facts() -> list[tuple[str, str, str]]:
    """``(file, query, answer)`` of the well-known facts already used elsewhere (for the same-fact report)."""
    facts = [("calibration/memorized.csv", r["query"], r["answer"]) for r in read_csv(CAL / "memorized.csv")]
    facts += [
        ("probes/probes.csv", r["query"], r["answer"])
        for r in read_csv(ASSETS / "probes" / "probes.csv")
        if r["label"] == "memorized"
    ]
    conflict = read_csv(ASSETS / "probes" / "conflict.csv")
    facts += [("probes/conflict.csv", r["query"], r["answer_memory"]) for r in conflict]
    return facts


def set_names() -> list[str]:
    """The folders under ``assets/sets/`` (each holds ``<name>_source.csv``, ``<name>.csv`` and a README)."""
    return sorted(p.name for p in SETS_DIR.iterdir() if p.is_dir()) if SETS_DIR.is_dir() else []


def readme_counts(name: str) -> tuple[int, int, int] | None:
    """``(rows, memorized, grounded)`` from the set README's ``Rows: N (M memorized, G grounded)`` line."""
    path = SETS_DIR / name / "README.md"
    match = COUNTS_LINE.search(path.read_text(encoding="utf-8")) if path.is_file() else None
    return tuple(int(x) for x in match.groups()) if match else None  # type: ignore[return-value]


def labeled_set_checks(names: list[str] | None = None) -> tuple[list[str], list[str]]:
    """File checks of the sets under ``assets/sets/`` (no model).

    Returns:
        ``(problems, notes)``: problems fail the check; notes are reported (counts, same-fact overlaps, the
        paraphrase overlap).
    """
    from core.evaluation.data import DataError, read_labeled_csv

    problems: list[str] = []
    notes: list[str] = []
    reserved = reserved_texts()
    facts = reserved_memorized_facts()
    seen_queries: dict[str, str] = {}
    seen_contexts: dict[str, str] = {}
    for name in names or set_names():
        folder = SETS_DIR / name
        source_path, built_path = folder / f"{name}_source.csv", folder / f"{name}.csv"
        if not source_path.is_file():
            problems.append(f"{name}: {source_path.name} is missing")
            continue
        rule = ANSWER_RULES.get(name)
        if rule is None:
            problems.append(f"{name}: no answer rule in scripts/check_sets.py ANSWER_RULES")
            continue
        source = read_csv(source_path)
        if list(source[0])[:4] != SET_COLUMNS if source else True:
            problems.append(f"{name}: the source's first columns must be {SET_COLUMNS}")
            continue
        if built_path.is_file():
            built = read_csv(built_path)
            if [{k: b.get(k) for k in s} for s, b in zip(source, built)] != source or len(built) != len(source):
                problems.append(f"{name}: {built_path.name} is not {source_path.name} plus columns")
            if any(b.get("parametric_correct") not in ("true", "false") for b in built):
                problems.append(f"{name}: {built_path.name} needs parametric_correct = true|false in every row")
            try:
                loaded = read_labeled_csv(built_path)
            except DataError as exc:
                problems.append(f"{name}: core.evaluation.data refuses {built_path.name}: {exc}")
                loaded = []
            if len(loaded) != len(source):
                problems.append(f"{name}: the loader read {len(loaded)} rows of {len(source)}")
        else:
            problems.append(f"{name}: {built_path.name} is missing (run scripts/check_sets.py --annotate {name})")
        counts = {lab: sum(r["label"] == lab for r in source) for lab in LABELS}
        stated = readme_counts(name)
        if stated != (len(source), counts["memorized"], counts["grounded"]):
            problems.append(
                f"{name}: README says {stated}, file has ({len(source)}, {counts['memorized']}, {counts['grounded']})"
            )
        if not 0.45 <= counts["memorized"] / max(len(source), 1) <= 0.55:
            problems.append(f"{name}: labels unbalanced ({counts})")
        same_fact: list[str] = []
        overlaps: list[float] = []
        for i, row in enumerate(source, start=1):
            where = f"{name} row {i}"
            empty = empty_cells(row, SET_COLUMNS)
            if empty:
                problems.append(f"{where}: empty {', '.join(empty)}")
                continue
            if row["label"] not in LABELS:
                problems.append(f"{where}: label {row['label']!r}")
                continue
            absent = rule == "absent_if_memorized" and row["label"] == "memorized"
            if absent and contains(row["answer"], row["context"]):
                problems.append(f"{where}: the answer {row['answer']!r} occurs in the context (it must not)")
            if not absent and row["answer"] not in row["context"]:
                problems.append(f"{where}: the answer {row['answer']!r} is not verbatim in the context")
            q, c = norm_key(row["query"]), norm_key(row["context"])
            for file, texts in reserved.items():
                if q in texts["query"]:
                    problems.append(f"{where}: the query repeats one of {file}: {row['query']!r}")
                if c in texts["context"]:
                    problems.append(f"{where}: the context repeats one of {file}")
            if q in seen_queries:
                problems.append(f"{where}: the query repeats {seen_queries[q]}: {row['query']!r}")
            if c in seen_contexts:
                problems.append(f"{where}: the context repeats {seen_contexts[c]}")
            seen_queries.setdefault(q, where)
            seen_contexts.setdefault(c, where)
            words = content_words(row["query"])
            for file, fq, fa in facts:
                if row["label"] != "memorized" or norm_key(fa) != norm_key(row["answer"]):
                    continue
                other = content_words(fq)
                if words == other:
                    problems.append(f"{where}: near-duplicate of a {file} query: {fq!r}")
                elif len(words & other) / max(len(words | other), 1) >= 0.5:
                    same_fact.append(f"{row['query']!r} ~ {file}: {fq!r}")
            overlaps.append(query_overlap(row["query"], row["context"]))
            if name == "shift_paraphrase" and overlaps[-1] > PARAPHRASE_MAX_OVERLAP:
                problems.append(
                    f"{where}: {overlaps[-1]:.0%} of the query's content words occur in the context "
                    f"(at most {PARAPHRASE_MAX_OVERLAP:.0%} for a paraphrase)"
                )
        if name == "shift_topic_matched":
            problems += topic_pair_checks(source)
        lengths = {lab: [len(r["context"].split()) for r in source if r["label"] == lab] for lab in LABELS}
        notes.append(
            f"{name}: {len(source)} rows ({counts['memorized']} memorized, {counts['grounded']} grounded); context "
            f"words mean memorized {np.mean(lengths['memorized']):.1f} / grounded {np.mean(lengths['grounded']):.1f}; "
            f"query-word overlap with the context mean {np.mean(overlaps):.2f}; memorized rows asking a fact also "
            f"asked elsewhere (other wording): {len(same_fact)}"
        )
        notes += [f"  same fact: {s}" for s in same_fact]
    return problems, notes


def topic_pair_checks(rows: list[dict[str, str]]) -> list[str]:
    """Each pair: one memorized and one grounded row, both queries the pair's template filled with its entity."""
    problems: list[str] = []
    pairs: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        pairs.setdefault(row.get("pair", ""), []).append(row)
        if row.get("template", "").replace("{X}", row.get("entity", "")) != row["query"]:
            problems.append(f"shift_topic_matched: {row['query']!r} is not its template with its entity")
    for pair, members in pairs.items():
        labels = sorted(r["label"] for r in members)
        if labels != ["grounded", "memorized"] or len({r["template"] for r in members}) != 1:
            problems.append(f"shift_topic_matched pair {pair}: needs one memorized and one grounded row, one template")
    return problems


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
