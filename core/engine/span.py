"""Where the answer's content is, located by the model: the answer span that answers the question.

PECoRe (Sarti et al., "Quantifying the Plausibility of Context Reliance in Neural Machine Translation", ICLR
2024, §3.1 "context-sensitive token identification") marks the generated tokens whose next-token distribution the
context moved: the contrastive metric m_t = KL(P(· | y<t, x, C) ‖ P(· | y<t, x)) — exactly the per-token KL of the
dual-path run — above a selection level. The answer's content is where the context acted, among the words that
answer the question — not the first word a word list lets through.

:func:`locate_span` works on words, not tokens (a word is a run of letters or digits in the answer's text, with the
answer positions whose tokens overlap it):

1. content words: the words of the scored answer that are not a function word of the answer's language or answer
   boilerplate (:mod:`core.engine.stopwords`), nor a word of the query (nor sharing its stem with one: the answer
   repeating the question is not its content);
2. the words that answer the question: of those, the ones of the question's kind (:mod:`core.engine.answer_kind`:
   *who* → a name, *when* → a date or year, *how many* → a number, *where* → a place; any content word for other
   questions). When the question asks for a kind the answer has no word of, the answer does not answer it
   (``answers`` false) and the span falls back to every content word;
3. its sources: a word is found in the context or in the model's own no-context answer as it is written there or
   written slightly otherwise ("Roma" for "Rome"; :func:`~core.engine.answer_kind.near_form`). The words found in
   a source are preferred (a word from neither cannot tell the two apart); when none is, the span is still the
   word that answers the question, found in neither (``sourced`` false: a made-up answer);
4. the span's head is the **first such word whose largest per-token KL reaches the level κ** (the first
   context-sensitive one; κ is fitted per model with the axes, ``AxesCalibration.span_level``); when none
   reaches κ, the one of largest KL (``sensitive`` is then false) — or, for a word of the question's kind found
   in neither source, the first of them (the KL of a made-up word says little; the first completes the answer);
5. a name grows over the capitalized words of its kind right before and after the head ("George Washington").

The head word is what the text comparisons use (is it in the context, in the no-context answer); the span's
tokens are what the axes read (their KL, their log-probability on both paths) and what the swap test replaces.
Where the context states other values of the span's kind in sentences that say the same thing ("completed in
1612" / "completed in 1634"), the span records them as ``conflicts``: the context disagrees with itself.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from core.engine.answer_kind import NAMED, PERSON, PHRASE, QuestionKind, fits, near_form, question_kind, word_kind
from core.engine.matching import find_spans, normalize_words
from core.engine.stopwords import ENGLISH, stopwords_for

STOPWORDS = ENGLISH
"""English function words and answer boilerplate (:data:`core.engine.stopwords.ENGLISH`)."""
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


def found_as(haystack: str, word: str) -> str | None:
    """How ``haystack`` writes ``word``: the word itself when it occurs there whole, else a near form of it
    ("Rome" for "Roma", :func:`~core.engine.answer_kind.near_form`), else ``None``."""
    if not haystack or not word:
        return None
    return word if contains(haystack, word) else near_form(word, haystack)


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


def content_words(words: list[Word], query: str, stopwords: frozenset[str] | None = None) -> list[Word]:
    """The words that can carry the answer's content: not a function word (``stopwords``, default: those of the
    languages the query and the words are written in), not the query's."""
    stop = stopwords if stopwords is not None else stopwords_for(query, " ".join(w.text for w in words))
    query_words = set(normalize(query).split()) - stop
    return [w for w in words if w.norm and w.norm not in stop and not from_query(w.norm, query_words)]


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
        sourced: the span is found in the context or in the no-context answer.
        kind, noun: what the question asks for (:mod:`core.engine.answer_kind`: ``person`` / "author", ``date`` /
            "year" …; ``phrase`` / "answer" for any other question).
        answers: the answer has a word of that kind (false: it does not answer the question; the span is then
            its most moved content word).
        of_kind: the candidates of the question's kind (the words that answer it).
        context_form, parametric_form: how the context and the no-context answer write the head word (itself,
            or a near form: "Rome" for "Roma"); ``None`` where it is not found.
        conflicts: other values of the span's kind the context states in a sentence that says the same thing
            ("1634" beside "1612"): the context disagrees with itself.
        cue: the query's words that said what kind of word answers it ("who", "how many"; "" for a phrase).
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
    kind: str = PHRASE
    noun: str = "answer"
    answers: bool = True
    of_kind: tuple[str, ...] = ()
    context_form: str | None = None
    parametric_form: str | None = None
    conflicts: tuple[str, ...] = ()
    cue: str = ""

    def cue_or_kind(self) -> str:
        """The query's words that set the kind ("who"), else the kind's name."""
        return self.cue or self.kind

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["positions"] = list(self.positions)
        out["head_positions"] = list(self.head_positions)
        out["candidates"] = [[w, round(float(k), 6)] for w, k in self.candidates]
        out["of_kind"] = list(self.of_kind)
        out["conflicts"] = list(self.conflicts)
        out["kl"] = round(float(self.kl), 6)
        return out


def _word_kl(word: Word, kl: np.ndarray) -> float:
    inside = [p for p in word.positions if p < kl.size]
    return float(kl[inside].max()) if inside else 0.0


def _sentence_initial(word: Word, text: str) -> bool:
    lead = text[: word.start].rstrip(" \t\"'“‘(*")
    return not lead or lead[-1] in ".!?:\n"


_ALONE = re.compile(r"[ \t]*(?:[.!?\n]|$)")


def _initial_name(w: Word, words: list[Word], text: str, ids: set[int], query: str, qk: QuestionKind) -> bool:
    """A sentence-initial capitalized word is a name when a capitalized candidate follows it ("Elio Vance founded
    …"), when it is its sentence's only word (the answer "Microsoft" on a line of its own), or when its sentence goes
    on with the question's own words ("English is the official language …", "Microsoft developed …")."""
    i = words.index(w)
    nxt = words[i + 1] if i + 1 < len(words) else None
    if nxt is not None and id(nxt) in ids and text[w.end : nxt.start] == " " and fits(qk.kind, nxt.text, noun=qk.noun):
        return True
    if _ALONE.match(text, w.end):
        return True
    stop = stopwords_for(query, text)
    query_words = set(normalize(query).split()) - stop
    for later in words[i + 1 :]:
        if re.search(r"[.!?:;\n]", text[w.end : later.start]):
            return False
        if later.norm and later.norm not in stop:
            return from_query(later.norm, query_words)
    return False


def _of_kind(qk: QuestionKind, cands: list[Word], words: list[Word], text: str, refs: str, query: str) -> list[Word]:
    """The candidates of the question's kind; a sentence-initial capitalized word is a name when the sources write
    it so elsewhere, or by :func:`_initial_name`."""
    if qk.kind == PHRASE:
        return list(cands)
    out = []
    ids = {id(w) for w in cands}
    for w in cands:
        initial = _sentence_initial(w, text)
        ok = fits(qk.kind, w.text, sentence_initial=initial, references=refs + " " + text, noun=qk.noun)
        if not ok and initial and qk.kind in NAMED and fits(qk.kind, w.text, noun=qk.noun):
            ok = _initial_name(w, words, text, ids, query, qk)
        if ok and qk.kind == PERSON and _after_a_place_word(w, words, text):
            ok = False  # "set in Elizabethan England": a place, not the person the question asks for
        if ok:
            out.append(w)
    return out


_LOCATIVE = frozenset(
    """in at near into across throughout within dans en au aux im nach bei em nel""".split()  # noqa: SIM905
)


def _after_a_place_word(word: Word, words: list[Word], text: str) -> bool:
    """``word`` follows a locative preposition, past the capitalized words before it ("in Elizabethan England")."""
    i = words.index(word)
    while i > 0 and words[i - 1].text[:1].isupper() and not _sentence_initial(words[i], text):
        i -= 1
    return i > 0 and words[i - 1].text.lower() in _LOCATIVE and not _sentence_initial(words[i], text)


PARTICLES = frozenset(
    ("da", "de", "di", "del", "della", "der", "den", "des", "du", "la", "le", "van", "von", "ter", "ten", "bin",
     "ibn", "al", "el", "dos", "das", "zu")
)  # fmt: skip
"""Lower-case words inside a name, between two capitalized words ("Leonardo da Vinci", "Ludwig van Beethoven")."""


def _grow(head: Word, words: list[Word], text: str, allowed: list[Word]) -> list[Word]:
    """``[head]`` and, when the head is capitalized, the capitalized ``allowed`` words right before and after it
    with the name particles between them (a name: "Leonardo da Vinci"), at most :data:`MAX_SPAN_WORDS` in all."""
    span = [head]
    if not head.text[:1].isupper():
        return span
    ids = {id(w) for w in allowed}

    def adjacent(a: Word, b: Word) -> bool:
        gap = text[a.end : b.start]
        return not gap.strip(" -") and "\n" not in gap

    def joins(a: Word, b: Word, new: Word) -> bool:
        return id(new) in ids and new.text[:1].isupper() and adjacent(a, b)

    def particle(w: Word) -> bool:
        return w.text in PARTICLES

    i = words.index(head)
    j = i + 1
    while j < len(words) and len(span) < MAX_SPAN_WORDS:
        nxt = words[j]
        room = len(span) + 2 <= MAX_SPAN_WORDS
        if (
            room
            and particle(nxt)
            and j + 1 < len(words)
            and adjacent(span[-1], nxt)
            and joins(nxt, words[j + 1], words[j + 1])
        ):
            span += [nxt, words[j + 1]]
            j += 2
        elif joins(span[-1], nxt, nxt):
            span.append(nxt)
            j += 1
        else:
            break
    j = i - 1
    while j >= 0 and len(span) < MAX_SPAN_WORDS:
        prev = words[j]
        room = len(span) + 2 <= MAX_SPAN_WORDS
        if room and particle(prev) and j >= 1 and adjacent(prev, span[0]) and joins(words[j - 1], prev, words[j - 1]):
            span[:0] = [words[j - 1], prev]
            j -= 2
        elif joins(prev, span[0], prev):
            span.insert(0, prev)
            j -= 1
        else:
            break
    return span


_SENTENCE = re.compile(r"[^.!?\n]+")


def _before(sentence: str, value: str, stop: frozenset[str]) -> tuple[str | None, set[str]]:
    """The content word right before ``value`` in ``sentence`` (its predicate: "completed" in "completed in
    1612") and the sentence's other content words."""
    words = normalize_words(sentence)
    target = normalize_words(value)
    at = next((i for i in range(len(words)) if words[i : i + len(target)] == target), None)
    rest = {w for w in words if w not in stop and w not in target and not w.isdigit()}
    if at is None:
        return None, rest
    lead = [w for w in words[:at] if w not in stop and not w.isdigit()]
    return (lead[-1] if lead else None), rest


def context_conflicts(context: str, value: str) -> tuple[str, ...]:
    """Other values of ``value``'s kind (a year, a number, a name) that ``context`` states in another sentence in
    the same words as ``value`` (the same content word right before it and at least one more content word shared):
    the passages disagree ("the bridge was completed in 1612" / "… the bridge was completed in 1634")."""
    target = normalize(value)
    want = word_kind(value)
    if not target or want == PHRASE:
        return ()
    sentences = [s for s in _SENTENCE.findall(context) if s.strip()]
    stop = stopwords_for(context)
    holding = [(s, *_before(s, value, stop)) for s in sentences if contains(s, target)]
    out: list[str] = []
    for s in sentences:
        for m in _WORD.finditer(s):
            other = m.group()
            norm = normalize(other)
            if norm == target or any(normalize(o) == norm for o in out) or word_kind(other) != want:
                continue
            lead, rest = _before(s, other, stop)
            if lead and any(h is not s and lead == hl and (rest & hr) - {lead} for h, hl, hr in holding):
                out.append(other)
    return tuple(out)


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _cut_word(words: list[Word], text: str, context: str, forms: dict[int, tuple[str | None, str | None]]) -> None:
    """Where the token budget cut the answer's last word, the context word it begins is its context form."""
    last = words[-1] if words else None
    if last is None or id(last) not in forms or any(forms[id(last)]) or text.rstrip()[-1:] != last.text[-1:]:
        return
    for word in re.findall(r"[^\W_]+", context):
        norm = normalize(word)
        if len(norm) > len(last.norm) and norm.startswith(last.norm):
            forms[id(last)] = (word, None)
            return


def _why(qk: QuestionKind, answers: bool, sourced: bool, sensitive: bool, kl: float, level: float | None) -> str:
    """How the head was chosen, in one sentence."""
    if qk.kind == PHRASE:
        words = "of the content words"
    elif answers:
        words = f"of the answer's words that name {_a(qk.noun)} (what “{qk.cue}” asks for)"
    else:
        words = f"of the content words (none names {_a(qk.noun)}, what “{qk.cue}” asks for)"
    where = "found in the context or in the answer without it" if sourced else "(none is found in the context or in "
    where += "" if sourced else "the answer without it)"
    if sensitive:
        return f"the first {words} {where} whose largest per-token KL ({kl:.2f} nats) reaches κ = {level:.2f}"
    if answers and not sourced and qk.kind != PHRASE:
        return f"the first {words} {where}: none reaches κ, and the first is the one that answers (KL {kl:.2f} nats)"
    why = f"the one {words} {where} that the context moved most (largest per-token KL {kl:.2f} nats"
    return why + (")" if level is None else f"; none reaches κ = {level:.2f})")


def locate_span(
    tokens: list[str],
    token_kl: np.ndarray,
    query: str,
    *,
    context: str = "",
    parametric_answer: str = "",
    window: int | None = None,
    level: float | None = None,
    cut: bool = False,
) -> AnswerSpan | None:
    """The answer span (see the module docstring); ``None`` when the answer has no content word.

    Args:
        tokens: the retrieval answer's tokens (texts, without a final end-of-sequence token); token_kl: ``(n,)``
            per-token KL in nats.
        query: the user's query (its words are not the answer's content; its wh-word says what kind of word
            answers it).
        context, parametric_answer: the words a span can be attributed to (its sources).
        window: only words that start within the first ``window`` tokens (the run's score window).
        level: κ in nats; ``None`` takes the candidate of largest KL.
        cut: the answer stopped at its token budget; its last word, when it begins a longer word of the context
            ("Mar" of "Marrowgate"), is found there as that word (the budget cut it, the context wrote it).
    """
    kl = np.asarray(token_kl, dtype=np.float64)
    n = min(len(tokens), kl.size if window is None else min(window, kl.size))
    text = "".join(tokens)
    words = answer_words(list(tokens), n)
    cands = content_words(words, query, stopwords_for(query, text))
    if not cands:
        return None
    qk = question_kind(query)
    typed = _of_kind(qk, cands, words, text, f"{query} {context} {parametric_answer}", query)
    pool = typed or cands
    scores = {id(w): _word_kl(w, kl) for w in cands}
    forms = {id(w): (found_as(context, w.norm), found_as(parametric_answer, w.norm)) for w in pool}
    if cut:
        _cut_word(words, text, context, forms)
    sourced = [w for w in pool if any(forms[id(w)])]
    choose = sourced or pool
    first = next((w for w in choose if level is not None and scores[id(w)] >= level), None)
    if first is None and typed and not sourced and qk.kind != PHRASE:
        head = choose[0]  # of the question's kind but from neither source: the first, the one that completes it
    else:
        head = first if first is not None else max(choose, key=lambda w: (scores[id(w)], -cands.index(w)))
    span = _grow(head, words, text, pool if qk.kind in NAMED and typed else cands)
    positions = tuple(sorted({p for w in span for p in w.positions}))
    top = sorted(cands, key=lambda w: -scores[id(w)])[:5]
    top += [w for w in typed if w not in top][: max(0, 8 - len(top))]
    in_context, in_parametric = forms[id(head)]
    span_text = text[span[0].start : span[-1].end]
    return AnswerSpan(
        text=span_text,
        word=head.norm,
        positions=positions,
        head_positions=head.positions,
        kl=scores[id(head)],
        level=level,
        sensitive=first is not None,
        why=_why(qk, bool(typed), bool(sourced), first is not None, scores[id(head)], level),
        candidates=tuple((w.text, scores[id(w)]) for w in cands if w in top),
        sourced=bool(sourced),
        kind=qk.kind,
        noun=qk.noun,
        cue=qk.cue,
        answers=bool(typed) or qk.kind == PHRASE,
        of_kind=tuple(w.text for w in typed) if qk.kind != PHRASE else (),
        context_form=in_context,
        parametric_form=in_parametric,
        conflicts=context_conflicts(context, head.text) if in_context else (),
    )


def span_logprob(logprob: np.ndarray, positions: tuple[int, ...]) -> float:
    """Σ log P(token) over ``positions`` (nats, float64): the log-probability of the span's tokens."""
    lp = np.asarray(logprob, dtype=np.float64)
    inside = [p for p in positions if p < lp.size]
    return float(lp[inside].sum()) if inside else math.nan


def said_conflicts(span: AnswerSpan | None) -> str:
    """The sentence that says the context disagrees with itself ("" when it does not)."""
    if span is None or not span.conflicts:
        return ""
    others = " and ".join(f"“{c}”" for c in span.conflicts)
    return f" The context disagrees with itself: besides “{span.text}” it also says {others} in the same words."


def unanswered(
    span: AnswerSpan, *, parametric_generated: bool, parametric_unsupported: bool, lp_parametric: float | None
) -> tuple[str, str, str] | None:
    """``(verdict, title, reason)`` where the span cannot be judged as read or recalled, else ``None``:

    * the question asks for a kind of word the answer has none of → *Inconclusive: the answer names no author*;
    * the words that answer it are in neither the context nor the model's own no-context answer, and the model
      does not give them without the context either (axis 2 says *unsupported*: its log-probability is below the
      band) → *Neither:
      the answer names “Elio Vance”, found in neither the context nor what the model says without it* (made up).
    """
    from core.engine.verdict import INCONCLUSIVE, NEITHER

    if not span.answers:
        title = f"Inconclusive: the answer names no {span.noun}"
        reason = (
            f"The question asks “{span.cue_or_kind()}”, for {_a(span.noun)}, and the answer names none: it does not "
            f"answer the question, so there is nothing to call read or recalled. The two paths are read at "
            f"“{span.text}”, its most moved content word, for the figures below."
        )
        return INCONCLUSIVE, title, reason
    if span.sourced or not parametric_generated or not parametric_unsupported:
        return None
    title = f"Neither: the answer names “{span.text}”, found in neither the context nor what the model says without it"
    lp = "—" if lp_parametric is None or not math.isfinite(lp_parametric) else f"{lp_parametric:.2f}"
    reason = (
        f"The answer's {span.noun} “{span.text}” is in neither the context nor the model's own answer without it, "
        f"and without the context the model gives it log-probability {lp} nats (below the support band): made "
        "up — a guess, neither read from the context nor recalled."
    )
    return NEITHER, title, reason
