"""Replaying a result's two paths with the loaded model: its prompts, forward sequences and CRM displacement, and
the one prompt-pair trace (:func:`trace_prompts`: both prompts of many rows, the residual stream at their last token)
that CRM's calibration, a run's displacement and the audit service share.

Positions follow the engine's convention: answer position ``t`` is the step that predicts answer token ``t``,
i.e. the query row ``prompt_len − 1 + t`` of the sequence ``prompt + answer[:-1]``. Position 0 is therefore
the last prompt token — where CRM measures its displacement d_ℓ = h_ℓ(context) − h_ℓ(no context)
(CRM §2, eq. 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from core.engine.prepare import PreparedPrompts, prepare_prompts
from core.engine.result import PARAMETRIC, PATHS, RETRIEVAL, DualPathResult
from core.model.handle import ModelHandle
from core.model.trace import Trace, trace
from core.model.trace import displacement as trace_displacement


def prepared_for(handle: ModelHandle, result: DualPathResult) -> PreparedPrompts:
    """Rebuild both prompts of a result with the engine (same template and settings) and check them.

    Raises:
        ValueError: the prompts do not tokenize to the result's lengths (another model or tokenizer).
    """
    settings = result.run_settings
    prepared = prepare_prompts(handle, result.query, result.context, settings)
    n_retrieval, n_parametric = len(prepared.retrieval.ids), len(prepared.parametric.ids)
    if n_retrieval != result.retrieval.prompt_len or n_parametric != result.parametric.prompt_len:
        raise ValueError(
            "This result's prompts do not tokenize to the same lengths with the loaded model "
            f"({n_retrieval}/{n_parametric} vs {result.retrieval.prompt_len}/"
            f"{result.parametric.prompt_len} tokens): it was produced by another model or tokenizer."
        )
    return prepared


def path_sequence(handle: ModelHandle, result: DualPathResult, path: str) -> tuple[list[int], list[str], int]:
    """The token ids one path's instrumented forward runs on (prompt + answer[:-1]), their tokens, and the
    prompt length."""
    if path not in PATHS:
        raise ValueError(f"path must be {RETRIEVAL!r} or {PARAMETRIC!r}, got {path!r}")
    prepared = prepared_for(handle, result)
    prompt = prepared.retrieval.ids if path == RETRIEVAL else prepared.parametric.ids
    ids = list(prompt) + [int(i) for i in result.answer_token_ids[:-1]]
    return ids, handle.decode_tokens(ids), len(prompt)


def trace_prompts(
    handle: ModelHandle,
    prepared: Sequence[PreparedPrompts],
    *,
    logits: int = 0,
    tracer: Callable[[list[list[int]]], Trace] | None = None,
) -> tuple[Trace, Trace]:
    """The prompt-pair trace: both prompts of every row, the retrieval prompts in one left-padded
    :func:`~core.model.trace.trace` and the parametric prompts in another, in one model session (no other run
    interleaves), through whatever hooks are installed.

    Each trace keeps the residual stream at the last prompt token (CRM's h_ℓ^c and h_ℓ^0, the rows of
    :func:`pair_displacement`) and, with ``logits``, the last ``logits`` positions' logits (the first answer
    token's distribution for ``logits=1``). CRM's calibration, a stored run's displacement and the audit service
    all trace their pairs here.

    Args:
        tracer: runs one of the two traces itself (``tracer(sequences) -> Trace``; the audit's, which holds the
            model for each forward on its own and times it); then no shared session is taken here.

    Returns:
        ``(with the context, without it)``, B sequences each.
    """
    with_ids = [list(p.retrieval.ids) for p in prepared]
    without_ids = [list(p.parametric.ids) for p in prepared]
    if tracer is not None:
        return tracer(with_ids), tracer(without_ids)
    with handle.session():
        with_context = trace(handle, with_ids, logits=logits)
        without = trace(handle, without_ids, logits=logits)
    return with_context, without


def pair_displacement(with_context: Trace, without: Trace) -> np.ndarray:
    """CRM's displacement of every row of a prompt-pair trace (:func:`trace_prompts`): ``d_ℓ = h_ℓ^c − h_ℓ^0`` at the
    last prompt token, float32 ``(B, n_layers + 1, d)``, the difference taken in float64."""
    return trace_displacement(with_context, without)


def displacement(
    handle: ModelHandle,
    result: DualPathResult,
    retrieval_state: np.ndarray | None = None,
    parametric_state: np.ndarray | None = None,
) -> np.ndarray:
    """CRM's displacement at the last prompt token, every layer (CRM §2, eq. 1's ``h_ℓ^c − h_ℓ^0``).

    ``d_ℓ = h_ℓ(retrieval prompt)[last] − h_ℓ(parametric prompt)[last]``, the prompts rebuilt with
    :func:`core.engine.prepare.prepare_prompts` from the result's query, context and settings. Both forward
    passes run in one model session, through whatever hooks are installed (inside an intervention it gives
    the perturbed d_ℓ).

    Args:
        retrieval_state: ``h_ℓ^c``, ``(n_layers + 1, hidden)``, when a shared pass over the retrieval path has it
            (the residual stream at the last prompt token of prompt + answer, which a causal model computes
            exactly as over the prompt alone): then only the parametric prompt is run.
        parametric_state: ``h_ℓ^0`` likewise, from the run's teacher-forced scoring pass over the parametric prompt
            + answer (:attr:`~core.engine.result.RunInternals.parametric_state`): with both, no model call.

    Returns:
        float32 array ``(n_layers + 1, hidden)``, the difference taken in float64; row 0 is the embedding layer
        (zero whenever both prompts end in the same token, as the templates do).
    """
    prepared = prepared_for(handle, result)
    if retrieval_state is not None:
        if parametric_state is None:
            parametric_state = trace(handle, [prepared.parametric.ids]).residual[0][:, 0].numpy()
        h_0 = np.asarray(parametric_state, dtype=np.float64)
        return (np.asarray(retrieval_state, dtype=np.float64) - h_0).astype(np.float32)
    return pair_displacement(*trace_prompts(handle, [prepared]))[0]
