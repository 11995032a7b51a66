"""The units of work of the runs that repeat generations on one example — Self-Critique, SMA and SMA's context
ablation — before they run (their time estimate) and once they ran (what the estimate learns from).

Each is a :class:`~core.engine.cost_meter.Work` in the units every estimate counts (:mod:`core.engine.estimate`):
decoding steps (one step of a batch, weighted by the batch's width: :func:`batched`), prompt tokens read by the
prefills, so that a run on a long context and one on a short context, or with long and short answers, are measured
on one scale. Before a run the answers' length is not known: Self-Critique's first answer is the Dual Path run's on
the same inputs when there is one (greedy, the same prompt: the same answer), else a Dual Path answer's share of the
budget (:func:`core.engine.estimate.budget_work`); its second answer and SMA's answers are their kind's last share
of their budget (:func:`core.engine.estimate.kind_budget_work`), which every run records (:func:`observe_fills`); the
context ablation's answers are the Dual Path answer's length where the session has it.

Nothing here calls the model: tokenizer counts only.
"""

from __future__ import annotations

import math
from typing import Any

from core.engine.cost_meter import Work
from core.engine.estimate import budget_work, kind_budget_work, observe_kind_fill, prompt_tokens

SELFCRITIQUE = "page:selfcritique"
"""The kind of a Self-Critique run (and the key of its second answers' share of their budget)."""
SMA = "page:sma"
"""The kind of an SMA run (and the key of its answers' share of their budget)."""
ABLATION = "page:sma_context_ablation"
"""The kind of SMA's context ablation (its answers' share is SMA's: answers to the same kind of prompt)."""
STEP_WIDTH = 2
"""The width of the batch a measured decoding step is (the Dual Path run decodes both paths in one batch)."""


def batched(steps: float, width: int) -> float:
    """``steps`` decoding steps of a batch of ``width`` prompts in the unit of a measured step (a batch of
    :data:`STEP_WIDTH`): each prompt in the batch adds about an eighth of a single step's cost on the CPU."""
    return float(steps) * (1.0 + max(1, int(width)) / 8) / (1.0 + STEP_WIDTH / 8)


def _scaled(work: Work, factor: float, prompt: float = 0.0) -> Work:
    """``work``'s steps (and their range) × ``factor``, with ``prompt`` prompt tokens."""
    low = work.steps if work.steps_low is None else work.steps_low
    high = work.steps if work.steps_high is None else work.steps_high
    return Work(work.steps * factor, prompt, steps_low=low * factor, steps_high=high * factor)


def _tokens(handle: Any, text: str) -> int:
    """The tokens of a built prompt (0 for a handle without a tokenizer)."""
    tok = getattr(handle, "tokenizer", None)
    if tok is None or not text:
        return 0
    try:
        return len(tok.encode(text, add_special_tokens=False))
    except (TypeError, ValueError, AttributeError):  # an estimate: an odd tokenizer only costs the prompt
        return 0


# ---------------------------------------------------------------- Self-Critique


def critique_scale(settings: Any, first_steps: float) -> float:
    """The length r₂ is measured against: twice r₁'s (the critique budget is twice r₁'s in the authors' code, and
    r₂ follows r₁: 2.5 s on an example whose answers took 12 steps, 19.1 s on one whose answer without the context ran
    to its 64), at most the critique budget."""
    return float(min(settings.critique_tokens, max(1.0, 2.0 * first_steps)))


def selfcritique_planned(handle: Any, query: str, context: str, settings: Any, first_steps: int | None = None) -> Work:
    """A Self-Critique run before it runs: r₁ (``first_steps`` when the Dual Path answer on the same path is known,
    else a Dual Path answer's share of the budget) read from its prompt, then r₂ (its kind's last share of
    :func:`critique_scale`) read from the critique prompt: the query, the instruction and r₁."""
    context = context if getattr(settings, "use_context", False) else ""
    known = first_steps is not None
    first = Work(float(first_steps or 0)) if known else budget_work(handle, settings.max_new_tokens)
    second = kind_budget_work(handle, SELFCRITIQUE, critique_scale(settings, first.steps))
    r1_prompt = prompt_tokens(handle, query, context)
    r2_prompt = prompt_tokens(handle, query, getattr(settings, "instruction", "")) + first.steps
    return _scaled(first, batched(1, 1), r1_prompt) + _scaled(second, batched(1, 1), r2_prompt)


def selfcritique_done(result: Any, settings: Any) -> tuple[Work, float]:
    """What a Self-Critique run did (its two answers' steps and its two prompts' tokens) and r₂'s share of
    :func:`critique_scale` (capped at 1), what the next estimate takes r₂'s length to be."""
    steps = len(result.first_ids) + len(result.critique_ids)
    share = min(1.0, len(result.critique_ids) / critique_scale(settings, len(result.first_ids)))
    return Work(batched(steps, 1), float(result.first_prompt_len + result.critique_prompt_len)), share


# ---------------------------------------------------------------- SMA


def _batches(answers: int, width: int) -> int:
    return math.ceil(max(0, answers) / max(1, width))


def sma_planned(handle: Any, query: str, context: str, settings: Any, nq: int, nc: int) -> Work:
    """An SMA run before it runs: with the context, the unperturbed answer then ``settings.generations(nq + nc)``
    answers to perturbed prompts in batches of ``settings.batch_size``; without it, the same over the ``nq`` query
    units; each answer its kind's share of SMA's budget, each prompt about as long as the unperturbed one."""
    if nq <= 0:
        return Work()
    b = settings.batch_size
    on, off = settings.generations(nq + nc), settings.generations(nq)
    each = kind_budget_work(handle, SMA, settings.max_new_tokens)
    factor = 2 * batched(1, 1) + (_batches(on, b) + _batches(off, b)) * batched(1, b)
    read = (1 + on) * prompt_tokens(handle, query, context) + (1 + off) * prompt_tokens(handle, query)
    return _scaled(each, factor, read)


def _run_done(handle: Any, run: Any, width: int, budget: int) -> tuple[float, float, list[float]]:
    """``(weighted steps, prompt tokens, each batch's share of the budget)`` of one SMA run (context on or off):
    its unperturbed answer alone, then its samples in batches of ``width`` (each batch decodes until its longest
    answer ends: Len + 1 for the end-of-sequence token, at most the budget)."""
    lengths = [int(s.n_tokens) for s in run.samples]
    shares, steps = [], batched(min(budget, int(run.reference_tokens) + 1), 1)
    for start in range(0, len(lengths), max(1, width)):
        chunk = lengths[start : start + width]
        longest = min(budget, max(chunk) + 1)
        steps += batched(longest, len(chunk))
        shares.append(longest / max(1, budget))
    return steps, float((1 + len(lengths)) * _tokens(handle, run.prompt)), shares


def sma_done(handle: Any, result: Any) -> tuple[Work, float | None]:
    """What an SMA run did (its answers' own lengths, batch by batch, and its prompts' tokens) and the mean share
    of SMA's budget its batches used (``None`` without samples)."""
    settings = result.settings or {}
    width, budget = int(settings.get("batch_size", 8)), int(settings.get("max_new_tokens", 32))
    steps, read, shares = 0.0, 0.0, []
    for run in (result.on, result.off):
        s, r, sh = _run_done(handle, run, width, budget)
        steps, read, shares = steps + s, read + r, shares + sh
    return Work(steps, read), (sum(shares) / len(shares) if shares else None)


# ---------------------------------------------------------------- the context ablation


def ablation_planned(
    handle: Any, query: str, context: str, settings: Any, sentences: int, reference_steps: int | None = None
) -> Work:
    """SMA's context ablation before it runs: the answer with the whole context alone, then the whole context once
    more and each of the ``sentences`` removed, in batches of ``settings.batch_size``; each prompt about as long as
    the whole one. Each answer as long as ``reference_steps`` (the session's Dual Path answer with the context on the
    same inputs: greedy, the same prompt, so the same answer, cut at SMA's budget) when it is known, else SMA's share
    of the budget (on the capital of France that took answers to perturbed prompts, which ran long, for answers with
    the context, which do not: 4.19× its time)."""
    b = settings.batch_size
    if reference_steps:
        each = Work(float(min(settings.max_new_tokens, reference_steps + 1)))
    else:
        each = kind_budget_work(handle, SMA, settings.max_new_tokens)
    factor = batched(1, 1) + _batches(sentences + 1, b) * batched(1, b)
    return _scaled(each, factor, (sentences + 2) * prompt_tokens(handle, query, context))


def ablation_done(handle: Any, ablation: Any, settings: Any) -> Work:
    """What a context ablation did: its answers' lengths (counted again by the tokenizer: the ablation keeps their
    texts), batch by batch, and its prompts' tokens."""
    b, budget = settings.batch_size, settings.max_new_tokens
    lengths = [_tokens(handle, a) for a in ablation.answers]
    steps = batched(min(budget, _tokens(handle, ablation.reference_answer) + 1), 1)
    # the whole context once more is the first of captum's batch: about as long as the reference answer
    lengths = [_tokens(handle, ablation.reference_answer), *lengths]
    for start in range(0, len(lengths), max(1, b)):
        chunk = lengths[start : start + b]
        steps += batched(min(budget, max(chunk) + 1), len(chunk))
    return Work(steps, float((len(ablation.answers) + 2) * prompt_tokens(handle, ablation.query, ablation.context)))


def observe_fills(handle: Any, kind: str, share: float | None) -> None:
    """Record a run's answers' share of their budget under ``kind`` (nothing for ``None``)."""
    if share is not None:
        observe_kind_fill(handle, kind, share, 1.0)
