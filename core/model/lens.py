"""The logit lens: read a hidden state through the final norm and the unembedding.

``p_ℓ = softmax(W_U · norm(h_ℓ))`` (nostalgebraist 2020; CRM appendix F's logit-lens baseline; RADAR's
per-layer confidence and entropy), followed by whatever the family does to its logits after the unembedding
(a scale — Cohere, Granite — and Gemma 2/3's final soft-capping), so that the lens of the last layer's output is
the model's own next-token distribution. Log-probabilities are float32 whatever the model's dtype.

**Large vocabularies.** The lens of ``N`` states is an ``N × V`` tensor (1 MiB a row for Gemma 3's 262,144 tokens);
:func:`lens_log_probs_chunks` yields it in slices of rows of at most :data:`LENS_CHUNK_BYTES`, so a caller that
reduces each row (a KL, an entropy, a top-k, one token's log-probability) never holds the whole of it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from core.maths.divergence import log_probs, row_slices, rows_per_chunk
from core.model.handle import ModelHandle
from core.model.parts import ModelParts, model_parts

LENS_CHUNK_BYTES = 16 << 20
"""The most bytes of float32 log-probabilities one slice of :func:`lens_log_probs_chunks` holds (16 MiB: 85 rows of
the embedded model's vocabulary, 16 of Gemma 3's)."""


def lens_logits(parts: ModelParts, hidden: torch.Tensor) -> torch.Tensor:
    """``W_U · norm(h)`` for states of shape ``(..., d)`` (call inside a model session); shape ``(..., V)``.

    The family's logit scale and final soft-capping (:class:`~core.model.parts.ModelParts`) are applied as the
    model applies them, so ``lens_logits(parts, h_L)`` equals the model's logits for the last layer's output.
    """
    logits = parts.unembed(parts.final_norm(hidden))
    if parts.logit_scale != 1.0:
        logits = logits * parts.logit_scale
    if parts.logit_softcap is not None:
        logits = torch.tanh(logits / parts.logit_softcap) * parts.logit_softcap
    return logits


def lens_log_probs(handle: ModelHandle, states: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Logit-lens log-probabilities ``log softmax(W_U · norm(h))`` for states of shape ``(..., d)``.

    Returns:
        float32 tensor ``(..., V)`` on the model's device.

    Raises:
        ValueError: states whose last dimension is not the model's hidden size.
    """
    parts = model_parts(handle)
    param = next(handle.model.parameters())
    h = torch.as_tensor(np.asarray(states) if not isinstance(states, torch.Tensor) else states, device=param.device)
    h = h.to(param.dtype)
    if h.shape[-1] != handle.info.hidden_size:
        raise ValueError(f"states must end in the hidden size {handle.info.hidden_size}, got shape {tuple(h.shape)}")
    with handle.session():
        return log_probs(lens_logits(parts, h))


def lens_rows_per_chunk(handle: ModelHandle, budget: int | None = None) -> int:
    """How many states one slice of :func:`lens_log_probs_chunks` reads through the lens (``budget`` bytes, default
    :data:`LENS_CHUNK_BYTES`; at least 1)."""
    return rows_per_chunk(handle.info.vocab_size, budget=LENS_CHUNK_BYTES if budget is None else budget)


def lens_log_probs_chunks(
    handle: ModelHandle, states: np.ndarray | torch.Tensor, *, budget: int | None = None
) -> Iterator[tuple[slice, torch.Tensor]]:
    """:func:`lens_log_probs` of states ``(N, d)`` in slices of rows: yields ``(rows, log-probabilities)``, the
    second of shape ``(len(rows), V)`` float32, each slice at most ``budget`` bytes. Each slice takes the model's
    session; wrap the loop in ``with handle.session():`` to hold it across slices.

    Raises:
        ValueError: states that are not 2-D or do not end in the model's hidden size.
    """
    shape = tuple(states.shape)
    if len(shape) != 2:
        raise ValueError(f"states must be (N, d), got shape {shape}")
    for rows in row_slices(shape[0], handle.info.vocab_size, budget=LENS_CHUNK_BYTES if budget is None else budget):
        yield rows, lens_log_probs(handle, states[rows])
