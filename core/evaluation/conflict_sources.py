"""The inputs of a behavior-labeled conflict set: fact lists, NQ-Swap passages and the project's own sets.

* :func:`read_facts` reads a fact list in the ROME ``known_1000`` form (``subject``, ``attribute``, ``template``
  with ``{}`` for the subject, ``relation_id``; optional ``question`` and ``aliases``) and refuses a malformed
  one with a message that names the record and the field;
* :func:`question_for`, :func:`counterfactual_context` and :func:`on_topic_context` write each fact's rows: the
  query, a context whose object is replaced by another object of the same relation (as CounterFact does), and
  an on-topic context that lacks the object;
* :func:`read_nq_swap` reads NQ-Swap records (``question``, ``sub_context``, ``org_answer``, ``sub_answer``),
  detokenizes the passage (:func:`detokenize`), trims it around the substituted answer (:func:`trim_passage`)
  and keeps short answers;
* :func:`project_rows` reads the project's conflict set and the invented-fact rows of the probe set.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.engine.verdict import GROUNDED
from core.evaluation.behavior import (
    KIND_INVENTED,
    KIND_NQ_SWAP,
    KIND_PROJECT_CONFLICT,
    find_spans,
    normalize_words,
    split_aliases,
)
from core.evaluation.data import CONFLICT_FILE, PROBES_DIR, read_conflict_csv, read_labeled_csv
from core.io import MiB, read_user_file

MAX_FACTS = 20_000
MAX_FILE_BYTES = 64 * MiB
MAX_ANSWER_WORDS = 5
"""NQ-Swap rows whose answers are longer than this many words are left out (short answers only)."""
DEFAULT_CONTEXT_WORDS = 80

QUESTIONS: dict[str, str] = {
    "P17": "In which country is {} located?",
    "P19": "Where was {} born?",
    "P20": "In which city did {} die?",
    "P27": "Of which country is {} a citizen?",
    "P30": "On which continent is {}?",
    "P36": "What is the capital of {}?",
    "P37": "What is the official language of {}?",
    "P39": "What position does {} hold?",
    "P101": "In which field does {} work?",
    "P103": "What is the native language of {}?",
    "P106": "What is the profession of {}?",
    "P108": "Who is the employer of {}?",
    "P127": "Who owns {}?",
    "P131": "In which region is {} located?",
    "P136": "What genre of music does {} play?",
    "P138": "What is {} named after?",
    "P140": "What religion is {} affiliated with?",
    "P159": "Where is the headquarters of {}?",
    "P176": "Which company produces {}?",
    "P178": "Which company developed {}?",
    "P276": "Where is {} located?",
    "P364": "What is the original language of {}?",
    "P407": "In which language is {} written?",
    "P413": "What position does {} play?",
    "P449": "On which network did {} first air?",
    "P463": "Which group is {} a member of?",
    "P495": "In which country did {} originate?",
    "P641": "Which sport does {} play?",
    "P740": "In which city was {} formed?",
    "P937": "In which city did {} work?",
    "P1303": "Which instrument does {} play?",
    "P1412": "Which language does {} speak?",
}
"""A question for each relation of ROME's ``known_1000`` (Wikidata property ids); others use the cloze."""


@dataclass(frozen=True)
class Fact:
    """One fact of a fact list: ``template.format(subject)`` is completed by ``attribute`` (the true object)."""

    index: int
    subject: str
    attribute: str
    template: str
    relation_id: str
    question: str = ""
    aliases: tuple[str, ...] = ()
    known_id: str = ""

    @property
    def cloze(self) -> str:
        return self.template.replace("{}", self.subject).strip()

    @property
    def objects(self) -> list[str]:
        """The true object and its aliases."""
        return [self.attribute, *self.aliases]


def _text(record: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = record.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: field {key!r} must be a non-empty string, got {value!r}.")
    return " ".join(value.split())


def parse_facts(data: Any, *, source: str = "the fact list") -> list[Fact]:
    """Validate a fact list (a JSON list of objects) and return its facts.

    Raises:
        ValueError: not a list, an empty list, too many facts, or a record that lacks a field or whose template
            has no single ``{}`` (the message names the record by its position, 0-based, and the field).
    """
    if not isinstance(data, list):
        raise ValueError(f"{source}: expected a JSON list of facts, got {type(data).__name__}.")
    if not data:
        raise ValueError(f"{source}: the list is empty.")
    if len(data) > MAX_FACTS:
        raise ValueError(f"{source}: {len(data):,} facts; the limit is {MAX_FACTS:,}.")
    facts = []
    for i, record in enumerate(data):
        where = f"{source}, fact {i}"
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected an object with subject, attribute, template, relation_id.")
        subject = _text(record, "subject", where)
        attribute = _text(record, "attribute", where)
        template = _text(record, "template", where)
        relation = _text(record, "relation_id", where)
        if template.count("{}") != 1:
            raise ValueError(f"{where}: field 'template' must hold exactly one {{}} for the subject: {template!r}.")
        question = _text(record, "question", where, required=False)
        aliases = record.get("aliases") or []
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise ValueError(f"{where}: field 'aliases' must be a list of strings.")
        if not normalize_words(attribute):
            raise ValueError(f"{where}: field 'attribute' has no letters or digits: {attribute!r}.")
        facts.append(
            Fact(
                i,
                subject,
                attribute,
                template,
                relation,
                question,
                tuple(split_aliases(aliases)),
                str(record.get("known_id", "")),
            )
        )
    return facts


def read_json_file(path: str | Path, what: str) -> Any:
    """A JSON file through :func:`core.io.read_user_file` (regular files only, size-limited)."""
    raw = read_user_file(path, MAX_FILE_BYTES, what=what)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not valid UTF-8 JSON ({exc}).") from None


def read_facts(path: str | Path) -> list[Fact]:
    """:func:`parse_facts` of a JSON file."""
    return parse_facts(read_json_file(path, "fact list"), source=str(path))


def question_for(fact: Fact) -> str:
    """The query of a fact's rows: its own ``question``, its relation's (:data:`QUESTIONS`), else the cloze."""
    if fact.question:
        return fact.question
    template = QUESTIONS.get(fact.relation_id)
    if template:
        return template.format(fact.subject)
    return f"Complete the sentence: {fact.cloze} …"


def _overlaps(a: str, b: str) -> bool:
    """Whether one object's words occur within the other's (they could not be told apart in an answer)."""
    return bool(find_spans(a, [b]) or find_spans(b, [a]))


def counterfactual_objects(facts: list[Fact], seed: int, pool: Sequence[Fact] | None = None) -> dict[int, str | None]:
    """For each fact, another object of the same relation among ``pool``'s (default ``facts``; seeded choice;
    ``None`` when there is none).

    The object never overlaps the fact's true object or its aliases (:func:`_overlaps`), nor occurs in the
    subject, so an answer that names it cannot be read as naming the true object.
    """
    by_relation: dict[str, list[str]] = {}
    for f in facts if pool is None else pool:
        objects = by_relation.setdefault(f.relation_id, [])
        if all(normalize_words(o) != normalize_words(f.attribute) for o in objects):
            objects.append(f.attribute)
    out: dict[int, str | None] = {}
    for f in facts:
        rng = random.Random(f"{seed}:{f.index}:{f.subject}")
        choices = [
            o
            for o in by_relation.get(f.relation_id, [])
            if not any(_overlaps(o, t) for t in f.objects) and not find_spans(f.subject, [o])
        ]
        out[f.index] = rng.choice(sorted(choices)) if choices else None
    return out


def counterfactual_context(fact: Fact, new_object: str) -> str:
    """The fact's cloze completed by another object: ``"Beats Music is owned by Microsoft."``."""
    return f"{fact.cloze} {new_object}."


def on_topic_context(fact: Fact) -> str:
    """A context about the fact's subject that does not state its object."""
    return f"This note is about {fact.subject}. {fact.subject} is described in many reference works."


# -- NQ-Swap --------------------------------------------------------------------------------------------------

_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*[^>]*>")
_SPACE_BEFORE = re.compile(r"\s+([,.;:!?%)\]}])")
_SPACE_AFTER = re.compile(r"([(\[{$])\s+")
_POSSESSIVE = re.compile(r"\s+('s|'re|'ve|'ll|'d|n't|')(?=\W|$)")


def detokenize(text: str) -> str:
    """Natural Questions' tokenized HTML passage as plain text: tags removed, ``` `` ``` / ``''`` as ``"``,
    no space before punctuation or after opening brackets, possessives rejoined."""
    text = _TAG.sub(" ", text)
    text = text.replace("``", '"').replace("''", '"')
    text = " ".join(text.split())
    text = _SPACE_BEFORE.sub(r"\1", text)
    text = _SPACE_AFTER.sub(r"\1", text)
    text = _POSSESSIVE.sub(r"\1", text)
    text = re.sub(r'"\s+([^"]*?)\s+"', r'"\1"', text)
    text = re.sub(r"\s+-\s+(?=\w)", "-", text) if " - " not in text else text
    return text.strip()


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"(])")


def split_sentences(text: str) -> list[str]:
    """The sentences of a passage (split after ``.``, ``!`` or ``?`` before a capital, a quote or a bracket)."""
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def trim_passage(text: str, answers: list[str], max_words: int = DEFAULT_CONTEXT_WORDS) -> str | None:
    """The sentences around the first one that names an answer, at most ``max_words`` words; ``None`` when no
    sentence names it (or that sentence alone is too long)."""
    sentences = split_sentences(text)
    hit = next((i for i, s in enumerate(sentences) if find_spans(s, answers)), None)
    if hit is None or len(sentences[hit].split()) > max_words:
        return None
    lo, hi = hit, hit + 1
    words = len(sentences[hit].split())
    while True:
        grown = False
        for j in (lo - 1, hi):
            if 0 <= j < len(sentences) and words + len(sentences[j].split()) <= max_words:
                words += len(sentences[j].split())
                lo, hi = min(lo, j), max(hi, j + 1)
                grown = True
        if not grown:
            return " ".join(sentences[lo:hi])


@dataclass
class SourceRow:
    """One row to answer with the model: query, context and the objects its answer is matched against."""

    kind: str
    source: str
    group: str
    query: str
    context: str
    answer_context: list[str] = field(default_factory=list)
    answer_memory: list[str] = field(default_factory=list)
    no_context_answer: str = ""


def _short(answers: list[str]) -> list[str]:
    return [a for a in answers if 0 < len(normalize_words(a)) <= MAX_ANSWER_WORDS]


def read_nq_swap(
    path: str | Path, *, limit: int, seed: int, max_words: int = DEFAULT_CONTEXT_WORDS
) -> tuple[list[SourceRow], dict[str, int]]:
    """A seeded sample of at most ``limit`` NQ-Swap rows (the substituted passage as context).

    Returns:
        ``(rows, left_out)``: ``left_out`` counts records dropped by reason (long answers, an answer pair that
        overlaps, a passage that could not be trimmed around the substituted answer).

    Raises:
        ValueError: a line that is not a JSON object with the four fields (named by line number).
    """
    raw = read_user_file(path, MAX_FILE_BYTES, what="NQ-Swap file").decode("utf-8", errors="replace")
    records = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}, line {number}: not JSON ({exc.msg}).") from None
        if not isinstance(rec, dict) or not all(
            k in rec for k in ("question", "sub_context", "org_answer", "sub_answer")
        ):
            raise ValueError(f"{path}, line {number}: expected question, sub_context, org_answer and sub_answer.")
        records.append(rec)
    if not records:
        raise ValueError(f"{path}: no records.")
    random.Random(seed).shuffle(records)
    rows: list[SourceRow] = []
    left_out: dict[str, int] = {}
    for rec in records:
        if len(rows) >= limit:
            break
        org = _short(split_aliases(rec["org_answer"]))
        sub = _short(split_aliases(rec["sub_answer"]))
        reason = None
        if not org or not sub:
            reason = "nq: answer longer than 5 words"
        elif any(_overlaps(a, b) for a in org for b in sub):
            reason = "nq: substituted and original answers overlap"
        else:
            question = detokenize(str(rec["question"]))
            context = trim_passage(detokenize(str(rec["sub_context"])), sub, max_words)
            if context is None:
                reason = "nq: passage could not be trimmed around the substituted answer"
            elif find_spans(context, org):
                reason = "nq: trimmed passage still names the original answer"
            else:
                query = question[:1].upper() + question[1:] + ("" if question.endswith("?") else "?")
                rows.append(SourceRow(KIND_NQ_SWAP, "nq_swap", f"nq:{question.casefold()}", query, context, sub, org))
        if reason:
            left_out[reason] = left_out.get(reason, 0) + 1
    return rows, left_out


def project_rows() -> list[SourceRow]:
    """The project's conflict set (``assets/probes/conflict.csv``) and the probe set's invented-fact rows."""
    rows = [
        SourceRow(
            KIND_PROJECT_CONFLICT,
            "probes/conflict.csv",
            f"project:{r.query.casefold()}",
            r.query,
            r.context,
            [r.answer_context],
            [r.answer_memory],
        )
        for r in read_conflict_csv(CONFLICT_FILE)
    ]
    rows += [
        SourceRow(
            KIND_INVENTED,
            "probes/probes.csv",
            f"project:{r.query.casefold()}",
            r.query,
            r.context,
            [r.extra["answer"]],
            [],
        )
        for r in read_labeled_csv(PROBES_DIR / "probes.csv")
        if r.label == GROUNDED and r.extra.get("answer")
    ]
    return rows
