"""Batched dual-path scoring: many (query, context) rows through the same protocol as :func:`run_dual_path`.

For a batch of B rows the cost is **one** batched greedy ``generate(output_logits=True)`` over the B
left-padded retrieval prompts and **one** batched teacher-forced forward over the B left-padded rows
``parametric prompt + answer[:-1]`` — instead of B generations and B forwards. Each row's
:class:`~core.result.DualPathResult` is built by the same code as the unbatched engine
(:func:`core.engine.score_paths` and :func:`core.engine.build_result`), so

    score_batch(handle, rows, s)[i]  ≈  run_dual_path(handle, *rows[i], s, free_parametric=False)

up to float tolerance (padding changes the order of floating-point reductions, ~1e-6 relative on CPU fp32).

Padding is built by hand (the tokenizer is never touched):

* generation: ``core.engine.generate_greedy`` left-pads and passes the attention mask; ``generate`` derives
  ``position_ids = cumsum(mask) − 1`` from it (transformers 5 ``_prepare_position_ids_for_generation``);
* teacher forcing: a plain ``model(...)`` call in transformers 5 does **not** derive position ids from the
  attention mask (``LlamaModel.forward`` falls back to ``arange``), so they are passed explicitly as
  ``cumsum(mask) − 1`` (0 on pad positions), which gives every row the positions it has when run alone.

Caveat (documented in docs/readme/6.md): greedy decoding takes an argmax; when the two best candidates of a
step are within float noise of each other, the ~1e-6 differences that padding introduces can pick the other
token, and that row's answer (and therefore its Z) then differs from the unbatched run from that step on.
This is rare on real models and is not an error of either computation; per-step distributions given the same
tokens agree to float tolerance (tested).

Robustness (RePCS §V, Table IV) needs both paths' full logits, which exist only while a batch is being
scored, so the noisy scores Z_σ for the requested σ are computed here (see :mod:`core.robustness`) and
stored in ``result.extras["noisy_repcs"]``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import torch

from core.engine.dual_path import DualPathSettings, build_result, generate_greedy, prepare_prompts, score_paths
from core.model.loading import ModelHandle
from core.methods.repcs import Threshold, threshold_for
from core.engine.result import DualPathResult
from core.evaluation.robustness import noisy_repcs_scores, row_seed

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 8
MAX_BATCH_TOKENS = 16384
"""Most padded prompt+answer tokens per batch (batch rows × widest row); longer rows get smaller batches."""


def _left_pad(rows: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad token rows into ``(input_ids, attention_mask, position_ids)``, each ``(B, W)`` long.

    ``position_ids`` are ``cumsum(mask) − 1`` and 0 on pad positions, so a row's real tokens get positions
    ``0 … len − 1`` whatever the padding.
    """
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return ids, mask, positions


def teacher_forced_logits_batch(
    handle: ModelHandle, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]]
) -> list[torch.Tensor]:
    """Batched :func:`core.engine.teacher_forced_logits`: one left-padded forward over ``prompt + answer[:-1]``.

    Args:
        prompts: B prompt id lists (each non-empty).
        answers: B answer id lists (each non-empty).

    Returns:
        B tensors; tensor ``i`` has shape ``(len(answers[i]), V)`` and row t is the distribution over
        ``answers[i][t]`` given ``prompts[i] + answers[i][:t]``. Left padding aligns every row's end, so the
        last ``len(answers[i])`` positions of row ``i`` are its answer predictions; only the last
        ``max len(answer)`` positions are materialised (``logits_to_keep``).
    """
    if len(prompts) != len(answers) or not prompts:
        raise ValueError(f"need as many prompts as answers (got {len(prompts)} and {len(answers)})")
    if any(len(p) == 0 for p in prompts) or any(len(a) == 0 for a in answers):
        raise ValueError("every prompt and every answer needs at least one token")
    rows = [list(p) + list(a[:-1]) for p, a in zip(prompts, answers)]
    ids, mask, positions = _left_pad(rows, handle.pad_token_id)
    keep = max(len(a) for a in answers)
    device = handle.device
    kwargs = {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": positions.to(device),
        "use_cache": False,
    }
    with handle.lock, torch.inference_mode():
        try:
            logits = handle.model(**kwargs, logits_to_keep=keep).logits
        except TypeError:  # a model class without logits_to_keep
            logits = handle.model(**kwargs).logits
    return [logits[i, logits.shape[1] - len(a) :] for i, a in enumerate(answers)]


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
        items: ``(query, context)`` pairs, validated like :func:`core.engine.prepare_prompts` (a bad row raises
            ``ValueError`` before any model call).
        free_parametric: also generate each row's parametric answer (its prompts join the same batched
            ``generate``); scoring never needs it, display and the conflict set do.
        noise_sigmas: σ values for the RePCS Table IV robustness scores Z_σ (see :mod:`core.robustness`); the
            noise of a row depends only on ``noise_seed`` and the row's text, not on the batch.

    Returns:
        One :class:`DualPathResult` per item, in order. ``timings`` hold the batch's times divided by its size
        (``batch_size`` says how many rows shared them).
    """
    settings = settings or DualPathSettings()
    if not items:
        return []
    prepared = [prepare_prompts(handle, q, c, settings) for q, c in items]
    if threshold is None:
        threshold, default_source = threshold_for(handle.info.name)
        threshold_source = threshold_source or default_source
    b = len(prepared)
    t0 = time.perf_counter()
    with handle.lock:
        prompts = [p.retrieval.ids for p in prepared]
        if free_parametric:
            prompts += [p.parametric.ids for p in prepared]
        generated = generate_greedy(handle, prompts, settings)
        rag = generated[:b]
        para = generated[b:] if free_parametric else [([], None, "not generated")] * b
        t1 = time.perf_counter()
        para_logits = teacher_forced_logits_batch(handle, [p.parametric.ids for p in prepared], [r[0] for r in rag])
    results = []
    for i, p in enumerate(prepared):
        rag_ids, rag_logits, rag_finish = rag[i]
        scores = score_paths(rag_logits, para_logits[i], rag_ids, settings.top_k)
        extras: dict = {}
        if noise_sigmas:
            seed = row_seed(noise_seed, p.query, p.context)
            extras["noisy_repcs"] = {
                "sigma": [float(s) for s in noise_sigmas],
                "z": noisy_repcs_scores(rag_logits, para_logits[i], settings.score_window, noise_sigmas, seed),
                "seed": seed,
                "space": "logits",
            }
        results.append((i, p, rag_ids, rag_finish, scores, extras))
    t3 = time.perf_counter()
    del rag, para_logits
    timings = {
        "generate_s": (t1 - t0) / b,
        "score_s": (t3 - t1) / b,
        "total_s": (t3 - t0) / b,
        "batch_size": float(b),
    }
    out = []
    for i, p, rag_ids, rag_finish, scores, extras in results:
        para_ids, _, para_finish = para[i]
        res = build_result(
            handle, p, settings, rag_ids, rag_finish, list(para_ids), para_finish, scores, threshold,
            threshold_source, dict(timings),
        )
        res.extras.update(extras)
        out.append(res)
    return out


def plan_batches(lengths: Sequence[int], batch_size: int, max_new_tokens: int, max_batch_tokens: int = MAX_BATCH_TOKENS) -> list[list[int]]:
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
    if threshold is None:
        threshold, default_source = threshold_for(handle.info.name)
        threshold_source = threshold_source or default_source
    out: list[DualPathResult | None] = [None] * len(items)
    done = 0
    for batch in plan_batches([len(p.retrieval.ids) for p in prepared], batch_size, settings.max_new_tokens):
        if should_stop is not None and should_stop():
            break
        results = score_batch(
            handle, [items[i] for i in batch], settings, threshold=threshold, threshold_source=threshold_source,
            free_parametric=free_parametric, noise_sigmas=noise_sigmas, noise_seed=noise_seed,
        )
        for i, res in zip(batch, results):
            out[i] = res
        done += len(batch)
        if progress is not None:
            progress(done, len(items))
    return out
