"""Running SMA on a model: both attribution runs (retrieval on and off) with ADS, and the faster
context-sentence ablation.

Each run generates the unperturbed answer ŷ, then lets captum drive the perturbed generations
(:mod:`core.methods.sma.attribution`), each scored by :class:`~core.methods.sma.scorer.ResponseScorer`.
The model is held one batch of generations at a time (through the handle), so other sessions interleave
with a long run; every random draw is local to the run, so the result depends only on the inputs and the
seed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from core.engine import DualPathSettings
from core.methods.sma.attribution import run_captum
from core.methods.sma.maths import ads, agreement_score
from core.methods.sma.results import ContextAblation, SMAResult, SMARun
from core.methods.sma.scorer import AnswerFn, ResponseScorer, greedy_answers
from core.methods.sma.settings import SMASettings
from core.methods.sma.units import CONTEXT, QUERY, Unit, baseline_of, draw_masks, split_units
from core.model.handle import ModelHandle
from core.model.progress import Progress
from core.model.prompts import build_prompt, clean_inputs, encode_prompt, resolve_template


def _prepare(
    handle: ModelHandle, query: str, context: str, settings: SMASettings | None
) -> tuple[SMASettings, str, str, Any]:
    """Validated settings (defaults if ``None``), the cleaned query and context, and the resolved template."""
    settings = settings or SMASettings()
    settings.validate()
    query, context, _ = clean_inputs(query, context)
    if not context:
        raise ValueError(
            "The context is empty: SMA compares attributions with and without it. Paste the retrieved passage."
        )
    return settings, query, context, resolve_template(settings.template, handle.tokenizer)


class _Progress:
    """Counts generations and reports ``on_progress(done, total, stage)``, ``done`` capped at ``total``."""

    def __init__(self, total: int, on_progress: Progress | None) -> None:
        self.total = total
        self.done = 0
        self.on_progress = on_progress

    def stage(self, name: str) -> Callable[[int], None]:
        """The per-batch callback of one stage: ``step(k)`` after ``k`` more generations."""

        def step(k: int) -> None:
            self.done += k
            if self.on_progress is not None:
                self.on_progress(min(self.done, self.total), self.total, name)

        return step


def _check_budget(handle: ModelHandle, ids: list[int], max_new_tokens: int, what: str) -> None:
    budget = handle.info.max_tokens
    needed = len(ids) + max_new_tokens
    if needed > budget:
        raise ValueError(
            f"Too long for this model: {what} is {len(ids):,} tokens and each answer may take {max_new_tokens} "
            f"more, {needed:,} in all, over the limit of {budget:,}. Shorten the input (nothing is cut automatically)."
        )


def _reference(
    handle: ModelHandle, template: Any, prompt: str, settings: SMASettings, answer_fn: AnswerFn | None = None
) -> tuple[str, int]:
    """(ŷ, Len(ŷ)): the greedy answer to the unperturbed prompt, generated alone."""
    ids = encode_prompt(template, handle.tokenizer, prompt)
    gen = DualPathSettings(max_new_tokens=settings.max_new_tokens, template=settings.template)
    return (answer_fn or partial(greedy_answers, handle))([ids], gen)[0]


def _attribute_run(
    handle: ModelHandle,
    template: Any,
    settings: SMASettings,
    *,
    rag: bool,
    query_units: list[str],
    context_units: list[str] | None,
    context: str,
    masks: np.ndarray | None,
    on_generation: Callable[[int], None] | None,
    answer_fn: AnswerFn | None = None,
) -> SMARun:
    """One run: perturb ``query_units`` (and ``context_units`` when given) with retrieval on or off."""
    t0 = time.perf_counter()
    units = list(query_units) + list(context_units or [])
    baselines = [baseline_of(u, settings.perturbation) for u in units]
    nq = len(query_units)

    def prompt_of(values: list[str]) -> str:
        q = "".join(values[:nq])
        if not rag:
            return build_prompt(template, handle.tokenizer, q, None)
        c = "".join(values[nq:]) if context_units is not None else context
        return build_prompt(template, handle.tokenizer, q, c)

    prompt = prompt_of(units)
    worst = prompt_of(baselines) if settings.perturbation == "unicode" else prompt
    _check_budget(
        handle,
        encode_prompt(template, handle.tokenizer, worst),
        settings.max_new_tokens,
        "the fully perturbed " + ("retrieval" if rag else "parametric") + " prompt",
    )
    answer, n_ref = _reference(handle, template, prompt, settings, answer_fn)
    if on_generation is not None:
        on_generation(1)
    scorer = ResponseScorer(handle, template, settings, units, baselines, answer, n_ref, on_generation, answer_fn)
    beta, intercept = run_captum(
        settings.method,
        units,
        baselines,
        prompt_of,
        scorer,
        n_samples=settings.n_samples,
        masks=masks,
        alpha=settings.alpha,
        fit_intercept=settings.fit_intercept,
        batch_size=settings.batch_size,
        seed=settings.seed,
        device=handle.device,
    )
    return SMARun(
        rag=rag,
        prompt=prompt,
        reference_answer=answer,
        reference_tokens=n_ref,
        unit_indices=list(range(len(units))),
        beta=beta,
        intercept=intercept,
        samples=scorer.samples,
        generations=scorer.generations,
        seconds=time.perf_counter() - t0,
    )


def _lime_masks(settings: SMASettings, nq: int, nc: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """LIME's masks of the RAG-on and RAG-off runs, ``(N, nq + nc)`` and ``(N, nq)`` (``None`` for other methods).

    The query part is shared by both runs (the same perturbed inputs, eqs. 17–18); a context part, if any, is
    drawn independently (the query part is never all zero, so Alg. 1's fix is not needed).
    """
    if settings.method != "lime":
        return None, None
    rng = np.random.default_rng(settings.seed)
    mq = draw_masks(settings.n_samples, nq, rng)
    if not nc:
        return mq, mq
    return np.concatenate([mq, rng.integers(0, 2, size=(settings.n_samples, nc), dtype=np.int64)], axis=1), mq


def run_sma(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: SMASettings | None = None,
    *,
    on_progress: Progress | None = None,
    answer_fn: AnswerFn | None = None,
) -> SMAResult:
    """SMA with retrieval on and off, and ADS per unit (see :mod:`core.methods.sma`).

    Args:
        handle: the shared model (each batch of generations runs through ``handle.generate``).
        query, context: user text; both must be non-empty.
        settings: :class:`SMASettings` (defaults if ``None``).
        on_progress: ``on_progress(done, total, stage)`` after every batch of generations; ``stage`` is
            ``"RAG on"`` or ``"RAG off"``.
        answer_fn: how each batch of prompt ids gets its greedy answers (default: generated through ``handle``;
            :mod:`core.scale.ray_sma` passes answers computed on Ray actors).

    Returns:
        :class:`SMAResult` with β_on, β_off and ADS over the units (query first, then context).

    Raises:
        ValueError: empty inputs, bad settings, or a prompt over the model's token budget.
    """
    settings, query, context, template = _prepare(handle, query, context, settings)
    query_units = split_units(query, settings.granularity, handle.tokenizer)
    context_units = (
        split_units(context, settings.granularity, handle.tokenizer) if settings.scope == "query+context" else None
    )
    nq, nc = len(query_units), len(context_units or [])
    masks_on, masks_off = _lime_masks(settings, nq, nc)
    total_on = 1 + settings.generations(nq + nc)
    progress = _Progress(total_on + 1 + settings.generations(nq), on_progress)
    t0 = time.perf_counter()
    on = _attribute_run(
        handle,
        template,
        settings,
        rag=True,
        query_units=query_units,
        context_units=context_units,
        context=context,
        masks=masks_on,
        on_generation=progress.stage("RAG on"),
        answer_fn=answer_fn,
    )
    progress.done = total_on
    off = _attribute_run(
        handle,
        template,
        settings,
        rag=False,
        query_units=query_units,
        context_units=None,
        context=context,
        masks=masks_off,
        on_generation=progress.stage("RAG off"),
        answer_fn=answer_fn,
    )
    if on_progress is not None:
        on_progress(progress.total, progress.total, "RAG off")
    units = [Unit(u, QUERY) for u in query_units] + [Unit(u, CONTEXT) for u in (context_units or [])]
    beta_on, beta_off = np.asarray(on.beta, dtype=np.float64), np.zeros(len(units), dtype=np.float64)
    beta_off[:nq] = off.beta
    return SMAResult(
        model=handle.info.name,
        query=query,
        context=context,
        template=template.key,
        settings=settings.to_dict(),
        units=units,
        beta_on=beta_on,
        beta_off=beta_off,
        ads=ads(beta_on, beta_off),
        on=on,
        off=off,
        timings={"on_s": on.seconds, "off_s": off.seconds, "total_s": time.perf_counter() - t0},
    )


def run_context_ablation(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: SMASettings | None = None,
    *,
    on_progress: Progress | None = None,
) -> ContextAblation:
    """The faster comparison: each context sentence removed in turn (retrieval on, query intact).

    Each answer is scored by its **agreement with the full-context answer ŷ**
    (:func:`core.methods.sma.maths.agreement_score`, always against ŷ whatever ``settings.reference``), so
    Δr = r(full) − r(without s) ≥ 0 says how far removing s moved the answer away from ŷ. Eq. 14's response
    score is not used here: its length term rewards a longer answer, so removing the one sentence that
    carries the answer could score *negative* (the longer wrong answer given without it outscoring ŷ).
    captum's ``FeatureAblation`` over sentence units with an empty baseline drives the generations. Costs
    S + 2 generations for S sentences (the unperturbed answer, the full input once more, each sentence
    removed).

    Raises:
        ValueError: empty inputs, bad settings, or a prompt over the model's token budget.
    """
    settings, query, context, template = _prepare(handle, query, context, settings)
    sentences = split_units(context, "sentence")
    ablation = SMASettings(
        **{**settings.to_dict(), "method": "ablation", "perturbation": "remove", "reference": "answer"}
    )
    step = _Progress(len(sentences) + 2, on_progress).stage("context ablation")
    t0 = time.perf_counter()
    prompt_full = build_prompt(template, handle.tokenizer, query, context)
    _check_budget(
        handle, encode_prompt(template, handle.tokenizer, prompt_full), settings.max_new_tokens, "the retrieval prompt"
    )
    answer, n_ref = _reference(handle, template, prompt_full, ablation)
    step(1)
    baselines = [""] * len(sentences)
    scorer = ResponseScorer(handle, template, ablation, sentences, baselines, answer, n_ref, step)

    def prompt_of(values: list[str]) -> str:
        return build_prompt(template, handle.tokenizer, query, "".join(values).strip())

    run_captum(
        "ablation",
        sentences,
        baselines,
        prompt_of,
        scorer,
        n_samples=1,
        alpha=ablation.alpha,
        batch_size=ablation.batch_size,
        seed=ablation.seed,
        device=handle.device,
    )
    by_mask = {s.mask: s for s in scorer.samples}
    full = by_mask["1" * len(sentences)]
    rows = [by_mask["".join("0" if j == i else "1" for j in range(len(sentences)))] for i in range(len(sentences))]

    def agree(sample: Any) -> float:
        return agreement_score(sample.length_ratio, sample.similarity, ablation.gamma_length, ablation.gamma_similarity)

    full_score = agree(full)
    scores = np.array([agree(r) for r in rows], dtype=np.float64)
    return ContextAblation(
        model=handle.info.name,
        query=query,
        context=context,
        settings=ablation.to_dict(),
        reference_answer=answer,
        sentences=sentences,
        full_score=full_score,
        scores=scores,
        delta=full_score - scores,
        answers=[r.answer for r in rows],
        similarities=np.array([r.similarity for r in rows]),
        length_ratios=np.array([r.length_ratio for r in rows]),
        seconds=time.perf_counter() - t0,
    )
