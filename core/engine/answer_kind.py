"""What kind of words answer a question, and which words of an answer are of that kind.

:func:`question_kind` reads the query's wh-word (in English, French, German, Spanish, Italian, Portuguese and
Dutch): *who* → a person's name, *when* / *what year* → a date or a year, *how many* / *how much* → a number,
*where* / *which city* → a place, *which company* / *what language* → a name; anything else → :data:`PHRASE` (the
words that complete the question, any content word). :func:`fits` says whether one word of an answer is of a
kind: a number is digits or a number word; a year is a number from 1000 to 2100 (or a decade, "1990s"); a date is
a year, a month, a day of the month or a century; a name is a capitalized word that is not a function word of any
language ("Le" is not a name), not a month or a weekday and not a nationality ("Dutch", "British": an adjective
before the noun it qualifies; but the name a question for a language or a religion asks for), and that is not
capitalized only because it starts a sentence. :func:`near_copy` says whether two words are one word written twice
("Veltra" / "Veltria", "Roma" / "Rome"). Pure text, no model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.engine.matching import normalize_words
from core.engine.stopwords import ANY_LANGUAGE

PERSON, PLACE, NAME, DATE, NUMBER, PHRASE = "person", "place", "name", "date", "number", "phrase"
KINDS = (PERSON, PLACE, NAME, DATE, NUMBER, PHRASE)
NAMED = (PERSON, PLACE, NAME)
"""The kinds answered by a capitalized name."""


@dataclass(frozen=True)
class QuestionKind:
    """What a question asks for: ``kind`` (one of :data:`KINDS`), ``noun`` (what the answer should name, for a
    sentence: "author", "person", "year") and ``cue`` (the query's words that said so, "" for :data:`PHRASE`)."""

    kind: str
    noun: str
    cue: str = ""


_WHO = r"who|whom|qui|wer|wen|wem|quien|quienes|chi|quem"
_WHEN = (
    r"when|quand|wann|cuando|quando|wanneer|(?:in |en |im )?(?:what|which|quel|quelle|welchem|welches|que|qual|cual"
    r"|che) (?:year|annee|an|jahr|ano|anno|jaar)"
)
_HOW_MANY = (
    r"how (?:many|much|old|long|far|tall|high)|combien|wie (?:viele|viel)|cuantos|cuantas|cuanto|cuanta|quanti|"
    r"quante|quanto|quanta|quantos|quantas|hoeveel"
)
_WHERE = r"where|ou|wo|woher|donde|dove|onde|waar"
_PLACE_NOUNS = (
    "city town village country nation state capital capitale hauptstadt continent region province island river "
    "mountain lake place county district ville pays stadt land ciudad pais citta paese cidade"
)
_NAME_NOUNS = (
    "company firm team club band group language religion organization organisation university school brand "
    "party league network label publisher newspaper airline"
)
_ROLES = {
    "wrote": "author", "written": "author", "write": "author", "writes": "author", "authored": "author",
    "painted": "painter", "paint": "painter", "founded": "founder", "found": "founder", "discovered": "discoverer",
    "invented": "inventor", "composed": "composer", "directed": "director", "designed": "designer",
    "built": "builder", "sang": "singer", "sings": "singer", "played": "actor", "plays": "actor",
}  # fmt: skip


def _norm(text: str) -> str:
    return " ".join(normalize_words(text))


def question_kind(query: str) -> QuestionKind:
    """The kind of answer ``query`` asks for (see the module docstring)."""
    text = f" {_norm(query)} "
    if m := re.search(rf" ({_HOW_MANY}) ", text):
        return QuestionKind(NUMBER, "number", m.group(1))
    if m := re.search(rf" ({_WHEN}) ", text):
        return QuestionKind(DATE, "year" if "year" in m.group(1) or "an" in m.group(1).split() else "date", m.group(1))
    if m := re.search(r" (?:what|which|quel|quelle|welche|welcher|que|qual|cual|quale) (\w+) ", text):
        noun = m.group(1)
        if noun in _PLACE_NOUNS.split():
            return QuestionKind(PLACE, "place", m.group(0).strip())
        if noun in _NAME_NOUNS.split():
            return QuestionKind(NAME, noun, m.group(0).strip())
    places = _PLACE_NOUNS.replace(" ", "|")
    if re.search(
        rf" (?:what|quelle|quel|welche|cual|qual|quale) (?:is|est|ist|es|e) (?:la |le |die )?({places}) ", text
    ):
        return QuestionKind(PLACE, "place", "capital")
    if m := re.search(rf" ({_WHERE}) ", text):
        return QuestionKind(PLACE, "place", m.group(1))
    if m := re.search(rf" ({_WHO}) (\w+)", text):
        if m.group(2) in ("is", "was", "are", "were", "est", "ist") and _asks_about_a_name(query):
            return QuestionKind(PHRASE, "answer")  # "Who is Ilse Marrow?" asks for a description, not a name
        return QuestionKind(PERSON, _ROLES.get(m.group(2), "person"), m.group(1))
    return QuestionKind(PHRASE, "answer")


def _asks_about_a_name(query: str) -> bool:
    """The query's words after its copula start with a capitalized name ("Who is Ilse Marrow?")."""
    m = re.search(r"\b(?:is|was|are|were|est|ist)\s+(\S)", query, re.IGNORECASE)
    return bool(m) and m.group(1).isupper()


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_MONTHS = _words(
    """january february march april may june july august september october november december janvier fevrier mars
    avril mai juin juillet aout septembre octobre novembre decembre januar februar marz juli oktober dezember
    enero febrero marzo abril mayo junio julio agosto septiembre octubre noviembre diciembre gennaio febbraio
    aprile maggio giugno luglio settembre ottobre dicembre janeiro fevereiro marco maio junho julho setembro
    outubro novembro dezembro"""
)
_WEEKDAYS = _words("monday tuesday wednesday thursday friday saturday sunday")
_DATE_WORDS = _words("century centuries decade bc ad bce ce spring summer autumn fall winter")
_NUMBER_WORDS = _words(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen
    seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million
    billion dozen deux trois quatre cinq sept huit neuf dix onze douze vingt cent mille zwei drei vier funf
    sechs sieben acht neun zehn hundert tausend dos tres cuatro cinco seis siete ocho nueve diez cien mil due
    tre quattro cinque sette otto nove dieci cento mille dois duas quatro oito dez"""
)
_DEMONYMS = _words(
    """american british english scottish welsh irish french german dutch italian spanish portuguese swedish
    norwegian danish finnish icelandic russian polish czech austrian swiss belgian greek turkish hungarian
    romanian bulgarian serbian croatian ukrainian chinese japanese korean indian pakistani thai vietnamese
    indonesian australian canadian mexican brazilian argentine argentinian chilean peruvian colombian cuban
    egyptian moroccan nigerian kenyan ethiopian african european asian arab arabic persian iranian iraqi
    israeli jewish christian muslim catholic protestant roman latin victorian elizabethan renaissance flemish
    venetian florentine"""
)


def is_number(word: str) -> bool:
    """Digits (a number with thousands separators too) or a number word ("two", "deux")."""
    norm = _norm(word)
    return bool(norm) and (norm.replace(" ", "").isdigit() or norm in _NUMBER_WORDS)


def is_year(word: str) -> bool:
    """A year: a number from 1000 to 2100 in ASCII digits, or a decade ("1990s")."""
    digits = re.fullmatch(r"([0-9]{3,4})s?", word.strip())
    return bool(digits) and 1000 <= int(digits.group(1)) <= 2100


def is_date(word: str) -> bool:
    """A year, a month, a day of the month ("14th") or a century word."""
    norm = _norm(word)
    day = re.fullmatch(r"[0-9]{1,2}(?:st|nd|rd|th)?", norm)
    return is_year(word) or norm in _MONTHS or norm in _DATE_WORDS or bool(day)


_DEMONYM_NOUNS = frozenset(("language", "religion"))
"""The nouns a nationality word names ("Which language …?" → "Spanish", "Which religion …?" → "Catholic")."""


def is_name(word: str, *, sentence_initial: bool = False, references: str = "", noun: str = "") -> bool:
    """A capitalized word that is not a function word of any listed language, a month, a weekday or a nationality
    (a nationality word is the name a question for a language or a religion asks for: ``noun``). A word capitalized
    only because it starts a sentence is a name when ``references`` (the query, the context, the answers) writes it
    capitalized where no sentence starts."""
    text = word.strip()
    norm = _norm(text)
    if not text[:1].isupper() or not norm or " " in norm or norm.isdigit():
        return False
    if norm in ANY_LANGUAGE or norm in _MONTHS or norm in _WEEKDAYS:
        return False
    if norm in _DEMONYMS and noun not in _DEMONYM_NOUNS:
        return False
    if not sentence_initial:
        return True
    return re.search(rf"(?<![.!?:\n]\s)(?<=\S\s){re.escape(text)}(?![^\W_])", references) is not None


def fits(kind: str, word: str, *, sentence_initial: bool = False, references: str = "", noun: str = "") -> bool:
    """Whether ``word`` (as the answer writes it) is of ``kind`` (``noun``: what the question asks it to name, see
    :func:`is_name`): every content word is of :data:`PHRASE`."""
    if kind == NUMBER:
        return is_number(word)
    if kind == DATE:
        return is_date(word)
    if kind in NAMED:
        return is_name(word, sentence_initial=sentence_initial, references=references, noun=noun)
    return True


def word_kind(word: str) -> str:
    """The kind an alternative to ``word`` must have: a year, a number or a name (:data:`PHRASE`: none of those)."""
    if is_year(word):
        return DATE
    if is_number(word):
        return NUMBER
    return NAME if is_name(word) else PHRASE


def edit_distance(a: str, b: str, limit: int = 3) -> int:
    """The Levenshtein distance of ``a`` and ``b``, capped at ``limit`` (enough to say "within 2")."""
    if abs(len(a) - len(b)) >= limit:
        return limit
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        if min(cur) >= limit:
            return limit
        prev = cur
    return min(prev[-1], limit)


def _stem(word: str) -> str:
    return word[: max(4, len(word) - 2)]


def near_copy(a: str, b: str) -> bool:
    """``a`` and ``b`` are one word written twice: the same normalized word, or (for words that are not numbers)
    within edit distance 2 (1 when the shorter has fewer than 5 letters; none under 4) or sharing a stem."""
    x, y = _norm(a).replace(" ", ""), _norm(b).replace(" ", "")
    if not x or not y:
        return False
    if x == y:
        return True
    if x.isdigit() or y.isdigit() or min(len(x), len(y)) < 4:
        return False
    if edit_distance(x, y) <= (2 if min(len(x), len(y)) >= 5 else 1):
        return True
    return x.startswith(_stem(y)) or y.startswith(_stem(x))


def near_form(word: str, text: str) -> str | None:
    """The word of ``text`` that is ``word`` written slightly otherwise ("Rome" for "Roma": edit distance 1, the
    same first letter, at least 4 letters, not a number), else ``None``. Exact matches are the caller's."""
    x = _norm(word)
    if len(x) < 4 or x.isdigit() or " " in x:
        return None
    for candidate in re.findall(r"[^\W_]+", text):
        y = _norm(candidate)
        if y != x and len(y) >= 4 and y[:1] == x[:1] and not y.isdigit() and edit_distance(x, y, 2) <= 1:
            return candidate
    return None
