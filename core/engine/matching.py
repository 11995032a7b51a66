"""Matching an answer against objects: which of two sources an answer names, and the behavior label that follows.

A knowledge-conflict row has the object its context states and the object the model remembers; each may list
aliases separated by ``" | "``. :func:`behavior_label` labels an answer by what it names: the context's object and
not the remembered one → ``read``; the remembered one and not the context's → ``recalled``; neither or both → no
label. Matching (:func:`find_spans`) is on normalized words: Unicode NFKC, case-folded, accents and punctuation
removed, the articles *a*, *an*, *the* dropped, the number words zero–twenty written as digits and thousands
separators removed; an alias matches where its words occur as consecutive whole words of the answer ("Rome" is not
found in "Romeo"). A match inside a longer match of the other side does not count ("York" inside "New York").

The engine's answer span and swap test compare words the same way; :mod:`core.evaluation.behavior` labels rows
with it. Pure text: no model.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from core.engine.verdict import NEITHER, READ, RECALLED

ALIAS_SEPARATOR = " | "
BOTH = "both"

_NUMBERS = [
    *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
    *("eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"),
]
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(_NUMBERS)}
_ARTICLES = {"a", "an", "the"}
_THOUSANDS = re.compile(r"(?<=\d)[,\u00a0 ](?=\d{3}\b)")


def normalize_words(text: str) -> list[str]:
    """The normalized words of ``text`` (see the module docstring): the unit every match is made of."""
    text = unicodedata.normalize("NFKC", text or "").casefold()
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    text = _THOUSANDS.sub("", text)
    text = "".join(c if c.isalnum() else " " for c in text)
    words = [_NUMBER_WORDS.get(w, w) for w in text.split()]
    return [w for w in words if w not in _ARTICLES]


def split_aliases(value: str | Sequence[str] | None) -> list[str]:
    """The aliases of an object: a list, or one string with aliases separated by ``|`` (empty ones dropped)."""
    if value is None:
        return []
    items = value.split("|") if isinstance(value, str) else list(value)
    return [a.strip() for a in items if isinstance(a, str) and normalize_words(a)]


def join_aliases(aliases: Sequence[str]) -> str:
    """The one-string form of an alias list (``" | "``-separated), as the CSV columns hold it."""
    return ALIAS_SEPARATOR.join(a.strip() for a in aliases if a.strip())


def find_spans(answer: str, aliases: Sequence[str]) -> list[tuple[int, int]]:
    """Every ``(start, end)`` word span of the normalized answer where one of ``aliases`` occurs whole."""
    words = normalize_words(answer)
    spans = []
    for alias in aliases:
        target = normalize_words(alias)
        n = len(target)
        if not n:
            continue
        spans.extend((i, i + n) for i in range(len(words) - n + 1) if words[i : i + n] == target)
    return spans


def _outside(spans: list[tuple[int, int]], others: list[tuple[int, int]]) -> bool:
    """Whether a span of ``spans`` lies outside every strictly longer span of ``others``."""
    return any(not any(o0 <= s0 and s1 <= o1 and (o1 - o0) > (s1 - s0) for o0, o1 in others) for s0, s1 in spans)


def answer_sources(answer: str, context_aliases: Sequence[str], memory_aliases: Sequence[str]) -> tuple[bool, bool]:
    """``(names the context's object, names the remembered object)`` for one answer (see :func:`find_spans`)."""
    ctx = find_spans(answer, context_aliases)
    mem = find_spans(answer, memory_aliases)
    return _outside(ctx, mem), _outside(mem, ctx)


def behavior_label(
    answer: str, context_aliases: str | Sequence[str] | None, memory_aliases: str | Sequence[str] | None
) -> tuple[str | None, str]:
    """The behavior an answer shows: ``(label, reason)``.

    ``label`` is :data:`READ`, :data:`RECALLED` or ``None``; ``reason`` is ``"context"``, ``"memory"``,
    :data:`NEITHER` or :data:`BOTH`. A row with no context object (an on-topic context) can only be recalled; a
    row with no remembered object (an invented fact) can only be read.
    """
    ctx, mem = answer_sources(answer, split_aliases(context_aliases), split_aliases(memory_aliases))
    if ctx and mem:
        return None, BOTH
    if ctx:
        return READ, "context"
    if mem:
        return RECALLED, "memory"
    return None, NEITHER
