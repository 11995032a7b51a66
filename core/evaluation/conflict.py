"""Build a knowledge-conflict set labeled by the model's own answers (``python -m core conflict``).

For each fact of a fact list (:mod:`core.evaluation.conflict_sources`) the model is asked the fact's question
without context (greedy, ``max_new_tokens`` tokens); a fact is *known* when that answer names the true object
(:func:`core.evaluation.behavior.find_spans`). Each known fact gives two rows:

* ``counterfactual``: a context stating another object of the same relation (as CounterFact does);
* ``on_topic``: a context about the subject that lacks the object.

NQ-Swap rows (a substituted Wikipedia passage as context) and, on request, the project's conflict set and
invented-fact rows are added. Every row is then answered with its context and labeled by what that answer
names (:func:`core.evaluation.behavior.behavior_label`): read, recalled, or left out and counted (neither or
both). Rows get a ``split``: ``calibration`` or ``report``, drawn per subject / question (``group``) from a
seeded hash, so the two splits never share a subject or a question.

Written by :func:`write_set`: ``<name>.csv`` (a labeled CSV that ``python -m core evaluate`` reads: ``label`` is
``memorized`` for recalled rows and ``grounded`` for read ones), ``counts.json`` and ``README.md``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.engine import DualPathSettings, prepare_prompts
from core.engine.generation import generate_greedy
from core.engine.verdict import GROUNDED, MEMORIZED
from core.evaluation.behavior import (
    CONFLICT_KINDS,
    KIND_COUNTERFACTUAL,
    KIND_ON_TOPIC,
    READ,
    RECALLED,
    behavior_label,
    find_spans,
    join_aliases,
)
from core.evaluation.conflict_sources import (
    Fact,
    SourceRow,
    counterfactual_context,
    counterfactual_objects,
    on_topic_context,
    question_for,
)
from core.io import atomic_write_json, atomic_write_text
from core.model.handle import ModelHandle
from core.model.progress import Progress

logger = logging.getLogger(__name__)

CALIBRATION = "calibration"
REPORT = "report"
COLUMNS = (
    "query",
    "context",
    "label",
    "behavior",
    "kind",
    "source",
    "answer_context",
    "answer_memory",
    "group",
    "split",
    "build_answer",
    "no_context_answer",
)
"""The columns of a built set, in order (``query,context,label`` first: a labeled CSV)."""
_PLACEHOLDER_CONTEXT = "-"


@dataclass(frozen=True)
class BuildOptions:
    """How a set is built: generation length, batch size, the seed of every draw, the calibration share."""

    max_new_tokens: int = 16
    batch_size: int = 16
    seed: int = 0
    calibration_fraction: float = 0.5
    template: str = "auto"

    def validate(self) -> None:
        """Raises ``ValueError`` for an option out of range."""
        if not 1 <= self.max_new_tokens <= 256:
            raise ValueError(f"max_new_tokens must be in 1..256, got {self.max_new_tokens}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if not 0.0 < self.calibration_fraction < 1.0:
            raise ValueError(f"calibration_fraction must be strictly between 0 and 1, got {self.calibration_fraction}")

    def settings(self) -> DualPathSettings:
        return DualPathSettings(
            max_new_tokens=self.max_new_tokens, score_window=self.max_new_tokens, template=self.template
        )


@dataclass
class BuiltSet:
    """The rows of a built set (dicts with :data:`COLUMNS`) and its counts (kept, left out and why)."""

    rows: list[dict[str, str]]
    counts: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)


def split_of(group: str, seed: int, calibration_fraction: float) -> str:
    """``calibration`` or ``report`` for a subject / question: a seeded hash, so a group never spans both."""
    digest = hashlib.sha256(f"{seed}:{group.casefold()}".encode()).digest()
    return CALIBRATION if int.from_bytes(digest[:8], "big") / 2**64 < calibration_fraction else REPORT


def sample_facts(facts: Sequence[Fact], limit: int | None, seed: int) -> list[Fact]:
    """At most ``limit`` facts, a seeded sample kept in file order (all when ``limit`` is ``None``)."""
    if limit is None or limit >= len(facts):
        return list(facts)
    if limit < 1:
        raise ValueError(f"the fact limit must be at least 1, got {limit}")
    chosen = set(random.Random(seed).sample(range(len(facts)), limit))
    return [f for i, f in enumerate(facts) if i in chosen]


class AnswerCache:
    """Greedy answers by prompt text, for one model and one answer length, in a JSON file (or in memory)."""

    def __init__(self, path: str | Path | None, model: str, max_new_tokens: int) -> None:
        self.path = None if path is None else Path(path)
        self.key = {"model": model, "max_new_tokens": max_new_tokens}
        self.answers: dict[str, str] = {}
        if self.path is not None and self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                logger.warning("ignoring the unreadable answer cache %s: %s", self.path, exc)
                data = {}
            if isinstance(data, dict) and data.get("key") == self.key and isinstance(data.get("answers"), dict):
                self.answers = {str(k): str(v) for k, v in data["answers"].items()}

    def save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.path, {"key": self.key, "answers": self.answers})


def generate_answers(
    handle: ModelHandle,
    items: Sequence[tuple[str, str | None]],
    options: BuildOptions,
    *,
    stage: str = "answers",
    cache: AnswerCache | None = None,
    progress: Progress | None = None,
) -> list[str | None]:
    """Greedy answers for ``(query, context)`` items; ``context=None`` asks without context (the parametric prompt).

    Items are answered in length-sorted batches of ``options.batch_size`` (one padded ``generate`` each). An
    item whose prompt does not fit the model gets ``None``.
    """
    settings = options.settings()
    prompts: list[list[int] | None] = []
    texts: list[str] = []
    for query, context in items:
        try:
            prepared = prepare_prompts(handle, query, context or _PLACEHOLDER_CONTEXT, settings)
        except ValueError as exc:
            logger.warning("left out (%s): %s", exc, query[:80])
            prompts.append(None)
            texts.append("")
            continue
        prompt = prepared.parametric if context is None else prepared.retrieval
        prompts.append(prompt.ids)
        texts.append(prompt.prompt)
    out: list[str | None] = [None] * len(items)
    todo = []
    for i, (ids, text) in enumerate(zip(prompts, texts)):
        if ids is None:
            continue
        if cache is not None and text in cache.answers:
            out[i] = cache.answers[text]
        else:
            todo.append(i)
    todo.sort(key=lambda i: len(prompts[i] or []))
    total = len(items)
    done = total - len(todo)
    if progress:
        progress(done, total, stage)
    for start in range(0, len(todo), options.batch_size):
        batch = todo[start : start + options.batch_size]
        answers = generate_greedy(handle, [prompts[i] or [] for i in batch], settings)
        for i, (ids, _, _) in zip(batch, answers):
            out[i] = handle.tokenizer.decode(ids, skip_special_tokens=True).strip()
            if cache is not None:
                cache.answers[texts[i]] = out[i] or ""
        done += len(batch)
        if cache is not None:
            cache.save()
        if progress:
            progress(done, total, stage)
    return out


def _count(table: dict[str, dict[str, int]], kind: str, key: str) -> None:
    table.setdefault(kind, {})
    table[kind][key] = table[kind].get(key, 0) + 1


def fact_rows(
    handle: ModelHandle,
    facts: Sequence[Fact],
    options: BuildOptions,
    counts: dict[str, Any],
    *,
    cache: AnswerCache | None = None,
    progress: Progress | None = None,
    pool: Sequence[Fact] | None = None,
) -> list[SourceRow]:
    """The counterfactual and on-topic rows of the facts the model knows without context (each row keeps the
    fact's no-context answer).

    Returns:
        The rows; ``counts`` gains ``facts``, ``facts_known`` and the facts left
        out by reason (``left_out["facts"]``).
    """
    answers = generate_answers(
        handle,
        [(question_for(f), None) for f in facts],
        options,
        stage="no-context answers",
        cache=cache,
        progress=progress,
    )
    others = counterfactual_objects(list(facts), options.seed, pool=pool)
    left = counts["left_out"].setdefault("facts", {})
    rows: list[SourceRow] = []
    known = 0
    for f, answer in zip(facts, answers):
        if answer is None:
            left["prompt too long for the model"] = left.get("prompt too long for the model", 0) + 1
            continue
        if not find_spans(answer, f.objects):
            left["not known without context"] = left.get("not known without context", 0) + 1
            continue
        known += 1
        group = f"subject:{f.subject}"
        query = question_for(f)
        new = others.get(f.index)
        if new is None:
            left["no other object of the relation (no counterfactual row)"] = (
                left.get("no other object of the relation (no counterfactual row)", 0) + 1
            )
        else:
            rows.append(
                SourceRow(
                    KIND_COUNTERFACTUAL, "facts", group, query, counterfactual_context(f, new), [new], f.objects, answer
                )
            )
        rows.append(SourceRow(KIND_ON_TOPIC, "facts", group, query, on_topic_context(f), [], f.objects, answer))
    counts["facts"] = len(facts)
    counts["facts_known"] = known
    return rows


def _labeled_rows(
    rows: Sequence[SourceRow], answers: Sequence[str | None], options: BuildOptions
) -> tuple[list[dict[str, str]], dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """The rows whose with-context answer has a behavior label, as the set's CSV rows, with the counts kept
    (kind → label → n) and left out (kind → reason → n)."""
    kept: list[dict[str, str]] = []
    by_kind: dict[str, dict[str, int]] = {}
    dropped: dict[str, dict[str, int]] = {}
    for r, answer in zip(rows, answers):
        if answer is None:
            _count(dropped, r.kind, "prompt too long for the model")
            continue
        label, reason = behavior_label(answer, r.answer_context, r.answer_memory)
        if label is None:
            _count(dropped, r.kind, f"answer names {reason}")
            continue
        _count(by_kind, r.kind, label)
        kept.append(
            {
                "query": r.query,
                "context": r.context,
                "label": MEMORIZED if label == RECALLED else GROUNDED,
                "behavior": label,
                "kind": r.kind,
                "source": r.source,
                "answer_context": join_aliases(r.answer_context),
                "answer_memory": join_aliases(r.answer_memory),
                "group": r.group,
                "split": split_of(r.group, options.seed, options.calibration_fraction),
                "build_answer": answer,
                "no_context_answer": r.no_context_answer,
            }
        )
    return kept, by_kind, dropped


def _totals(kept: Sequence[dict[str, str]]) -> dict[str, Any]:
    """The kept rows' ``total`` (read, recalled, conflict rows) and ``split`` (split → behavior → n) counts."""
    return {
        "total": {
            READ: sum(r["behavior"] == READ for r in kept),
            RECALLED: sum(r["behavior"] == RECALLED for r in kept),
            "conflict_rows": sum(r["kind"] in CONFLICT_KINDS for r in kept),
        },
        "split": {
            s: {b: sum(r["split"] == s and r["behavior"] == b for r in kept) for b in (READ, RECALLED)}
            for s in (CALIBRATION, REPORT)
        },
    }


def build_conflict_set(
    handle: ModelHandle,
    facts: Sequence[Fact],
    options: BuildOptions,
    *,
    extra_rows: Sequence[SourceRow] = (),
    extra_left_out: dict[str, int] | None = None,
    cache: AnswerCache | None = None,
    progress: Progress | None = None,
    pool: Sequence[Fact] | None = None,
) -> BuiltSet:
    """Answer every row with its context and keep those with a behavior label (see the module docstring).

    Args:
        facts: the fact list (may be empty when ``extra_rows`` are given).
        extra_rows: NQ-Swap rows, the project's rows (:mod:`core.evaluation.conflict_sources`).
        extra_left_out: counts of source records dropped before any model call (e.g. NQ-Swap's), by reason.
        cache: answers already generated (keyed by prompt text: no-context and with-context prompts differ).
        pool: the facts whose objects the counterfactual objects are drawn from (default: ``facts``; give the
            whole list when ``facts`` is a sample of it).

    Raises:
        ValueError: bad options, or neither facts nor extra rows.
    """
    options.validate()
    if not facts and not extra_rows:
        raise ValueError("nothing to build: the fact list is empty and no other rows were given")
    counts: dict[str, Any] = {"left_out": {"sources": dict(extra_left_out or {})}}
    rows: list[SourceRow] = []
    if facts:
        rows = fact_rows(handle, facts, options, counts, cache=cache, progress=progress, pool=pool)
    rows += list(extra_rows)
    answers = generate_answers(
        handle,
        [(r.query, r.context) for r in rows],
        options,
        stage="answers with context",
        cache=cache,
        progress=progress,
    )
    kept, by_kind, dropped = _labeled_rows(rows, answers, options)
    counts["rows_answered"] = len(rows)
    counts["kept"] = by_kind
    counts["left_out"]["rows"] = dropped
    counts.update(_totals(kept))
    meta = {
        "model": handle.info.name,
        "max_new_tokens": options.max_new_tokens,
        "template": options.template,
        "seed": options.seed,
        "calibration_fraction": options.calibration_fraction,
    }
    return BuiltSet(kept, counts, meta)


def counts_lines(counts: dict[str, Any]) -> list[str]:
    """The counts as plain lines (printed by the command and written to the README)."""
    lines = []
    if "facts" in counts:
        lines.append(f"facts: {counts['facts']}, known without context: {counts['facts_known']}")
    for reason, n in sorted(counts["left_out"].get("facts", {}).items()):
        lines.append(f"facts left out — {reason}: {n}")
    for reason, n in sorted(counts["left_out"].get("sources", {}).items()):
        lines.append(f"source records left out — {reason}: {n}")
    lines.append(f"rows answered with their context: {counts['rows_answered']}")
    for kind, c in sorted(counts["kept"].items()):
        lines.append(f"kept {kind}: {c.get(READ, 0)} read, {c.get(RECALLED, 0)} recalled")
    for kind, c in sorted(counts["left_out"]["rows"].items()):
        for reason, n in sorted(c.items()):
            lines.append(f"left out {kind} — {reason}: {n}")
    t = counts["total"]
    lines.append(
        f"total kept: {t[READ] + t[RECALLED]} ({t[READ]} read, {t[RECALLED]} recalled; "
        f"{t['conflict_rows']} conflict rows)"
    )
    for s, c in counts["split"].items():
        lines.append(f"split {s}: {c[READ]} read, {c[RECALLED]} recalled")
    return lines


def readme_text(built: BuiltSet, name: str, sources: Sequence[str], attribution: str = "") -> str:
    """The README of a built set: what it is, how it was built, its columns and its counts."""
    m = built.meta
    parts = [
        f"# `{name}.csv`: a knowledge-conflict set labeled by the model's own answers",
        "",
        (
            f"Built by `python -m core conflict` with {m['model']} (greedy, {m['max_new_tokens']} new tokens, "
            f"template `{m['template']}`, seed {m['seed']}) from: {', '.join(sources)}."
        ),
        "",
        (
            "Each row's `behavior` is what the model's answer *with the context* named: the context's object and not "
            "the remembered one → `read` (`label=grounded`); the remembered object and not the context's → `recalled` "
            "(`label=memorized`); rows whose answer named neither or both are left out (counted below). Facts are used "
            "only when the model's answer *without* context names the true object. `split` is `calibration` or "
            f"`report` per subject / question (seeded hash, {m['calibration_fraction']:.0%} calibration): fit on "
            "`calibration`, report on `report`."
        ),
        "",
        "Columns: " + ", ".join(f"`{c}`" for c in COLUMNS) + ". Kinds: `counterfactual` (the object replaced by "
        "another object of the same relation), `on_topic` (a context about the subject without the object), "
        "`nq_swap` (a Natural Questions passage with the answer substituted), `project_conflict`, `invented`. "
        "`answer_context` / `answer_memory` list aliases separated by ` | `.",
        "",
        "## Counts",
        "",
        *[f"* {line}" for line in counts_lines(built.counts)],
        "",
    ]
    if attribution:
        parts += ["## Sources and licenses", "", attribution.strip(), ""]
    return "\n".join(parts)


def write_set(
    out_dir: str | Path, built: BuiltSet, *, name: str, sources: Sequence[str], attribution: str = ""
) -> Path:
    """Write ``<name>.csv``, ``counts.json`` and ``README.md`` into ``out_dir`` (created); returns the CSV's path."""
    import csv
    import io

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(built.rows)
    path = out / f"{name}.csv"
    atomic_write_text(path, buffer.getvalue())
    atomic_write_json(out / "counts.json", {"meta": built.meta, "counts": built.counts})
    atomic_write_text(out / "README.md", readme_text(built, name, sources, attribution))
    return path
