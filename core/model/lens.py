"""The logit lens: read a hidden state through the final norm and the unembedding.

``p_ℓ = softmax(W_U · norm(h_ℓ))`` (nostalgebraist 2020; CRM appendix F's logit-lens baseline; RADAR's
per-layer confidence and entropy), followed by whatever the family does to its logits after the unembedding
(a scale — Cohere, Granite — and Gemma 2/3's final soft-capping), so that the lens of the last layer's output is
the model's own next-token distribution. Log-probabilities are float32 whatever the model's dtype.
"""

from __future__ import annotations

import numpy as np
import torch

from core.maths.divergence import log_probs
from core.model.handle import ModelHandle
from core.model.parts import ModelParts, model_parts


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
