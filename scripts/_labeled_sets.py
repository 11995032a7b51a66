"""The labeled evaluation sets under ``assets/sets/`` (one folder per set): their file checks (no model).

Used by ``scripts/check_sets.py``; see its docstring for what is checked and why.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from _common import contains, filled_rows, read_csv

from core.io import ASSETS

CAL = ASSETS / "calibration"
EXAMPLES = ASSETS / "examples" / "examples.json"
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


def _built_file_problems(name: str, source: list[dict[str, str]], source_path: Path, built_path: Path) -> list[str]:
    """``<name>.csv``: the source plus columns, ``parametric_correct`` in every row, read whole by the loader."""
    from core.evaluation.data import DataError, read_labeled_csv

    if not built_path.is_file():
        return [f"{name}: {built_path.name} is missing (run scripts/check_sets.py --annotate {name})"]
    problems: list[str] = []
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
    return problems


def _answer_problems(where: str, row: dict[str, str], rule: str) -> list[str]:
    """The set's answer rule: verbatim in the context, or (``absent_if_memorized``) absent from a memorized row's."""
    absent = rule == "absent_if_memorized" and row["label"] == "memorized"
    if absent and contains(row["answer"], row["context"]):
        return [f"{where}: the answer {row['answer']!r} occurs in the context (it must not)"]
    if not absent and row["answer"] not in row["context"]:
        return [f"{where}: the answer {row['answer']!r} is not verbatim in the context"]
    return []


def _repeat_problems(
    where: str,
    row: dict[str, str],
    reserved: dict[str, dict[str, set[str]]],
    seen_queries: dict[str, str],
    seen_contexts: dict[str, str],
) -> list[str]:
    """A query or context that repeats another bundled file's or an earlier row's (the seen maps are updated)."""
    problems: list[str] = []
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
    return problems


def _same_fact(where: str, row: dict[str, str], facts: list[tuple[str, str, str]], same_fact: list[str]) -> list[str]:
    """A memorized row whose query is a near-duplicate of a fact used elsewhere (a problem), or asks the same fact
    in other words (appended to ``same_fact``, a note)."""
    problems: list[str] = []
    words = content_words(row["query"])
    for file, fq, fa in facts:
        if row["label"] != "memorized" or norm_key(fa) != norm_key(row["answer"]):
            continue
        other = content_words(fq)
        if words == other:
            problems.append(f"{where}: near-duplicate of a {file} query: {fq!r}")
        elif len(words & other) / max(len(words | other), 1) >= 0.5:
            same_fact.append(f"{row['query']!r} ~ {file}: {fq!r}")
    return problems


def labeled_set_checks(names: list[str] | None = None) -> tuple[list[str], list[str]]:
    """File checks of the sets under ``assets/sets/`` (no model).

    Returns:
        ``(problems, notes)``: problems fail the check; notes are reported (counts, same-fact overlaps, the
        paraphrase overlap).
    """
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
        problems += _built_file_problems(name, source, source_path, built_path)
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
        for where, row in filled_rows(name, source, SET_COLUMNS, problems):
            if row["label"] not in LABELS:
                problems.append(f"{where}: label {row['label']!r}")
                continue
            problems += _answer_problems(where, row, rule)
            problems += _repeat_problems(where, row, reserved, seen_queries, seen_contexts)
            problems += _same_fact(where, row, facts, same_fact)
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
