"""Where the answer's content is, located by the model: the context-sensitive answer span.

PECoRe (Sarti et al., "Quantifying the Plausibility of Context Reliance in Neural Machine Translation", ICLR
2024, §3.1 "context-sensitive token identification") marks the generated tokens whose next-token distribution the
context moved: the contrastive metric m_t = KL(P(· | y<t, x, C) ‖ P(· | y<t, x)) — exactly the per-token KL of the
dual-path run — above a selection level. The answer's content is where the context acted, not the first word a
word list lets through.

:func:`locate_span` works on words, not tokens (a word is a run of letters or digits in the answer's text, with the
answer positions whose tokens overlap it):

1. candidates: the words of the scored answer that carry content — not a function word or answer boilerplate
   (:data:`STOPWORDS`), not a word of the query (nor sharing its stem with one: the answer repeating the
   question is not its content);
2. the span's head is the **first candidate whose largest per-token KL reaches the level κ** (the first
   context-sensitive content word; κ is fitted per model with the axes, ``AxesCalibration.span_level``); when
   no candidate reaches κ the context moved no content word strongly and the head is the candidate of largest
   KL (``sensitive`` is then false);
3. a capitalized head grows over the capitalized candidates right after it (a name: "George Washington").

The head word is what the text comparisons use (is it in the context, in the no-context answer); the span's
tokens are what the axes read (their KL, their log-probability on both paths) and what the swap test replaces.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from core.engine.matching import find_spans, normalize_words

_STOP_TEXT = """a an the is are was were be been being am of in on at to for from by with as and or but not no nor
    it its this that these those there here he she they them his her their him we you i me my our your which who
    whom whose what when where why how do does did done has have had having will would shall should can could may
    might must also than then so such very just only about into onto over under after before between during
    s t called named known one some any all most more much many yes answer answers question questions based
    according context text following given located situated belongs belong owned developed written spoken made
    born founded created produced released affiliated associated headquartered sentence complete passage full"""
STOPWORDS = frozenset(_STOP_TEXT.split())
"""Words never taken as an answer's content (function words and answer boilerplate)."""
_WORD = re.compile(r"\d{1,3}(?:[,\u00a0]\d{3})+(?![\d])|[^\W_]+")
"""A word: a number written with thousands separators ("8,200", one word, as the behavior matcher reads it) or a
run of letters and digits."""
MAX_SPAN_WORDS = 4
"""A name grows over at most this many words."""


def normalize(text: str) -> str:
    """The normalized words of ``text`` joined by single spaces (:func:`core.engine.matching.normalize_words`: the
    same words the behavior labels match)."""
    return " ".join(normalize_words(text))


def contains(haystack: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs as whole normalized words in ``haystack`` (:func:`.matching.find_spans`)."""
    return bool(phrase) and bool(find_spans(haystack, [phrase]))


def _stem(word: str) -> str:
    return word[: max(4, len(word) - 2)]


def from_query(word: str, query_words: set[str]) -> bool:
    """``word`` is a word of the query or shares its stem with one ("owned" / "owns", "origin" / "originate")."""
    return word in query_words or any(
        len(q) >= 4 and len(word) >= 4 and (word.startswith(_stem(q)) or q.startswith(_stem(word))) for q in query_words
    )


@dataclass(frozen=True)
class Word:
    """One word of the answer: its text, normalized form, character offsets and the answer positions it covers."""

    text: str
    norm: str
    start: int
    end: int
    positions: tuple[int, ...]


def answer_words(tokens: list[str], n: int | None = None) -> list[Word]:
    """The words of the answer made of ``tokens`` (only those that start within the first ``n`` tokens); a number
    with thousands separators is one word."""
    text = "".join(tokens)
    starts = np.cumsum([0] + [len(t) for t in tokens])
    limit = starts[min(len(tokens), n)] if n is not None else len(text)
    out = []
    for match in _WORD.finditer(text):
        if match.start() >= limit:
            break
        positions = tuple(
            i for i in range(len(tokens)) if starts[i] < match.end() and starts[i + 1] > match.start() and tokens[i]
        )
        out.append(Word(match.group(), normalize(match.group()), match.start(), match.end(), positions))
    return out


def content_words(words: list[Word], query: str) -> list[Word]:
    """The words that can carry the answer's content: not a stop word, not the query's."""
    query_words = set(normalize(query).split()) - STOPWORDS
    return [w for w in words if w.norm and w.norm not in STOPWORDS and not from_query(w.norm, query_words)]


@dataclass(frozen=True)
class AnswerSpan:
    """The located answer span of one run.

    Attributes:
        text: the span as the answer writes it ("George Washington").
        word: the head word, normalized ("george"): what is compared with the context and the no-context answer.
        positions: the answer positions of the span's tokens; head_positions: those of the head word.
        kl: the largest per-token KL (nats) at the head word.
        level: κ, the KL level a context-sensitive word reaches (``None``: not calibrated; the largest KL decides).
        sensitive: the head reaches κ (the context moved this word).
        why: one sentence: how the span was chosen.
        candidates: up to five content words with their largest KL, in answer order (for display).
        sourced: the head is found in the context or in the no-context answer (else no content word is).
    """

    text: str
    word: str
    positions: tuple[int, ...]
    head_positions: tuple[int, ...]
    kl: float
    level: float | None
    sensitive: bool
    why: str
    candidates: tuple[tuple[str, float], ...] = ()
    sourced: bool = True

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["positions"] = list(self.positions)
        out["head_positions"] = list(self.head_positions)
        out["candidates"] = [[w, round(float(k), 6)] for w, k in self.candidates]
        out["kl"] = round(float(self.kl), 6)
        return out


def _word_kl(word: Word, kl: np.ndarray) -> float:
    inside = [p for p in word.positions if p < kl.size]
    return float(kl[inside].max()) if inside else 0.0


def _grow(head: Word, words: list[Word], text: str, candidates: list[Word]) -> list[Word]:
    """``[head]`` and, when the head is capitalized, the capitalized candidates right after it (a name)."""
    span = [head]
    if not head.text[:1].isupper():
        return span
    ids = {id(w) for w in candidates}
    i = words.index(head)
    for nxt in words[i + 1 : i + MAX_SPAN_WORDS]:
        gap = text[span[-1].end : nxt.start]
        if id(nxt) not in ids or not nxt.text[:1].isupper() or gap.strip(" -") or "\n" in gap:
            break
        span.append(nxt)
    return span


def locate_span(
    tokens: list[str],
    token_kl: np.ndarray,
    query: str,
    *,
    context: str = "",
    parametric_answer: str = "",
    window: int | None = None,
    level: float | None = None,
) -> AnswerSpan | None:
    """The context-sensitive answer span (see the module docstring); ``None`` when the answer has no content word.

    Args:
        tokens: the retrieval answer's tokens (texts, without a final end-of-sequence token); token_kl: ``(n,)``
            per-token KL in nats.
        query: the user's query (its words are not the answer's content).
        context, parametric_answer: the words a span can be attributed to (its sources).
        window: only words that start within the first ``window`` tokens (the run's score window).
        level: κ in nats; ``None`` takes the candidate of largest KL.
    """
    kl = np.asarray(token_kl, dtype=np.float64)
    n = min(len(tokens), kl.size if window is None else min(window, kl.size))
    words = answer_words(list(tokens), n)
    cands = content_words(words, query)
    if not cands:
        return None
    scores = [_word_kl(w, kl) for w in cands]
    sourced = [i for i, w in enumerate(cands) if contains(context, w.norm) or contains(parametric_answer, w.norm)]
    pool = sourced or list(range(len(cands)))
    first = next((i for i in pool if level is not None and scores[i] >= level), None)
    head_i = first if first is not None else max(pool, key=lambda i: (scores[i], -i))
    head, sensitive = cands[head_i], first is not None
    where = (
        "of the content words found in the context or in the answer without it"
        if sourced
        else ("of the content words (none is found in the context or in the answer without it)")
    )
    if sensitive:
        why = f"the first {where} whose largest per-token KL ({scores[head_i]:.2f} nats) reaches κ = {level:.2f}"
    else:
        why = f"the one {where} that the context moved most (largest per-token KL {scores[head_i]:.2f} nats"
        why += ")" if level is None else f"; none reaches κ = {level:.2f})"
    text = "".join(tokens)
    span = _grow(head, words, text, cands)
    positions = tuple(sorted({p for w in span for p in w.positions}))
    top = sorted(range(len(cands)), key=lambda i: -scores[i])[:5]
    return AnswerSpan(
        text=text[span[0].start : span[-1].end],
        word=head.norm,
        positions=positions,
        head_positions=head.positions,
        kl=scores[head_i],
        level=level,
        sensitive=sensitive,
        why=why,
        candidates=tuple((cands[i].text, scores[i]) for i in sorted(top)),
        sourced=bool(sourced),
    )


def span_logprob(logprob: np.ndarray, positions: tuple[int, ...]) -> float:
    """Σ log P(token) over ``positions`` (nats, float64): the log-probability of the span's tokens."""
    lp = np.asarray(logprob, dtype=np.float64)
    inside = [p for p in positions if p < lp.size]
    return float(lp[inside].sum()) if inside else math.nan
