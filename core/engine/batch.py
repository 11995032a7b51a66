"""Batched dual-path scoring: many (query, context) rows through the same protocol as :func:`run_dual_path`.

For a batch of B rows the cost is **one** batched greedy ``generate(output_logits=True)`` over the B
left-padded retrieval prompts and **one** batched teacher-forced forward over the B left-padded rows
``parametric prompt + answer[:-1]`` (:mod:`core.engine.generation`) — instead of B generations and B forwards.
Each row's :class:`~core.engine.result.DualPathResult` is built by the same code as the unbatched engine
(:func:`core.engine.scoring.score_paths` and :func:`core.engine.scoring.build_result`), so

    score_batch(handle, rows, s)[i]  ≈  run_dual_path(handle, *rows[i], s, free_parametric=False)

up to float tolerance (padding changes the order of floating-point reductions, ~1e-6 relative on CPU fp32).

Caveat: greedy decoding takes an argmax; when the two best candidates of a step are within float noise of each
other, the ~1e-6 differences that padding introduces can pick the other token, and that row's answer (and
therefore its Z) then differs from the unbatched run from that step on. This is rare on real models and is
not an error of either computation; per-step distributions given the same tokens agree to float tolerance
(tested).

Robustness (RePCS §V, Table IV) needs both paths' full logits, which exist only while a batch is being
scored, so the noisy scores Z_σ for the requested σ are computed here (see :mod:`core.maths.noise`)
and stored in ``result.extras["noisy_repcs"]``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from core.engine.generation import generate_greedy, teacher_forced_logits_batch
from core.engine.prepare import prepare_prompts
from core.engine.result import DualPathResult
from core.engine.scoring import NOT_GENERATED, Answer, build_result, resolve_threshold, score_paths
from core.engine.settings import DualPathSettings
from core.maths.noise import noisy_repcs_scores, row_seed
from core.methods.repcs import Threshold
from core.model.handle import ModelHandle

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 8
MAX_BATCH_TOKENS = 16384
"""Most padded prompt+answer tokens per batch (batch rows × widest row); longer rows get smaller batches."""


def score_batch(
    handle: ModelHandle,
    items: Sequence[tuple[str, str]],
    settings: DualPathSettings | None = None,
    *,
    threshold: Threshold | None = None,
    threshold_source: str | None = None,
    free_parametric: bool = False,
    noise_sigmas: Sequence[float] = (),
    noise_seed: int = 0,
) -> list[DualPathResult]:
    """Score one batch of (query, context) rows: one batched generate + one batched teacher-forced forward.

    Args:
        items: ``(query, context)`` pairs, validated like :func:`core.engine.prepare.prepare_prompts` (a bad row raises
            ``ValueError`` before any model call).
        free_parametric: also generate each row's parametric answer (its prompts join the same batched
            ``generate``); scoring never needs it, display and the conflict set do.
        noise_sigmas: σ values for the RePCS Table IV robustness scores Z_σ (see :mod:`core.maths.noise`); the
            noise of a row depends only on ``noise_seed`` and the row's text, not on the batch.

    Returns:
        One :class:`DualPathResult` per item, in order. ``timings`` hold the batch's times divided by its size
        (``batch_size`` says how many rows shared them).
    """
    settings = settings or DualPathSettings()
    if not items:
        return []
    prepared = [prepare_prompts(handle, q, c, settings) for q, c in items]
    threshold, threshold_source = resolve_threshold(handle, threshold, threshold_source)
    b = len(prepared)
    t0 = time.perf_counter()
    with handle.session():  # the batch's generate and forward in one hold of the model
        prompts = [p.retrieval.ids for p in prepared]
        if free_parametric:
            prompts += [p.parametric.ids for p in prepared]
        generated = generate_greedy(handle, prompts, settings)
        retrieval = generated[:b]
        parametric = generated[b:] if free_parametric else [([], None, NOT_GENERATED.finish)] * b
        t1 = time.perf_counter()
        parametric_logits = teacher_forced_logits_batch(
            handle, [p.parametric.ids for p in prepared], [r[0] for r in retrieval]
        )
    scored = []
    for i, p in enumerate(prepared):
        retrieval_ids, retrieval_logits, retrieval_finish = retrieval[i]
        scores = score_paths(retrieval_logits, parametric_logits[i], retrieval_ids, settings.top_k)
        extras: dict[str, Any] = {}
        if noise_sigmas:
            seed = row_seed(noise_seed, p.query, p.context)
            extras["noisy_repcs"] = {
                "sigma": [float(s) for s in noise_sigmas],
                "z": noisy_repcs_scores(
                    retrieval_logits, parametric_logits[i], settings.score_window, noise_sigmas, seed
                ),
                "seed": seed,
                "space": "logits",
            }
        scored.append((retrieval_ids, retrieval_finish, scores, extras))
    t3 = time.perf_counter()
    del retrieval, parametric_logits
    timings = {
        "generate_s": (t1 - t0) / b,
        "score_s": (t3 - t1) / b,
        "total_s": (t3 - t0) / b,
        "batch_size": float(b),
    }
    out = []
    for p, (retrieval_ids, retrieval_finish, scores, extras), (parametric_ids, _, parametric_finish) in zip(
        prepared, scored, parametric
    ):
        res = build_result(
            handle,
            p,
            settings,
            scores,
            retrieval=Answer(retrieval_ids, retrieval_finish),
            parametric=Answer(list(parametric_ids), parametric_finish),
            threshold=threshold,
            threshold_source=threshold_source,
            timings=dict(timings),
        )
        res.extras.update(extras)
        out.append(res)
    return out


def plan_batches(
    lengths: Sequence[int], batch_size: int, max_new_tokens: int, max_batch_tokens: int = MAX_BATCH_TOKENS
) -> list[list[int]]:
    """Group row indices into batches of similar prompt length (less padding), at most ``batch_size`` rows and
    at most ``max_batch_tokens`` padded tokens each. Rows are taken in order of length; every index appears
    exactly once."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = max([lengths[j] for j in current] + [lengths[i]]) + max_new_tokens
        if current and (len(current) >= batch_size or (len(current) + 1) * width > max_batch_tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def score_rows(
    handle: ModelHandle,
    items: Sequence[tuple[str, str]],
    settings: DualPathSettings | None = None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    threshold: Threshold | None = None,
    threshold_source: str | None = None,
    free_parametric: bool = False,
    noise_sigmas: Sequence[float] = (),
    noise_seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[DualPathResult | None]:
    """Score many rows in length-sorted batches (see :func:`plan_batches`); results come back in input order.

    Every row is validated before the first batch runs. ``progress(done, total)`` is called after each batch;
    when ``should_stop()`` turns true the remaining rows are skipped and come back as ``None``.
    """
    settings = settings or DualPathSettings()
    prepared = [prepare_prompts(handle, q, c, settings) for q, c in items]
    threshold, threshold_source = resolve_threshold(handle, threshold, threshold_source)
    out: list[DualPathResult | None] = [None] * len(items)
    done = 0
    for batch in plan_batches([len(p.retrieval.ids) for p in prepared], batch_size, settings.max_new_tokens):
        if should_stop is not None and should_stop():
            break
        results = score_batch(
            handle,
            [items[i] for i in batch],
            settings,
            threshold=threshold,
            threshold_source=threshold_source,
            free_parametric=free_parametric,
            noise_sigmas=noise_sigmas,
            noise_seed=noise_seed,
        )
        for i, res in zip(batch, results):
            out[i] = res
        done += len(batch)
        if progress is not None:
            progress(done, len(items))
    return out
