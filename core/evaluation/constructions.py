"""The rows the headline verdict is validated on, one *construction* at a time, with a split nobody can tune.

A construction is one way of writing queries and contexts; a verdict that holds only on the construction it was
fitted on has learned the construction, not the model. Three are built here from sources written by others:

* ``templated`` — ROME facts (``known_1000`` form): the relation's question (:data:`~core.evaluation.
  conflict_sources.QUESTIONS`) and the fact's cloze completed by an object as the context — another object of the
  relation (``conflict``), the true one (``agreeing``), none (``on_topic``) — plus the project's conflict and
  invented-fact rows;
* ``prose`` — NQ-Swap: a Natural Questions passage with the answer substituted (``conflict``) and the same passage
  as written (``agreeing``), detokenized and trimmed around the answer;
* ``fresh`` — the same ROME facts written another way, for reporting only: other questions (:data:`FRESH`),
  asking for a full-sentence answer, and the object stated in a full sentence inside a short passage. Built only
  from subjects of the report split, so it is held out by construction *and* by subject.

Rows carry the objects an answer is matched against (``answer_context`` / ``answer_memory``) and their keys: the
normalized question and, where known, the subject. :func:`assign_splits` joins every two rows that share a key —
across sources, and a row whose question names a subject of another row joins that subject — and draws
``calibration`` or ``report`` per connected group from a seeded hash, so the two splits never share a question or a
subject. :func:`split_leaks` is the check a test runs on the result (it compares normalized texts, not group
labels, and fails when a key or a subject named in a question crosses the split).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.evaluation.behavior import find_spans, join_aliases, normalize_words, split_aliases
from core.evaluation.conflict_sources import (
    MAX_FILE_BYTES,
    Fact,
    _short,
    counterfactual_context,
    counterfactual_objects,
    detokenize,
    on_topic_context,
    project_rows,
    question_for,
    trim_passage,
)
from core.io import read_user_file

TEMPLATED, PROSE, FRESH_CONSTRUCTION = "templated", "prose", "fresh"
CONSTRUCTIONS: dict[str, str] = {
    TEMPLATED: "ROME facts: the relation's question, the fact's cloze completed by an object as context; the "
    "project's conflict and invented-fact rows",
    PROSE: "NQ-Swap: Natural Questions passages (Wikipedia prose), the answer substituted or as written",
    FRESH_CONSTRUCTION: "ROME facts written another way (report only): other questions asking for a full-sentence "
    "answer, the object stated in a full sentence inside a short passage",
    "typed": "questions the way people type them (report only): Natural Questions questions as typed, numbers and "
    "years, passages naming the answer late, two passages that disagree, French and Spanish queries",
    "traffic": "a user's own (query, context) rows — their retrieval traffic — unlabeled: each labeled by its swap "
    "test",
}
"""Every construction and how its rows are written."""
CONFLICT, AGREEING, ON_TOPIC, INVENTED = "conflict", "agreeing", "on_topic", "invented"
TRAFFIC, UNLABELED = "traffic", "unlabeled"
RELATIONS: dict[str, str] = {
    CONFLICT: "the context states another object than the model's memory",
    AGREEING: "the context states the object the model remembers (or the true one)",
    ON_TOPIC: "the context is about the subject but states no object",
    INVENTED: "the fact exists only in the context",
    UNLABELED: "not known: a user's own row, whose behavior its swap test finds",
}
"""How a row's context relates to what the model remembers."""
SWAP_LABELED = (AGREEING, UNLABELED)
"""The relations whose behavior label is the swap test's (no text can tell, or nothing is known of the row)."""


def labeled_by_swap(row: ValidationRow) -> bool:
    """Whether ``row``'s behavior label comes from its swap test (:data:`SWAP_LABELED`), not from its answer's text."""
    return row.relation in SWAP_LABELED


def traffic_rows(pairs: Sequence[tuple[str, str]], seed: int = 0) -> list[ValidationRow]:
    """A user's own ``(query, context)`` rows as validation rows to calibrate on: unlabeled (each labeled by its swap
    test), one unit each, split by question with :func:`assign_splits` (half calibration, half report) — blank and
    repeated pairs left out."""
    rows, seen = [], set()
    for i, (query, context) in enumerate(pairs):
        key = (norm_text(query), norm_text(context))
        if not key[0] or not key[1] or key in seen:
            continue
        seen.add(key)
        rows.append(ValidationRow(TRAFFIC, UNLABELED, TRAFFIC, query.strip(), context.strip(), source_id=str(i)))
    assign_splits(rows, seed)
    return rows


CALIBRATION, REPORT = "calibration", "report"
FULL_SENTENCE = "Answer in a full sentence."

FRESH: dict[str, tuple[str, str]] = {
    "P17": ("Which country is {s} in?", "{s} lies within the borders of {o}."),
    "P19": ("What is the birthplace of {s}?", "{s} was born in {o}."),
    "P20": ("Where did {s} pass away?", "{s} died in {o}."),
    "P27": ("Which country's citizenship does {s} hold?", "{s} holds the citizenship of {o}."),
    "P30": ("{s} is part of which continent?", "{s} lies on the continent of {o}."),
    "P36": ("Name the capital city of {s}.", "The seat of government of {s} is the city of {o}."),
    "P37": ("Which language is official in {s}?", "The official language used in {s} is {o}."),
    "P39": ("What office does {s} hold?", "{s} serves in the office of {o}."),
    "P101": ("What is the field of work of {s}?", "{s} is known for work in the field of {o}."),
    "P103": ("What is the mother tongue of {s}?", "The mother tongue of {s} is {o}."),
    "P106": ("What does {s} do for a living?", "By profession, {s} is a {o}."),
    "P108": ("Which organization employs {s}?", "{s} has been employed by {o}."),
    "P127": ("Which company owns {s}?", "{s} belongs to the company {o}."),
    "P131": ("In which region can {s} be found?", "{s} can be found in {o}."),
    "P136": ("What kind of music is {s} known for?", "{s} is known for playing {o}."),
    "P138": ("Who or what is {s} named for?", "{s} takes its name from {o}."),
    "P140": ("Which religion does {s} follow?", "{s} follows the religion of {o}."),
    "P159": ("In which city is {s} headquartered?", "The head office of {s} is located in {o}."),
    "P176": ("Which company manufactures {s}?", "{s} is manufactured by {o}."),
    "P178": ("Which company created {s}?", "{s} was created by {o}."),
    "P276": ("Where can {s} be found?", "{s} is situated in {o}."),
    "P364": ("In what language was {s} originally made?", "{s} was originally made in {o}."),
    "P407": ("What language was {s} written in?", "{s} was originally written in {o}."),
    "P413": ("Which position does {s} play on the team?", "On the team, {s} plays the position of {o}."),
    "P449": ("Which network first broadcast {s}?", "{s} was first broadcast on {o}."),
    "P463": ("What organization is {s} part of?", "{s} is a member of {o}."),
    "P495": ("Which country does {s} come from?", "{s} comes from the country of {o}."),
    "P641": ("What sport is {s} associated with?", "{s} is a professional {o} player."),
    "P740": ("Where was {s} founded?", "{s} was founded in {o}."),
    "P937": ("In which city did {s} mainly work?", "{s} mainly worked in {o}."),
    "P1303": ("What instrument is {s} known for playing?", "{s} is known for playing the {o}."),
    "P1412": ("In which language does {s} communicate?", "{s} communicates in {o}."),
}
"""The fresh construction's question and statement per relation (Wikidata property id): written for reporting
only, in other words than :data:`~core.evaluation.conflict_sources.QUESTIONS` and the ROME clozes."""
_LEAD = "Here is a short passage about {s}."
_TAIL = "The passage is taken from a longer article."


def norm_text(text: str) -> str:
    """The normalized words of ``text`` joined by spaces (the key two texts are compared by)."""
    return " ".join(normalize_words(text))


@dataclass
class ValidationRow:
    """One row to answer with the model and label by what it answers.

    Attributes:
        construction: a key of :data:`CONSTRUCTIONS`; relation: a key of :data:`RELATIONS`.
        source: where the row comes from (``rome``, ``nq_swap``, ``project``).
        query, context: the inputs.
        answer_context: the object(s) the context states (empty for ``on_topic``).
        answer_memory: the object(s) the model would name from memory (the true object; empty for ``invented``).
        subject: the fact's subject, where the source has one.
        source_id: the record it was written from (ROME ``known_id`` or fact index, NQ question).
        split: ``calibration`` or ``report`` (:func:`assign_splits`).
        variant: how a row of the typed construction was written (:data:`core.evaluation.typed_rows.VARIANTS`);
            empty for the other constructions.
    """

    construction: str
    relation: str
    source: str
    query: str
    context: str
    answer_context: list[str] = field(default_factory=list)
    answer_memory: list[str] = field(default_factory=list)
    subject: str = ""
    source_id: str = ""
    split: str = ""
    variant: str = ""

    def group_keys(self) -> set[str]:
        """The normalized texts that must never cross the split: the question (and the subject)."""
        out = {f"q:{norm_text(self.query)}"}
        if self.subject:
            out.add(f"s:{norm_text(self.subject)}")
        return out

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["answer_context"] = join_aliases(self.answer_context)
        out["answer_memory"] = join_aliases(self.answer_memory)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ValidationRow:
        fields_ = {k: data.get(k, "") for k in cls.__dataclass_fields__}
        fields_["answer_context"] = split_aliases(data.get("answer_context") or [])
        fields_["answer_memory"] = split_aliases(data.get("answer_memory") or [])
        return cls(**fields_)


def templated_rows(facts: Sequence[Fact], known: set[int], seed: int, pool: Sequence[Fact]) -> list[ValidationRow]:
    """The ``templated`` rows of the known facts (``known``: fact indices the model names without context):
    conflict, agreeing and on-topic, plus the project's conflict and invented-fact rows."""
    others = counterfactual_objects(list(facts), seed, pool=pool)
    rows: list[ValidationRow] = []
    for f in facts:
        if f.index not in known:
            continue
        common = {"construction": TEMPLATED, "source": "rome", "query": question_for(f), "subject": f.subject}
        common["source_id"] = f.known_id or str(f.index)
        new = others.get(f.index)
        if new is not None:
            rows.append(
                ValidationRow(
                    relation=CONFLICT,
                    context=counterfactual_context(f, new),
                    **common,
                    answer_context=[new],
                    answer_memory=f.objects,
                )
            )
        rows.append(
            ValidationRow(
                relation=AGREEING,
                context=counterfactual_context(f, f.attribute),
                **common,
                answer_context=f.objects,
                answer_memory=f.objects,
            )
        )
        rows.append(ValidationRow(relation=ON_TOPIC, context=on_topic_context(f), **common, answer_memory=f.objects))
    for r in project_rows():
        relation = INVENTED if not r.answer_memory else CONFLICT
        rows.append(
            ValidationRow(
                TEMPLATED, relation, "project", r.query, r.context, r.answer_context, r.answer_memory, source_id=r.query
            )
        )
    return rows


def fresh_rows(facts: Sequence[Fact], known: set[int], seed: int, pool: Sequence[Fact]) -> list[ValidationRow]:
    """The ``fresh`` rows (conflict and agreeing) of the known facts whose relation :data:`FRESH` writes."""
    others = counterfactual_objects(list(facts), seed + 1, pool=pool)
    rows: list[ValidationRow] = []
    for f in facts:
        if f.index not in known or f.relation_id not in FRESH:
            continue
        question, statement = FRESH[f.relation_id]
        query = f"{question.format(s=f.subject)} {FULL_SENTENCE}"
        lead = _LEAD.format(s=f.subject)
        common = {"construction": FRESH_CONSTRUCTION, "source": "rome", "query": query, "subject": f.subject}
        common["source_id"] = f.known_id or str(f.index)
        for relation, obj, objects in ((CONFLICT, others.get(f.index), None), (AGREEING, f.attribute, f.objects)):
            if obj is None:
                continue
            text = statement.format(s=f.subject, o=obj)
            context = f"{lead} {text[:1].upper() + text[1:]} {_TAIL}"
            rows.append(
                ValidationRow(
                    relation=relation,
                    context=context,
                    answer_context=objects or [obj],
                    answer_memory=f.objects,
                    **common,
                )
            )
    return rows


def _nq_records(path: str | Path) -> list[dict[str, Any]]:
    import json

    raw = read_user_file(path, MAX_FILE_BYTES, what="NQ-Swap file").decode("utf-8", errors="replace")
    out = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if not isinstance(rec, dict) or not all(k in rec for k in ("question", "org_context", "sub_context")):
            raise ValueError(
                f"{path}, line {number}: expected question, org_context, sub_context, org_answer, sub_answer"
            )
        out.append(rec)
    return out


NqPassages = tuple[list[str], list[str], str, str]
"""An NQ-Swap record's ``(original answers, substituted answers, original passage, substituted passage)``."""
_OVERLAP, _UNTRIMMABLE = "answers long or overlapping", "passage not trimmable around one answer"


def nq_passages(rec: dict[str, Any], cut: Callable[[str, list[str]], str | None] = trim_passage) -> NqPassages | str:
    """An NQ-Swap record's short answers and its two passages, each cut around its own answer by ``cut``
    (``trim_passage`` by default) — or why the record is left out: the answers are long or overlap, or a passage
    cannot be cut around one answer (none there, or the other answer in it too)."""
    org, sub = _short(split_aliases(rec["org_answer"])), _short(split_aliases(rec["sub_answer"]))
    if not org or not sub or any(find_spans(a, [b]) or find_spans(b, [a]) for a in org for b in sub):
        return _OVERLAP
    sub_ctx, org_ctx = cut(detokenize(str(rec["sub_context"])), sub), cut(detokenize(str(rec["org_context"])), org)
    if sub_ctx is None or org_ctx is None or find_spans(sub_ctx, org) or find_spans(org_ctx, sub):
        return _UNTRIMMABLE
    return org, sub, org_ctx, sub_ctx


def prose_rows(path: str | Path, *, questions: int, seed: int) -> tuple[list[ValidationRow], dict[str, int]]:
    """``prose`` rows of at most ``questions`` NQ-Swap questions (a seeded sample of questions, one substitution
    record each): the substituted passage (conflict) and the original one (agreeing), trimmed around the answer.

    Returns:
        ``(rows, left_out)``, ``left_out`` counting the records dropped by reason.
    """
    by_question: dict[str, list[dict[str, Any]]] = {}
    for rec in _nq_records(path):
        by_question.setdefault(norm_text(detokenize(str(rec["question"]))), []).append(rec)
    order = sorted(by_question)
    random.Random(seed).shuffle(order)
    rows: list[ValidationRow] = []
    left: dict[str, int] = {}
    taken = 0
    for key in order:
        if taken >= questions:
            break
        rng = random.Random(f"{seed}:{key}")
        rec = rng.choice(by_question[key])
        question = detokenize(str(rec["question"]))
        query = question[:1].upper() + question[1:] + ("" if question.endswith("?") else "?")
        parts = nq_passages(rec)
        if isinstance(parts, str):
            left[parts] = left.get(parts, 0) + 1
            continue
        org, sub, org_ctx, sub_ctx = parts
        taken += 1
        common = {"construction": PROSE, "source": "nq_swap", "query": query, "source_id": question}
        rows.append(ValidationRow(relation=CONFLICT, context=sub_ctx, answer_context=sub, answer_memory=org, **common))
        rows.append(ValidationRow(relation=AGREEING, context=org_ctx, answer_context=org, answer_memory=org, **common))
    return rows, left


class _Groups:
    """Union–find over row indices."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


def _named_subjects(query: str, subjects: Iterable[str]) -> set[str]:
    """The subjects (normalized) that occur as whole words in the normalized ``query``."""
    padded = f" {norm_text(query)} "
    return {s for s in subjects if s and f" {s} " in padded}


def row_groups(rows: Sequence[ValidationRow]) -> list[int]:
    """A group id per row: rows sharing a normalized question or subject, or whose question names another row's
    subject, are in one group (transitively)."""
    groups = _Groups(len(rows))
    first: dict[str, int] = {}
    subjects = {norm_text(r.subject) for r in rows if r.subject}
    for i, r in enumerate(rows):
        keys = r.group_keys() | {f"s:{s}" for s in _named_subjects(r.query, subjects)}
        for key in keys:
            if key in first:
                groups.union(i, first[key])
            else:
                first[key] = i
    return [groups.find(i) for i in range(len(rows))]


def assign_splits(rows: Sequence[ValidationRow], seed: int = 0, calibration_fraction: float = 0.5) -> None:
    """Set every row's ``split`` by its group (:func:`row_groups`): a seeded hash of the group's smallest key."""
    ids = row_groups(rows)
    names: dict[int, str] = {}
    for i, r in enumerate(rows):
        key = min(r.group_keys())
        names[ids[i]] = min(names.get(ids[i], key), key)
    for i, r in enumerate(rows):
        digest = hashlib.sha256(f"{seed}:{names[ids[i]]}".encode()).digest()
        share = int.from_bytes(digest[:8], "big") / 2**64
        r.split = CALIBRATION if share < calibration_fraction else REPORT


def split_leaks(rows: Sequence[ValidationRow]) -> list[str]:
    """Every way the ``calibration`` and ``report`` rows touch (empty when they never do): a normalized question
    or subject on both sides, or a report question that names a calibration subject (and the reverse)."""
    sides: dict[str, dict[str, set[str]]] = {CALIBRATION: {}, REPORT: {}}
    for r in rows:
        for key in r.group_keys():
            sides[r.split].setdefault(key, set()).add(r.query)
    leaks = [f"{key} in both splits" for key in sorted(set(sides[CALIBRATION]) & set(sides[REPORT]))]
    for here, there in ((CALIBRATION, REPORT), (REPORT, CALIBRATION)):
        their_subjects = {k[2:] for k in sides[there] if k.startswith("s:")}
        for r in rows:
            if r.split == here:
                leaks += [
                    f"{r.split} question {r.query!r} names {there} subject {s!r}"
                    for s in sorted(_named_subjects(r.query, their_subjects))
                ]
    return leaks


def report_only_fresh(rows: Sequence[ValidationRow]) -> list[ValidationRow]:
    """``rows`` without the fresh rows that fell in the calibration split: the fresh construction is for reporting
    only, so it keeps just the rows whose subject group is a report group (held out by subject too)."""
    return [r for r in rows if r.construction != FRESH_CONSTRUCTION or r.split == REPORT]
