"""The swap test: a causal check of one run — does the answer follow the context when the context changes?

Where context and memory agree (the common retrieval case) no text match can tell reading from recalling: the
answer names what both say. Intervening tells: replace the located answer span (:mod:`core.engine.span`) where it
occurs in the context by another answer to the same question, of the same kind, rerun the retrieval path greedily
with the same settings, and see what the answer names:

* the alternative and not the original → the answer **follows the swap**: the model *read* the context;
* the original and not the alternative → it **kept the original**: the model *recalled* it (the context's word was
  not what it used);
* neither or both → *neither* (that alternative does not decide).

The alternatives come from the model itself: the candidates of its next-token distribution at the span's first
position — first those of the path without the context (what the model finds plausible there by itself, its
other likely answers), then those of the path with it — that start a word of the span's kind, completed greedily to
a whole word on the path without the context, and kept when they fit (:func:`core.engine.swap_words.fits`: a year
for a year, a number for a number, a name for a name; never a function word, the original, a word of the query,
the context or either answer, nor a near copy of a query or context word). The model's own no-context answer is
banned, not used: swapped into a context that disagreed with it, an answer naming it could be either. Up to
:data:`MAX_ALTERNATIVES` alternatives are tried, each with its own outcome; the test's outcome is the majority of
those that decided (a tie → *neither*). For a number without such a candidate, the original shifted by a fixed
amount is used (a *type-matched* alternative); the result says which. Where two passages of the context state the
span's fact with different values ("1612" / "1634", ``span.conflicts``), every one of them is replaced; where the
answer was cut by its token budget inside the span ("… is Mar"), the test says so instead of running.

What it can and cannot conclude: one intervention on one word per alternative. It shows whether *this* answer
depends on *this* word of the context; a model can read the context and still refuse an implausible swap (then it
says *kept the original*), and an alternative the model finds odd may derail the answer (*neither*). It is
behavioral evidence beside the headline, not a proof of the mechanism.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from core.engine.settings import DualPathSettings
from core.engine.span import AnswerSpan
from core.engine.swap_words import (
    FOLLOWED,
    KEPT,
    NEITHER_OUTCOME,
    NOT_APPLICABLE,
    fits,
    majority,
    may_start,
    occurrences,
    outcome,
    sentence,
    shifted_number,
    summary,
    swap_in,
    target_phrase,
    targets,
    truncated,
)
from core.model.progress import Progress

if TYPE_CHECKING:
    from core.engine.result import DualPathResult
    from core.model.handle import ModelHandle

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
MAX_CANDIDATES = 8
"""At most this many candidate tokens per row (those that may start an alternative of the original's kind) are
completed to whole words, in order."""
WIDE_TOP_K = 64
"""The candidates read from the distribution without the context at the span (its other likely answers)."""
MAX_ALTERNATIVES = 3
"""At most this many alternatives are swapped in per row (one retrieval-path generation each)."""
__all__ = ["FOLLOWED", "KEPT", "NEITHER_OUTCOME", "NOT_APPLICABLE", "occurrences", "shifted_number", "swap_in"]
__all__ += ["SwapTest", "run_swap_test", "run_swap_tests", "swap_test", "target_phrase", "with_swap_test"]


@dataclass(frozen=True)
class Trial:
    """One alternative swapped in: the word, where it came from, the swapped context, the answer to it and what
    that answer names (``read`` / ``recalled`` / ``neither``)."""

    alternative: str
    source: str
    swapped_context: str
    answer: str
    outcome: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SwapTest:
    """The outcome of one swap test.

    Attributes:
        outcome: ``read`` (the answer follows the swap), ``recalled`` (keeps the original), ``neither`` or
            ``not applicable`` (with ``reason``): over several alternatives, the majority of those that decided.
        original: the span text replaced in the context; alternative: the first alternative; source: where it
            came from (:data:`MODEL_ALTERNATIVE`, :data:`MODEL_ALTERNATIVE_RAG`, :data:`TYPE_MATCHED`).
        occurrences: how many times the context held the original (and the values that disagree with it).
        swapped_context: the context with the first alternative; answer: the retrieval answer to it.
        reason: one sentence for the page (it starts with a capital).
        seconds: the test's wall time.
        trials: every alternative tried, each with its own outcome (:class:`Trial`).
        replaced: every phrase of the context the swap replaced (the original, and the values of other passages
            that disagree with it: "1612", "1634").
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
    trials: tuple[Trial, ...] = ()
    replaced: tuple[str, ...] = ()

    @property
    def decided(self) -> bool:
        return self.outcome in (FOLLOWED, KEPT)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seconds"] = round(self.seconds, 3)
        out["trials"] = [t.to_dict() for t in self.trials]
        out["replaced"] = list(self.replaced)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SwapTest:
        out = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        out["trials"] = tuple(Trial(**{k: t[k] for k in Trial.__dataclass_fields__}) for t in data.get("trials") or ())
        out["replaced"] = tuple(data.get("replaced") or ())
        return cls(**out)


_fits = fits  # the names the tests and earlier callers use
_outcome = outcome
_words = sentence


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
    replaced: list[str] = field(default_factory=list)
    candidates: list[tuple[str, int]] | None = None
    prompt: list[int] | None = None
    alternatives: list[tuple[str, str]] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    test: SwapTest | None = None


def _not_applicable(plan: _Plan, span: AnswerSpan) -> SwapTest | None:
    """The reason this span cannot be swapped (the answer does not answer the question, it is not in the context,
    or the answer was cut inside it), else ``None``."""
    res = plan.result
    if not span.answers:
        why = f"The answer names no {span.noun}: it does not answer the question, so there is no answer to swap"
        return SwapTest(NOT_APPLICABLE, original=span.text, reason=why)
    cut = truncated(span, list(res.retrieval.tokens), res.retrieval.finish, res.context)
    if cut is not None:
        budget = (res.settings or {}).get("max_new_tokens", "its")
        why = (
            f"The answer stopped at its token budget ({budget} new tokens) inside “{span.text}”, the start of the "
            f"context's “{cut}”: it did take it from the context, but a cut word cannot be swapped and matched; "
            "raise the token budget and run again"
        )
        return SwapTest(NOT_APPLICABLE, original=span.text, reason=why)
    if plan.original is None:
        why = f"“{span.text}” is not in the context: the answer did not take it from there, nothing to swap"
        return SwapTest(NOT_APPLICABLE, original=span.text, reason=why)
    return None


def _plan(handle: ModelHandle, result: DualPathResult, span: AnswerSpan | None, settings: DualPathSettings) -> _Plan:
    from core.engine.prepare import prepare_prompts

    plan = _Plan(result, span)
    if span is None:
        plan.test = SwapTest(NOT_APPLICABLE, reason="The answer has no content word to swap")
        return plan
    plan.replaced = targets(span, result.context)
    plan.original = plan.replaced[0] if plan.replaced else None
    plan.test = _not_applicable(plan, span)
    if plan.test is not None:
        return plan
    position = span.head_positions[0]
    lead = "".join(result.retrieval.tokens[:position])
    starts_word = not lead or not lead[-1].isalnum()
    tok = handle.tokenizer
    plan.candidates = []
    for source, cid in _candidate_ids(result, position):
        if may_start(tok.decode([cid]), plan.original or "", starts_word):
            plan.candidates.append((source, cid))
    plan.candidates = plan.candidates[:MAX_CANDIDATES]
    prefix = [int(i) for i in result.retrieval.token_ids[:position]]
    plan.prompt = prepare_prompts(handle, result.query, result.context, settings).parametric.ids + prefix
    return plan


def _complete(handle: ModelHandle, jobs: list[tuple[_Plan, str, int]], batch_size: int) -> dict[tuple[int, int], str]:
    """Each job's candidate token completed greedily to a whole word (batched)."""
    from core.engine.generation import generate_greedy

    tok = handle.tokenizer
    eos = set(handle.eos_token_ids)
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
    return words


def _widen(handle: ModelHandle, plans: list[_Plan], batch_size: int) -> None:
    """Add to each plan's candidates the top :data:`WIDE_TOP_K` of the model's distribution without the context at
    the span's first position (one forward pass of the prompt the completions start from; the run keeps only
    its display top-k), before the candidates with the context, at most :data:`MAX_CANDIDATES` in all."""
    import torch

    from core.engine.generation import generate_greedy

    todo = [p for p in plans if p.test is None and p.prompt]
    tok = handle.tokenizer
    for start in range(0, len(todo), batch_size):
        part = todo[start : start + batch_size]
        outs = generate_greedy(handle, [p.prompt or [] for p in part], DualPathSettings(max_new_tokens=1))
        for p, (_, logits, _) in zip(part, outs):
            ids = torch.topk(logits[0].float(), min(WIDE_TOP_K, logits.shape[-1])).indices.tolist()
            position = p.span.head_positions[0] if p.span is not None else 0
            lead = "".join(p.result.retrieval.tokens[:position])
            starts_word = not lead or not lead[-1].isalnum()
            wide = [
                (MODEL_ALTERNATIVE, int(i))
                for i in ids
                if may_start(tok.decode([int(i)]), p.original or "", starts_word)
            ]
            own = [c for c in p.candidates or [] if c[0] == MODEL_ALTERNATIVE]
            rag = [c for c in p.candidates or [] if c[0] != MODEL_ALTERNATIVE]
            merged = list(dict.fromkeys(own + wide + rag))
            seen: set[int] = set()
            p.candidates = [c for c in merged if not (c[1] in seen or seen.add(c[1]))][:MAX_CANDIDATES]


def _completions(handle: ModelHandle, plans: list[_Plan], batch_size: int, limit: int) -> None:
    """Complete every plan's candidates to whole words and keep the first ``limit`` that fit (a shifted number
    when none does and the original is one)."""
    _widen(handle, plans, batch_size)
    jobs = [(p, src, cid) for p in plans if p.test is None and p.candidates for src, cid in p.candidates]
    words = _complete(handle, jobs, batch_size) if jobs else {}
    for p in plans:
        if p.test is not None:
            continue
        r = p.result
        banned = (r.query, r.context, r.parametric.answer, r.retrieval.answer)
        for src, cid in p.candidates or []:
            word = words.get((id(p), cid), "").strip()
            new = all(normalize_word(word) != normalize_word(a) for a, _ in p.alternatives)
            if len(p.alternatives) < limit and new and fits(word, p.original or "", banned, (r.query, r.context)):
                p.alternatives.append((word, src))
        shifted = shifted_number(p.original or "") if not p.alternatives else None
        if shifted is not None and fits(shifted, p.original or "", banned):
            p.alternatives.append((shifted, TYPE_MATCHED))
        if not p.alternatives:
            p.test = SwapTest(NOT_APPLICABLE, original=p.original or "",
                              reason=f"No plausible alternative to “{p.original}” found")  # fmt: skip


def normalize_word(word: str) -> str:
    from core.engine.span import normalize

    return normalize(word)


def _forms(plan: _Plan) -> list[str]:
    """The original as the context and the answer write it ("Rome", "Roma"): what a kept answer names."""
    span = plan.span
    forms = [plan.original or ""]
    if span is not None:
        forms += [span.text, *(w for w in (span.context_form, span.parametric_form) if w)]
    return list(dict.fromkeys(f for f in forms if f))


def _finish(plan: _Plan, seconds: float) -> SwapTest:
    """The plan's :class:`SwapTest` from its trials (the majority of those that decided)."""
    trials = plan.trials
    verdict = majority([t.outcome for t in trials])
    first = trials[0]
    original = plan.original or ""
    reason = summary([t.outcome for t in trials], [t.alternative for t in trials], original, verdict)
    if len(plan.replaced) > 1:
        others = ", ".join(f"“{c}”" for c in plan.replaced[1:])
        reason += f"; the context disagrees with itself (it also says {others}), so every one was replaced"
    count = sum(occurrences(plan.result.context, c) for c in plan.replaced)
    return SwapTest(verdict, original, first.alternative, first.source, count, first.swapped_context, first.answer,
                    reason, seconds, tuple(trials), tuple(plan.replaced))  # fmt: skip


def _label(start: int, n: int, total: int) -> str:
    return f"alternative {start + 1} of {total}" if n == 1 else f"alternatives {start + 1}–{start + n} of {total}"


def _stepper(progress: Progress | None, done: int, total: int, label: str, budget: int) -> Callable[[], None]:
    """The step listener of one batch of swapped answers: ``progress(done, total, "… · step k of budget")``."""
    steps = [0]

    def step() -> None:
        steps[0] += 1
        if progress is not None:
            progress(done, total, f"{label} · step {steps[0]} of {budget}")

    return step


def run_swap_tests(
    handle: ModelHandle,
    results: Sequence[DualPathResult],
    spans: Sequence[AnswerSpan | None],
    settings: DualPathSettings | None = None,
    *,
    batch_size: int = 8,
    alternatives: int = MAX_ALTERNATIVES,
    progress: Progress | None = None,
) -> list[SwapTest]:
    """The swap test of each result at its span (see the module docstring), batched: the alternatives'
    completions in padded batches of at most ``batch_size``, then the swapped contexts' greedy answers likewise.

    Args:
        settings: the generation settings of the swapped runs (default: each result's own).
        alternatives: at most this many alternatives per result.
        progress: ``progress(done, total, text)`` after the completions and after each generated token of the
            swapped answers ("alternative 2 of 3 · step 14 of 64").

    Returns:
        One :class:`SwapTest` per result (``seconds``: its share of the batch's time).
    """
    from core.engine.generation import generate_greedy
    from core.engine.prepare import prepare_prompts
    from core.model.handle import on_each_step

    started = time.perf_counter()
    own = [settings or DualPathSettings(**_run_settings(r)) for r in results]
    plans = [_plan(handle, r, s, st) for r, s, st in zip(results, spans, own)]
    _completions(handle, plans, batch_size, max(1, int(alternatives)))
    jobs = [(i, p, alt) for i, p in enumerate(plans) if p.test is None for alt in p.alternatives]
    total = len(jobs)
    if progress is not None:
        progress(0, total, f"{total} alternative{'s' if total != 1 else ''} to try")
    for start in range(0, total, batch_size):
        part = jobs[start : start + batch_size]
        swapped = [swap_in(p.result.context, p.replaced, alt) for _, p, (alt, _) in part]
        prompts = [
            prepare_prompts(handle, p.result.query, c, own[i]).retrieval.ids for (i, p, _), c in zip(part, swapped)
        ]
        label = _label(start, len(part), total)
        with on_each_step(_stepper(progress, start, total, label, own[part[0][0]].max_new_tokens)):
            outs = generate_greedy(handle, prompts, own[part[0][0]])
        for (_, p, (alt, src)), ctx, (ids, _, _) in zip(part, swapped, outs):
            answer = handle.tokenizer.decode(ids, skip_special_tokens=True).strip()
            p.trials.append(Trial(alt, src, ctx, answer, outcome(answer, _forms(p), alt)))
        if progress is not None:
            progress(start + len(part), total, label)
    share = (time.perf_counter() - started) / max(1, len(plans))
    out = []
    for p in plans:
        test = p.test if p.test is not None else _finish(p, share) if p.trials else SwapTest(NOT_APPLICABLE)
        out.append(replace(test, seconds=share))
    return out


def _run_settings(result: DualPathResult) -> dict[str, Any]:
    fields = DualPathSettings.__dataclass_fields__
    return {k: v for k, v in (result.settings or {}).items() if k in fields}


def run_swap_test(
    handle: ModelHandle,
    result: DualPathResult,
    span: AnswerSpan | None,
    settings: DualPathSettings | None = None,
    *,
    progress: Progress | None = None,
) -> SwapTest:
    """The swap test of one result at ``span`` (the headline's located span): one greedy retrieval-path generation
    per alternative (batched) with the run's settings, plus a few decoding steps to complete the alternatives."""
    return run_swap_tests(handle, [result], [span], settings, progress=progress)[0]


def headline_span(result: DualPathResult, calibration: Any = None) -> AnswerSpan | None:
    """The answer span the headline of ``result`` located (at the κ of ``calibration``, else of the record that
    decided the result, found by the model's identity; the largest KL without one)."""
    from core.engine.axes import observe
    from core.engine.calibration_record import record_of_result

    cal = calibration if calibration is not None else record_of_result(result).axes
    level = cal.span_level if cal is not None else None
    return observe(result, level).span


def swap_test(
    handle: ModelHandle, result: DualPathResult, calibration: Any = None, *, progress: Progress | None = None
) -> SwapTest:
    """The swap test at the span the headline located (:func:`headline_span`), with the run's own settings;
    ``progress`` hears each alternative and each generated step (:func:`run_swap_tests`)."""
    return run_swap_test(handle, result, headline_span(result, calibration), progress=progress)


def planned_work(handle: ModelHandle, result: DualPathResult, calibration: Any = None) -> tuple[int, int, int]:
    """What :func:`swap_test` will run, before it runs (its time estimate; tokenizer only, no model call): the
    candidates it completes (each up to :data:`MAX_WORD_TOKENS` steps, batched), their prompt's tokens, and the
    most answers to swapped contexts it generates (0: it ends without the model, nothing to swap)."""
    plan = _plan(handle, result, headline_span(result, calibration), DualPathSettings(**_run_settings(result)))
    if plan.test is not None:
        return 0, 0, 0
    return len(plan.candidates or []), len(plan.prompt or []), min(MAX_ALTERNATIVES, max(1, len(plan.candidates or [])))


def with_swap_test(result: DualPathResult, test: SwapTest) -> DualPathResult:
    """``result`` (a copy) whose ``axes`` hold ``swap_test`` (the JSON's ``axes.swap_test``) and whose headline the
    test carries where context and memory agree (:func:`core.engine.swap_verdict.carry`: the internals' own
    prediction kept under ``axes.internals``)."""
    from core.engine.swap_verdict import carry

    copy = replace(result)
    copy.attach_headline(carry(result.head, test))
    copy.axes = {**(copy.axes or {}), "swap_test": test.to_dict()}
    return copy
