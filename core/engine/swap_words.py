"""The swap test's text side (:mod:`core.engine.swap`): what to replace in the context, which words may replace
it, what the new answer names, and the sentences the page shows. Pure text, no model.

An alternative is another answer to the same question, of the span's kind
(:func:`core.engine.answer_kind.word_kind`):
a year for a year, a number for a number, a name for a name (a capitalized word that is no function word of any
language — "Le" is not a city — and no nationality), a lower-case word for a lower-case word; never the original
or a near copy of it, never a function word, never a word of the query, the context or either answer, nor a near
copy of a word of the query or the context ("Veltra" beside the query's "Veltria": edit distance ≤ 2 or a shared
stem, :func:`core.engine.answer_kind.near_copy`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from core.engine.answer_kind import NAME, PHRASE, near_copy, near_form, word_kind
from core.engine.matching import behavior_label
from core.engine.span import PARTICLES, AnswerSpan, contains, normalize
from core.engine.stopwords import ANY_LANGUAGE

FOLLOWED, KEPT, NEITHER_OUTCOME, NOT_APPLICABLE = "read", "recalled", "neither", "not applicable"
MAX_DIGITS = 4000
"""A number with more digits than this gets no shifted alternative (Python refuses to parse much longer ones)."""


def _pattern(phrase: str) -> re.Pattern[str]:
    """Whole-word, case-insensitive occurrences of ``phrase`` (its words joined by any non-word run)."""
    words = re.findall(r"[^\W_]+", phrase)
    body = r"[\W_]+".join(re.escape(w) for w in words)
    return re.compile(rf"(?<![^\W_]){body}(?![^\W_])", re.IGNORECASE)


def occurrences(context: str, phrase: str) -> int:
    """How many times ``phrase`` occurs in ``context`` as whole words (case-insensitive)."""
    return len(_pattern(phrase).findall(context)) if re.search(r"[^\W_]", phrase) else 0


def swap_in(context: str, phrase: str | Sequence[str], alternative: str) -> str:
    """``context`` with every whole-word occurrence of ``phrase`` (or of each of several phrases, longest first)
    replaced by ``alternative``."""
    for p in sorted([phrase] if isinstance(phrase, str) else phrase, key=len, reverse=True):
        if re.search(r"[^\W_]", p):
            context = _pattern(p).sub(lambda _m: alternative, context)
    return context


def target_phrase(span: AnswerSpan, context: str) -> str | None:
    """What to replace: the whole span where the context holds it, else its head word, else the head word as the
    context writes it ("Rome" for the answer's "Roma"); ``None`` when none is there."""
    if occurrences(context, span.text):
        return span.text
    head = next((w for w in re.findall(r"[^\W_]+", span.text) if normalize(w) == span.word), None)
    if head and occurrences(context, head):
        return head
    form = span.context_form or (near_form(head, context) if head else None)
    return form if form and occurrences(context, form) else None


def targets(span: AnswerSpan, context: str) -> list[str]:
    """Every phrase the swap replaces: the target (:func:`target_phrase`) and the other values of its kind that
    passages of the context state in the same words (``span.conflicts``: "1634" beside "1612")."""
    first = target_phrase(span, context)
    if first is None:
        return []
    return [first, *(c for c in span.conflicts if occurrences(context, c) and normalize(c) != normalize(first))]


def truncated(span: AnswerSpan, tokens: Sequence[str], finish: str, context: str) -> str | None:
    """The context word the answer was cut inside of: the span ends the answer, the answer stopped at its token
    budget, and the span's last word begins a longer word of the context ("Mar" of "Marrowgate"); else ``None``."""
    if finish != "length" or not span.positions or span.positions[-1] < len(tokens) - 1:
        return None
    if "".join(tokens).rstrip()[-1:].isalnum() is False:
        return None
    last = normalize(re.findall(r"[^\W_]+", span.text)[-1]) if re.search(r"[^\W_]", span.text) else ""
    for word in re.findall(r"[^\W_]+", context):
        norm = normalize(word)
        if last and len(norm) > len(last) and norm.startswith(last):
            return word
    return None


def kind_of(word: str) -> str:
    """The kind an alternative to ``word`` must share: year, number, name, or a lower-case (capitalized) word. A name
    of several words is a name, its particles included ("George Washington", "Leonardo da Vinci")."""
    words = re.findall(r"[^\W_]+", word) or [word.strip()]
    several = len(words) > 1 and words[0][:1].isupper() and words[-1][:1].isupper()
    named = several and all(w[:1].isupper() or w in PARTICLES for w in words)
    head = next((w for w in words if w.lower() not in PARTICLES), words[0])  # "Vinci" of "Da Vinci"
    kind = word_kind(head if named else word.strip())
    if kind == PHRASE:
        return "capitalized" if word.strip()[:1].isupper() else "word"
    return kind


def may_start(piece: str, original: str, starts_word: bool) -> bool:
    """Whether a candidate token may start an alternative to ``original``: it begins a word (after a space, or
    where a word starts) whose first character is of the original's kind — a digit for a year, a digit or a
    lower-case letter (a number word) for a number, a capital for a name — that is not a function word and does
    not begin the original itself (checked on the token, before the word is completed)."""
    word = piece.strip()
    if not word or not word[:1].isalnum() or not (starts_word or piece[:1].isspace()):
        return False
    kind = kind_of(original)
    if kind == "date" and not word[:1].isdigit():
        return False
    if kind == "number" and not (word[:1].isdigit() or word[:1].islower()):
        return False  # a number word ("three") is completed, then checked to be a number
    if kind in (NAME, "capitalized") and not word[:1].isupper():
        return False
    if kind == "word" and not word[:1].islower():
        return False
    norm, orig = normalize(word), normalize(original)
    return bool(norm) and norm not in ANY_LANGUAGE and not orig.startswith(norm)


def fits(candidate: str, original: str, banned: Sequence[str], near: Sequence[str] = ()) -> bool:
    """A completed candidate word is a usable alternative to ``original``: of its kind (:func:`kind_of`), a single
    word that is not a function word of any language, not the original nor a near copy of it, not in any of the
    ``banned`` texts (the query, the context, both answers) and not a near copy of a word of the ``near`` texts
    (the query and the context)."""
    word = candidate.strip()
    norm = normalize(word)
    if not norm or " " in norm or norm in ANY_LANGUAGE or (len(norm) < 2 and not norm.isdigit()):
        return False
    if kind_of(word) != kind_of(original) or norm == normalize(original) or near_copy(word, original):
        return False
    if normalize(original).startswith(norm) or norm.startswith(normalize(original)):
        return False
    if any(contains(text, norm) for text in banned):
        return False
    return not any(near_copy(word, w) for text in near for w in set(re.findall(r"[^\W_]+", text)))


def shifted_number(original: str) -> str | None:
    """A type-matched alternative for a number written in ASCII digits (thousands separators kept): a year moves
    by 7, a small count by 3, another number by about 11 % (integer arithmetic: any length). ``None`` for what is
    not such a number ("²", "①", "3.5") or is longer than :data:`MAX_DIGITS`."""
    text = original.strip()
    sep = next((c for c in (",", "\u00a0") if c in text), "")
    digits = text.replace(sep, "") if sep else text
    if not digits or not digits.isascii() or not digits.isdigit() or len(digits) > MAX_DIGITS:
        return None
    if sep and not re.fullmatch(rf"\d{{1,3}}(?:{re.escape(sep)}\d{{3}})+", text):
        return None
    value = int(digits)
    if 1000 <= value <= 2100 and not sep:
        return str(value - 7 if value > 1900 else value + 7)
    shifted = value + 3 if value < 100 else value + max(1, value // 9)
    return f"{shifted:,}".replace(",", sep) if sep else str(shifted)


def names(answer: str, word: str) -> bool:
    """The answer names ``word``: as a whole word, or written slightly otherwise ("Roma" for "Rome")."""
    return contains(answer, word) or near_form(word, answer) is not None


def outcome(answer: str, original: str | Sequence[str], alternative: str) -> str:
    """What the new answer names: the alternative and not the original → :data:`FOLLOWED`; the original and not the
    alternative → :data:`KEPT`; else :data:`NEITHER_OUTCOME`. ``original`` may list several forms (the context's
    "Rome", the answer's "Roma"); an exact match decides first, a near form where none matches."""
    forms = [original] if isinstance(original, str) else list(original)
    label, _ = behavior_label(answer, [alternative], forms)
    if label is not None or any(contains(answer, f) for f in [*forms, alternative]):
        return {"read": FOLLOWED, "recalled": KEPT}.get(label or "", NEITHER_OUTCOME)
    alt, orig = names(answer, alternative), any(names(answer, f) for f in forms)
    return FOLLOWED if alt and not orig else KEPT if orig and not alt else NEITHER_OUTCOME


def majority(outcomes: Sequence[str]) -> str:
    """The swap test's outcome over several alternatives: the outcome of most of those that decided (followed or
    kept); a tie, or none decided, → :data:`NEITHER_OUTCOME`."""
    followed, kept = outcomes.count(FOLLOWED), outcomes.count(KEPT)
    return FOLLOWED if followed > kept else KEPT if kept > followed else NEITHER_OUTCOME


def sentence(result: str, original: str, alternative: str) -> str:
    """One alternative's outcome as a sentence fragment that starts with a capital ("With “Lyon” in place of …")."""
    swap = f"With “{alternative}” in place of “{original}”"
    return {
        FOLLOWED: f"{swap}, the answer says “{alternative}”: it follows the context",
        KEPT: f"{swap}, the answer still says “{original}”: it keeps the original",
        NEITHER_OUTCOME: f"{swap}, the answer names neither (or both)",
    }[result]


def summary(outcomes: Sequence[str], alternatives: Sequence[str], original: str, verdict: str) -> str:
    """The test's reason for several alternatives: each one's outcome and the majority."""
    if len(outcomes) == 1:
        return sentence(outcomes[0], original, alternatives[0])
    each = "; ".join(f"“{a}”: {_SHORT[o]}" for a, o in zip(alternatives, outcomes))
    n = len(outcomes)
    decided = sum(o in (FOLLOWED, KEPT) for o in outcomes)
    by = {FOLLOWED: "the answer follows the context", KEPT: "the answer keeps the original"}.get(verdict)
    if by is None:
        head = f"With {n} alternatives in place of “{original}”, no majority of the {decided} that decided"
        return f"{head} ({each}): the swap test does not decide"
    count = outcomes.count(verdict)
    return f"With {n} alternatives in place of “{original}”, {by} for {count} of the {decided} that decided ({each})"


_SHORT = {FOLLOWED: "followed", KEPT: "kept the original", NEITHER_OUTCOME: "neither"}
