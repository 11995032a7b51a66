"""The ``typed`` construction: questions the way people type them, built for reporting only and never fitted on.

Five variants, each from facts and passages written by others (ROME's known facts, NQ-Swap's Natural Questions
passages), each a conflict row (the context states another object than memory) and, where the variant has one, its
agreeing twin (labeled by its swap test):

* ``as typed`` — a Natural Questions question exactly as its user typed it (lower case, no question mark) over its
  passage trimmed around the answer, as written and with the answer substituted;
* ``number`` — the same for the questions whose answer is a number or a year (a number swapped for a number);
* ``late`` — the same questions over a long stretch of the passage (:data:`LATE_WORDS` words at most) that ends with
  the one sentence naming the answer, at least :data:`LATE_BEFORE` words before it;
* ``two passages`` — a ROME fact asked tersely ("capital of philippines", :data:`TERSE`) over two passages that
  state two different objects, neither the true one (both read; the true one is recalled);
* ``French`` / ``Spanish`` — a ROME fact asked in another language (:data:`FOREIGN`) over the English cloze
  completed by another object (conflict) or the true one (agreeing); the language and continent names an answer
  may use in that language count as the object (:data:`_NAMES`).

Held out by construction: the ROME rows use only subjects of the report split of the validation rows, the NQ rows
only questions no validation row asks, and :func:`typed_rows` drops any row whose question or subject touches a
calibration row (:func:`touches`), so nothing here was chosen on or fitted on.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from core.engine.matching import find_spans, normalize_words, split_aliases
from core.evaluation.conflict_sources import (
    Fact,
    _short,
    counterfactual_context,
    counterfactual_objects,
    detokenize,
    split_sentences,
)
from core.evaluation.constructions import (
    AGREEING,
    CALIBRATION,
    CONFLICT,
    FRESH,
    REPORT,
    ValidationRow,
    _named_subjects,
    _nq_records,
    norm_text,
    nq_passages,
    trim_passage,
)

TYPED_CONSTRUCTION = "typed"
AS_TYPED, NUMBER, LATE, TWO_PASSAGES = "as typed", "number", "late", "two passages"
LATE_WORDS, LATE_BEFORE = 160, 60
VARIANTS: dict[str, str] = {
    AS_TYPED: "a Natural Questions question as its user typed it, over its passage trimmed around the answer",
    NUMBER: "the same, for questions whose answer is a number or a year",
    LATE: "the same questions over a long passage that names the answer only in its last sentence",
    TWO_PASSAGES: "a ROME fact asked tersely over two passages that state two different objects, neither true",
    "French": "a ROME fact asked in French over the English cloze",
    "Spanish": "a ROME fact asked in Spanish over the English cloze",
}
"""Every variant of the typed construction and how its rows are written."""

TERSE: dict[str, str] = {
    "P17": "{s} country", "P19": "where was {s} born", "P20": "where did {s} die", "P27": "{s} nationality",
    "P30": "what continent is {s} on", "P36": "capital of {s}", "P37": "{s} official language",
    "P39": "what position does {s} hold", "P101": "what field is {s} in", "P103": "{s} native language",
    "P106": "what does {s} do", "P108": "who does {s} work for", "P127": "who owns {s}",
    "P131": "what region is {s} in", "P136": "what kind of music does {s} play", "P138": "{s} named after",
    "P140": "{s} religion", "P159": "where is {s} headquartered", "P176": "who makes {s}",
    "P178": "who developed {s}", "P276": "where is {s}", "P364": "what language is {s} in",
    "P407": "what language is {s} written in", "P413": "what position does {s} play",
    "P449": "what channel aired {s}", "P463": "what is {s} a member of", "P495": "where is {s} from",
    "P641": "what sport does {s} play", "P740": "where was {s} formed", "P937": "where did {s} work",
    "P1303": "what instrument does {s} play", "P1412": "what language does {s} speak",
}  # fmt: skip
"""A terse lower-case query per relation, the way a search box gets it."""

FOREIGN: dict[str, dict[str, str]] = {
    "French": {
        "P17": "Dans quel pays se trouve {s} ?", "P19": "Où est né {s} ?", "P20": "Où est mort {s} ?",
        "P27": "De quel pays {s} est-il citoyen ?", "P30": "Sur quel continent se trouve {s} ?",
        "P36": "Quelle est la capitale de {s} ?", "P37": "Quelle est la langue officielle de {s} ?",
        "P39": "Quel poste occupe {s} ?", "P101": "Dans quel domaine travaille {s} ?",
        "P103": "Quelle est la langue maternelle de {s} ?", "P106": "Quelle est la profession de {s} ?",
        "P108": "Pour qui travaille {s} ?", "P127": "À qui appartient {s} ?",
        "P131": "Dans quelle région se trouve {s} ?", "P136": "Quel genre de musique joue {s} ?",
        "P138": "D'où vient le nom de {s} ?", "P140": "Quelle est la religion de {s} ?",
        "P159": "Où se trouve le siège de {s} ?", "P176": "Quelle entreprise fabrique {s} ?",
        "P178": "Quelle entreprise a développé {s} ?", "P276": "Où se trouve {s} ?",
        "P364": "Dans quelle langue est {s} à l'origine ?", "P407": "En quelle langue est écrit {s} ?",
        "P413": "À quel poste joue {s} ?", "P449": "Sur quelle chaîne a été diffusé {s} ?",
        "P463": "De quelle organisation {s} est-il membre ?", "P495": "De quel pays vient {s} ?",
        "P641": "Quel sport pratique {s} ?", "P740": "Dans quelle ville a été fondé {s} ?",
        "P937": "Dans quelle ville a travaillé {s} ?", "P1303": "De quel instrument joue {s} ?",
        "P1412": "Quelle langue parle {s} ?",
    },
    "Spanish": {
        "P17": "¿En qué país está {s}?", "P19": "¿Dónde nació {s}?", "P20": "¿Dónde murió {s}?",
        "P27": "¿De qué país es ciudadano {s}?", "P30": "¿En qué continente está {s}?",
        "P36": "¿Cuál es la capital de {s}?", "P37": "¿Cuál es el idioma oficial de {s}?",
        "P39": "¿Qué cargo ocupa {s}?", "P101": "¿En qué campo trabaja {s}?",
        "P103": "¿Cuál es la lengua materna de {s}?", "P106": "¿Cuál es la profesión de {s}?",
        "P108": "¿Para quién trabaja {s}?", "P127": "¿Quién es el dueño de {s}?",
        "P131": "¿En qué región está {s}?", "P136": "¿Qué género de música toca {s}?",
        "P138": "¿En honor a qué se nombró {s}?", "P140": "¿Cuál es la religión de {s}?",
        "P159": "¿Dónde está la sede de {s}?", "P176": "¿Qué empresa fabrica {s}?",
        "P178": "¿Qué empresa desarrolló {s}?", "P276": "¿Dónde está {s}?",
        "P364": "¿En qué idioma es originalmente {s}?", "P407": "¿En qué idioma está escrito {s}?",
        "P413": "¿En qué posición juega {s}?", "P449": "¿En qué cadena se emitió {s}?",
        "P463": "¿De qué organización es miembro {s}?", "P495": "¿De qué país es {s}?",
        "P641": "¿Qué deporte practica {s}?", "P740": "¿En qué ciudad se fundó {s}?",
        "P937": "¿En qué ciudad trabajó {s}?", "P1303": "¿Qué instrumento toca {s}?",
        "P1412": "¿Qué idioma habla {s}?",
    },
}  # fmt: skip
"""The question of each relation in each language of the ``French`` and ``Spanish`` variants."""

_NAMES: dict[str, tuple[str, ...]] = {
    "English": ("anglais", "inglés"), "French": ("français", "francés"), "Spanish": ("espagnol", "español"),
    "German": ("allemand", "alemán"), "Italian": ("italien", "italiano"), "Portuguese": ("portugais", "portugués"),
    "Russian": ("russe", "ruso"), "Dutch": ("néerlandais", "neerlandés"), "Swedish": ("suédois", "sueco"),
    "Japanese": ("japonais", "japonés"), "Chinese": ("chinois", "chino"), "Arabic": ("arabe", "árabe"),
    "Latin": ("latín",), "Greek": ("grec", "griego"), "Polish": ("polonais", "polaco"),
    "Finnish": ("finnois", "finlandés"), "Korean": ("coréen", "coreano"), "Hebrew": ("hébreu", "hebreo"),
    "Asia": ("Asie",), "Europe": ("Europa",), "Africa": ("Afrique", "África"),
    "Antarctica": ("Antarctique", "Antártida"), "Oceania": ("Océanie",),
    "North America": ("Amérique du Nord", "América del Norte"),
    "South America": ("Amérique du Sud", "América del Sur"),
}  # fmt: skip
"""The French and Spanish names an answer may give a language or a continent (accents are ignored in matching)."""

_NUMBER = re.compile(r"^\d[\d,.]*$")


def is_number(answers: Sequence[str]) -> bool:
    """Whether every one of ``answers`` is a number or a year ("23", "1,200", "1987")."""
    return bool(answers) and all(_NUMBER.match(a.strip()) for a in answers)


def _translated(objects: Sequence[str]) -> list[str]:
    out = list(objects)
    for o in objects:
        out += [n for n in _NAMES.get(o.strip(), ()) if n not in out]
    return out


def late_passage(text: str, answers: list[str]) -> str | None:
    """The passage's sentences up to and including the first that names an answer — at most :data:`LATE_WORDS`
    words, the answer's sentence last and at least :data:`LATE_BEFORE` words before it; ``None`` when the passage
    has no such stretch (or names the answer earlier)."""
    sentences = split_sentences(text)
    hit = next((i for i, s in enumerate(sentences) if find_spans(s, answers)), None)
    if hit is None:
        return None
    kept, words = [sentences[hit]], len(sentences[hit].split())
    for s in reversed(sentences[:hit]):
        if words + len(s.split()) > LATE_WORDS:
            break
        kept.insert(0, s)
        words += len(s.split())
    return " ".join(kept) if words - len(sentences[hit].split()) >= LATE_BEFORE else None


def _nq_pair(rec: dict[str, Any], variant: str, query: str) -> list[ValidationRow] | None:
    parts = nq_passages(rec, late_passage if variant == LATE else trim_passage)
    if isinstance(parts, str):
        return None
    org, sub, org_ctx, sub_ctx = parts
    common = {"construction": TYPED_CONSTRUCTION, "source": "nq_swap", "query": query, "variant": variant}
    common["source_id"] = str(rec["question"])
    return [
        ValidationRow(relation=CONFLICT, context=sub_ctx, answer_context=sub, answer_memory=org, **common),
        ValidationRow(relation=AGREEING, context=org_ctx, answer_context=org, answer_memory=org, **common),
    ]


def nq_typed_rows(path: str, taken: set[str], *, questions: dict[str, int], seed: int) -> list[ValidationRow]:
    """The NQ variants: ``questions[variant]`` questions each (:data:`AS_TYPED`, :data:`NUMBER`, :data:`LATE`),
    none in ``taken`` (normalized questions of other rows), one substitution record per question, a question used
    by one variant only."""
    by_question: dict[str, list[dict[str, Any]]] = {}
    for rec in _nq_records(path):
        key = norm_text(detokenize(str(rec["question"])))
        if key not in taken:
            by_question.setdefault(key, []).append(rec)
    order = sorted(by_question)
    random.Random(seed).shuffle(order)
    rows: list[ValidationRow] = []
    left = dict(questions)
    for key in order:
        rec = random.Random(f"{seed}:{key}").choice(by_question[key])
        numeric = is_number(_short(split_aliases(rec["org_answer"])))
        for variant in (NUMBER,) if numeric else (LATE, AS_TYPED):
            if left.get(variant, 0) <= 0:
                continue
            pair = _nq_pair(rec, variant, detokenize(str(rec["question"])).strip())
            if pair:
                rows += pair
                left[variant] -= 1
                break
    return rows


def _two_passages(f: Fact, first: str, second: str) -> str:
    statement = FRESH[f.relation_id][1].format(s=f.subject, o=second)
    return f"Passage 1: {counterfactual_context(f, first)}\n\nPassage 2: {statement[:1].upper()}{statement[1:]}"


def rome_typed_rows(facts: Sequence[Fact], *, seed: int, pool: Sequence[Fact]) -> list[ValidationRow]:
    """The ROME variants of ``facts`` (known facts of report-split subjects): each fact, by a seeded draw, either
    :data:`TWO_PASSAGES` (one conflict row) or asked in French or Spanish (a conflict and an agreeing row)."""
    first = counterfactual_objects(list(facts), seed + 2, pool=pool)
    second = counterfactual_objects(list(facts), seed + 3, pool=pool)
    rows: list[ValidationRow] = []
    for f in facts:
        if f.relation_id not in TERSE:
            continue
        common = {"construction": TYPED_CONSTRUCTION, "source": "rome", "subject": f.subject}
        common["source_id"] = f.known_id or str(f.index)
        variant = random.Random(f"{seed}:typed:{f.index}").choice((TWO_PASSAGES, "French", "Spanish"))
        o1, o2 = first.get(f.index), second.get(f.index)
        if variant == TWO_PASSAGES:
            if o1 is None or o2 is None or normalize_words(o1) == normalize_words(o2):
                continue
            rows.append(
                ValidationRow(
                    relation=CONFLICT,
                    query=TERSE[f.relation_id].format(s=f.subject.lower()),
                    context=_two_passages(f, o1, o2),
                    answer_context=[o1, o2],
                    answer_memory=f.objects,
                    variant=variant,
                    **common,
                )
            )
            continue
        query = FOREIGN[variant][f.relation_id].format(s=f.subject)
        memory = _translated(f.objects)
        for relation, obj in ((CONFLICT, o1), (AGREEING, f.attribute)):
            if obj is None:
                continue
            context_objects = memory if obj == f.attribute else _translated([obj])
            rows.append(
                ValidationRow(
                    relation=relation,
                    query=query,
                    context=counterfactual_context(f, obj),
                    answer_context=context_objects,
                    answer_memory=memory,
                    variant=variant,
                    **common,
                )
            )
    return rows


def touches(rows: Sequence[ValidationRow], others: Sequence[ValidationRow]) -> list[ValidationRow]:
    """The rows of ``rows`` that share a question or a subject with a calibration row of ``others``, or whose
    question names a calibration subject (the rows :func:`typed_rows` drops)."""
    keys = {k for r in others if r.split == CALIBRATION for k in r.group_keys()}
    subjects = {k[2:] for k in keys if k.startswith("s:")}
    return [r for r in rows if r.group_keys() & keys or _named_subjects(r.query, subjects)]


def typed_rows(
    validation: Sequence[ValidationRow], facts: Sequence[Fact], nq_path: str, *, questions: dict[str, int], seed: int
) -> list[ValidationRow]:
    """The typed construction beside the ``validation`` rows: the ROME variants of the known facts whose subject
    is a report-split subject there, the NQ variants of questions no validation row asks; every row ``report``,
    the rows that touch a calibration row dropped."""
    known = {r.source_id for r in validation if r.source == "rome" and r.split == REPORT and r.relation == AGREEING}
    chosen = [f for f in facts if (f.known_id or str(f.index)) in known]
    taken = {norm_text(r.source_id or r.query) for r in validation} | {norm_text(r.query) for r in validation}
    rows = rome_typed_rows(chosen, seed=seed, pool=facts) + nq_typed_rows(
        nq_path, taken, questions=questions, seed=seed
    )
    dropped = {id(r) for r in touches(rows, validation)}
    rows = [r for r in rows if id(r) not in dropped]
    for r in rows:
        r.split = REPORT
    return rows
