"""The swap test: a causal check of one run — does the answer follow the context when the context changes?

Where context and memory agree (the common retrieval case) no text match can tell reading from recalling: the
answer names what both say. Intervening tells: replace the located answer span (:mod:`core.engine.span`) where it
occurs in the context by a plausible alternative of the same kind, rerun the retrieval path greedily with the same
settings, and see what the answer names:

* the alternative and not the original → the answer **follows the swap**: the model *read* the context;
* the original and not the alternative → it **kept the original**: the model *recalled* it (the context's word was
  not what it used);
* neither or both → *neither* (the swap test does not decide).

The alternative comes from the model itself: the candidates of its next-token
distribution at the span's first position — first those of the path without the context (what the model finds
plausible there by itself), then those of the path with it — that start a word of the same kind as the original
(a number for a number, a capitalized word for a capitalized one), completed greedily to a whole word on the
path without the context, and not the original, nor a word of the query, the context or the model's own
no-context answer (so an answer that names it can only have taken it from the swapped context). For a number
without such a candidate, the original shifted by a fixed amount is used (a *type-matched* alternative); the
result says which.

What it can and cannot conclude: one intervention on one word. It shows whether *this* answer depends on *this*
word of the context; a model can read the context and still refuse an implausible swap (then it says *kept the
original*), and an alternative the model finds odd may derail the answer (*neither*). It is behavioral evidence
beside the headline, not a proof of the mechanism.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from core.engine.matching import behavior_label
from core.engine.settings import DualPathSettings
from core.engine.span import STOPWORDS, AnswerSpan, contains, normalize

if TYPE_CHECKING:
    from core.engine.result import DualPathResult
    from core.model.handle import ModelHandle

FOLLOWED, KEPT, NEITHER_OUTCOME, NOT_APPLICABLE = "read", "recalled", "neither", "not applicable"
OUTCOME_WORDS = {
    FOLLOWED: "the answer follows the swap: the model read the context",
    KEPT: "the answer keeps the original: the model recalled it",
    NEITHER_OUTCOME: "the answer names neither (or both): the swap test does not decide",
    NOT_APPLICABLE: "no swap test",
}
MODEL_ALTERNATIVE = "the model's own alternatives at the span's first position (top candidates without the context)"
MODEL_ALTERNATIVE_RAG = "the model's own alternatives at the span's first position (top candidates with the context)"
TYPE_MATCHED = "type-matched: the original number shifted"
MAX_WORD_TOKENS = 6
"""An alternative is completed to a whole word within this many tokens."""
MAX_CANDIDATES = 3
"""At most this many candidate tokens per row (those that may start an alternative of the original's kind) are
completed to whole words and tried, in order."""


@dataclass(frozen=True)
class SwapTest:
    """The outcome of one swap test.

    Attributes:
        outcome: ``read`` (the answer follows the swap), ``recalled`` (keeps the original), ``neither`` or
            ``not applicable`` (with ``reason``).
        original: the span text replaced in the context; alternative: what replaced it; source: where the
            alternative came from (:data:`MODEL_ALTERNATIVE`, :data:`MODEL_ALTERNATIVE_RAG`, :data:`TYPE_MATCHED`).
        occurrences: how many times the context held the original.
        swapped_context: the context with the swap; answer: the retrieval answer to it.
        reason: one sentence for the page.
        seconds: the test's wall time.
    """

    outcome: str
    original: str = ""
    alternative: str = ""
    source: str = ""
    occurrences: int = 0
    swapped_context: str = ""
    answer: str = ""
    reason: str = ""
    seconds: float = 0.0

    @property
    def decided(self) -> bool:
        return self.outcome in (FOLLOWED, KEPT)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seconds"] = round(self.seconds, 3)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SwapTest:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _pattern(phrase: str) -> re.Pattern[str]:
    """Whole-word, case-insensitive occurrences of ``phrase`` (its words joined by any non-word run)."""
    words = re.findall(r"[^\W_]+", phrase)
    body = r"[\W_]+".join(re.escape(w) for w in words)
    return re.compile(rf"(?<![^\W_]){body}(?![^\W_])", re.IGNORECASE)


def occurrences(context: str, phrase: str) -> int:
    """How many times ``phrase`` occurs in ``context`` as whole words (case-insensitive)."""
    return len(_pattern(phrase).findall(context)) if re.search(r"[^\W_]", phrase) else 0


def swap_in(context: str, phrase: str, alternative: str) -> str:
    """``context`` with every whole-word occurrence of ``phrase`` replaced by ``alternative``."""
    return _pattern(phrase).sub(lambda _m: alternative, context)


def target_phrase(span: AnswerSpan, context: str) -> str | None:
    """What to replace: the whole span where the context holds it, else its head word; ``None`` when neither."""
    if occurrences(context, span.text):
        return span.text
    head = next((w for w in re.findall(r"[^\W_]+", span.text) if normalize(w) == span.word), None)
    return head if head and occurrences(context, head) else None


def _kind(word: str) -> str:
    if word[:1].isdigit():
        return "number"
    return "capitalized" if word[:1].isupper() else "word"


def _fits(candidate: str, original: str, banned: Sequence[str]) -> bool:
    """A completed candidate word is a usable alternative to ``original``."""
    word = candidate.strip()
    norm = normalize(word)
    if not norm or " " in norm or norm in STOPWORDS or (len(norm) < 2 and not norm.isdigit()):
        return False
    if _kind(word) != _kind(original.strip()) or norm == normalize(original):
        return False
    if normalize(original).startswith(norm) or norm.startswith(normalize(original)):
        return False
    return not any(contains(text, norm) for text in banned)


def shifted_number(original: str) -> str:
    """A type-matched alternative for a number: a year moves by 7, a small count by 3, another number by 11 %."""
    value = int(original)
    if 1000 <= value <= 2100:
        return str(value - 7 if value > 1900 else value + 7)
    if value < 100:
        return str(value + 3)
    return str(round(value * 1.11))


def _may_start(piece: str, original: str, starts_word: bool) -> bool:
    """Whether a candidate token may start an alternative to ``original``: it begins a word of the same kind (a
    number for a number, a capitalized word for a capitalized one) that is not a function word and does not begin
    the original itself (checked on the token before the word is completed)."""
    word = piece.strip()
    if not word or not word[:1].isalnum() or not (starts_word or piece[:1].isspace()):
        return False
    if _kind(word) != _kind(original.strip()):
        return False
    norm, orig = normalize(word), normalize(original)
    return bool(norm) and norm not in STOPWORDS and not orig.startswith(norm)


def _candidate_ids(result: DualPathResult, position: int) -> list[tuple[str, int]]:
    """``(source, id)``: the top-k token ids at ``position`` without the context, then those with it."""
    out: list[tuple[str, int]] = []
    for source, path in ((MODEL_ALTERNATIVE, result.parametric), (MODEL_ALTERNATIVE_RAG, result.retrieval)):
        ids = path.topk_ids
        if ids is not None and position < len(ids):
            out += [(source, int(i)) for i in ids[position] if all(int(i) != j for _, j in out)]
    return out


@dataclass
class _Plan:
    """One row's swap test before the model runs: what to replace and the candidates to try."""

    result: DualPathResult
    span: AnswerSpan | None
    original: str | None = None
    candidates: list[tuple[str, int]] | None = None
    prompt: list[int] | None = None
    alternative: tuple[str, str] | None = None
    test: SwapTest | None = None


def _plan(handle: ModelHandle, result: DualPathResult, span: AnswerSpan | None, settings: DualPathSettings) -> _Plan:
    from core.engine.prepare import prepare_prompts

    plan = _Plan(result, span)
    if span is None:
        plan.test = SwapTest(NOT_APPLICABLE, reason="the answer has no content word to swap")
        return plan
    plan.original = target_phrase(span, result.context)
    if plan.original is None:
        plan.test = SwapTest(
            NOT_APPLICABLE,
            original=span.text,
            reason=f"“{span.text}” is not in the context: the answer did not take it from there, nothing to swap",
        )
        return plan
    position = span.head_positions[0]
    lead = "".join(result.retrieval.tokens[:position])
    starts_word = not lead or not lead[-1].isalnum()
    tok = handle.tokenizer
    plan.candidates = []
    for source, cid in _candidate_ids(result, position):
        piece = tok.decode([cid])
        if _may_start(piece, plan.original, starts_word):
            plan.candidates.append((source, cid))
    plan.candidates = plan.candidates[:MAX_CANDIDATES]
    prefix = [int(i) for i in result.retrieval.token_ids[:position]]
    plan.prompt = prepare_prompts(handle, result.query, result.context, settings).parametric.ids + prefix
    return plan


def _completions(handle: ModelHandle, plans: list[_Plan], batch_size: int) -> None:
    """Complete every plan's candidates to whole words (batched) and keep the first that fits."""
    from core.engine.generation import generate_greedy

    tok = handle.tokenizer
    eos = set(handle.eos_token_ids)
    jobs = [(p, src, cid) for p in plans if p.test is None and p.candidates for src, cid in p.candidates]
    words: dict[tuple[int, int], str] = {}
    settings = DualPathSettings(max_new_tokens=MAX_WORD_TOKENS)
    for start in range(0, len(jobs), batch_size):
        part = jobs[start : start + batch_size]
        outs = generate_greedy(handle, [[*(p.prompt or []), cid] for p, _, cid in part], settings)
        for (p, _, cid), (ids, _, _) in zip(part, outs):
            text = tok.decode([cid])
            for i in ids:
                piece = tok.decode([int(i)])
                if int(i) in eos or not piece or piece[:1].isspace() or not piece[:1].isalnum():
                    break
                text += piece
            words[(id(p), cid)] = text
    for p in plans:
        if p.test is not None:
            continue
        r = p.result
        banned = (r.query, r.context, r.parametric.answer, r.retrieval.answer)
        for src, cid in p.candidates or []:
            word = words.get((id(p), cid), "")
            if _fits(word, p.original or "", banned):
                p.alternative = (word.strip(), src)
                break
        if p.alternative is None and (p.original or "").strip().isdigit():
            word = shifted_number((p.original or "").strip())
            if _fits(word, p.original or "", banned):
                p.alternative = (word, TYPE_MATCHED)
        if p.alternative is None:
            p.test = SwapTest(NOT_APPLICABLE, original=p.original or "",
                              reason=f"no plausible alternative to “{p.original}” found")  # fmt: skip


def _outcome(answer: str, original: str, alternative: str) -> str:
    label, _ = behavior_label(answer, [alternative], [original])
    return {"read": FOLLOWED, "recalled": KEPT}.get(label or "", NEITHER_OUTCOME)


def _words(outcome: str, original: str, alternative: str) -> str:
    swap = f"with “{alternative}” in place of “{original}”"
    return {
        FOLLOWED: f"{swap}, the answer says “{alternative}”: it follows the context",
        KEPT: f"{swap}, the answer still says “{original}”: it keeps the original",
        NEITHER_OUTCOME: f"{swap}, the answer names neither (or both)",
    }[outcome]


def run_swap_tests(
    handle: ModelHandle,
    results: Sequence[DualPathResult],
    spans: Sequence[AnswerSpan | None],
    settings: DualPathSettings | None = None,
    *,
    batch_size: int = 8,
) -> list[SwapTest]:
    """The swap test of each result at its span (see the module docstring), batched: the alternatives' completions
    in padded batches of at most ``batch_size``, then the swapped contexts' greedy answers likewise.

    Args:
        settings: the generation settings of the swapped runs (default: each result's own).

    Returns:
        One :class:`SwapTest` per result (``seconds``: its share of the batch's time).
    """
    from core.engine.generation import generate_greedy
    from core.engine.prepare import prepare_prompts

    started = time.perf_counter()
    own = [settings or DualPathSettings(**_run_settings(r)) for r in results]
    plans = [_plan(handle, r, s, st) for r, s, st in zip(results, spans, own)]
    _completions(handle, plans, batch_size)
    todo = [(i, p) for i, p in enumerate(plans) if p.test is None and p.alternative is not None]
    for start in range(0, len(todo), batch_size):
        part = todo[start : start + batch_size]
        swapped = [swap_in(p.result.context, p.original or "", p.alternative[0]) for _, p in part]  # type: ignore[index]
        prompts = [prepare_prompts(handle, p.result.query, c, own[i]).retrieval.ids for (i, p), c in zip(part, swapped)]
        outs = generate_greedy(handle, prompts, own[part[0][0]])
        for (_, p), ctx, (ids, _, _) in zip(part, swapped, outs):
            alt, src = p.alternative  # type: ignore[misc]
            answer = handle.tokenizer.decode(ids, skip_special_tokens=True).strip()
            outcome = _outcome(answer, p.original or "", alt)
            p.test = SwapTest(outcome, p.original or "", alt, src, occurrences(p.result.context, p.original or ""),
                              ctx, answer, _words(outcome, p.original or "", alt))  # fmt: skip
    share = (time.perf_counter() - started) / max(1, len(plans))
    return [replace(p.test, seconds=share) if p.test is not None else SwapTest(NOT_APPLICABLE) for p in plans]


def _run_settings(result: DualPathResult) -> dict[str, Any]:
    fields = DualPathSettings.__dataclass_fields__
    return {k: v for k, v in (result.settings or {}).items() if k in fields}


def run_swap_test(
    handle: ModelHandle, result: DualPathResult, span: AnswerSpan | None, settings: DualPathSettings | None = None
) -> SwapTest:
    """The swap test of one result at ``span`` (the headline's located span): one greedy retrieval-path generation
    with the run's settings, plus a few decoding steps to complete the alternative."""
    return run_swap_tests(handle, [result], [span], settings)[0]


def headline_span(result: DualPathResult, calibration: Any = None) -> AnswerSpan | None:
    """The answer span the headline of ``result`` located (at the calibration's κ; the largest KL without one)."""
    from core.engine.axes import observe
    from core.engine.axes_calibration import axes_for

    cal = calibration if calibration is not None else axes_for(result.model)
    level = cal.span_level if cal is not None and cal.model == result.model else None
    return observe(result, level).span


def swap_test(handle: ModelHandle, result: DualPathResult, calibration: Any = None) -> SwapTest:
    """The swap test at the span the headline located (:func:`headline_span`), with the run's own settings."""
    return run_swap_test(handle, result, headline_span(result, calibration))


def planned_work(handle: ModelHandle, result: DualPathResult, calibration: Any = None) -> tuple[int, int, int]:
    """What :func:`swap_test` will run, before it runs (its time estimate; tokenizer only, no model call): the
    candidates it completes (each up to :data:`MAX_WORD_TOKENS` steps, batched), their prompt's tokens, and the
    most answers to swapped contexts it generates (0: it ends without the model, nothing to swap)."""
    plan = _plan(handle, result, headline_span(result, calibration), DualPathSettings(**_run_settings(result)))
    if plan.test is not None:
        return 0, 0, 0
    return len(plan.candidates or []), len(plan.prompt or []), 1


def with_swap_test(result: DualPathResult, test: SwapTest) -> DualPathResult:
    """``result`` (a copy) whose ``axes`` carry ``swap_test`` (the JSON's ``axes.swap_test``); the headline is
    computed first when the result has none."""
    from core.engine.axes import with_headline

    base = result if result.axes is not None else with_headline(result)
    return replace(base, axes={**(base.axes or {}), "swap_test": test.to_dict()})
