"""The label-free choice of copying heads: Elhage et al.'s (2021) OV-circuit copying score, for any model.

A head's OV circuit maps a token to logits: ``M = W_U W_O^h W_V^h W_E`` (column convention, ``V × V``). Its
non-zero eigenvalues are those of the ``d_head × d_head`` matrix ``W_V^h (W_E W_U) W_O^h`` (``eig(AB) = eig(BA)``
with ``A = W_U W_O^h``, ``B = W_V^h W_E``), so ``G = W_E W_U`` (``d × d``) is formed once over the vocabulary and
each head costs one small eigen-decomposition. The score is :func:`core.methods.redeep.maths.copying_score`
(``Σλ / Σ|λ|``): near 1, the head copies the tokens it attends to into the output.

Conventions: ``W_E`` is the input embedding and ``W_U`` the output projection (the same matrix for tied
embeddings); with grouped-/multi-query attention head ``h`` reads key/value head ``h // (H / H_kv)``; norms,
biases and positional terms are left out, as in Elhage et al. Supported layouts: separate ``v_proj`` /
``o_proj`` / ``out_proj`` / ``dense`` (Llama, Mistral, Qwen, Gemma, OLMo, Granite, Cohere, StableLM, StarCoder2,
SmolLM, GPT-J, OPT, Phi …) and GPT-2's
fused ``c_attn`` / ``c_proj``; other fused layouts are refused with the reason.
"""

from __future__ import annotations

import numpy as np
import torch

from core.maths.divergence import row_slices
from core.methods.redeep.maths import copying_score
from core.model.handle import ModelHandle
from core.model.parts import model_parts

OUTPUTS = ("o_proj", "out_proj", "dense")
OV_CHUNK_BYTES = 256 << 20
"""The most bytes of the float64 rows of ``W_E`` (and of ``W_U``) :func:`embed_unembed` converts at once (the embedded
model's 49,152 × 576, 226 MB, in one slice; Gemma 3's 262,144 × 640 in six)."""
"""Names of an attention module's output projection next to a separate ``v_proj``."""


def _weight(module: torch.nn.Module) -> torch.Tensor:
    return module.weight.detach().double().cpu()


def head_value_output(handle: ModelHandle, layer: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each query head's ``W_V^h`` ``(d_head, d)`` and ``W_O^h`` ``(d, d_head)`` at one layer (float64, CPU).

    Raises:
        ValueError: an attention layout with no separate value/output projection this function knows.
    """
    parts = model_parts(handle)
    attn = parts.attentions[layer]
    H, d = handle.info.n_heads, handle.info.hidden_size
    out_proj = next((getattr(attn, n) for n in OUTPUTS if isinstance(getattr(attn, n, None), torch.nn.Linear)), None)
    if isinstance(getattr(attn, "v_proj", None), torch.nn.Linear) and out_proj is not None:
        wv, wo = _weight(attn.v_proj), _weight(out_proj)  # (H_kv·dh, d), (d, H·dh)
    elif hasattr(attn, "c_attn") and hasattr(attn, "c_proj") and not hasattr(attn, "q_attn"):
        w = _weight(attn.c_attn)  # GPT-2 Conv1D: (d, 3d), x @ w
        if w.shape != (d, 3 * d):
            raise ValueError(
                f"The OV copying score needs separate value and output projections; layer {layer}'s fused c_attn "
                f"has shape {tuple(w.shape)} (multi-query), a layout this project does not split."
            )
        wv, wo = w[:, 2 * d :].T, _weight(attn.c_proj).T  # (d, d) each, as nn.Linear weights
    else:
        names = ", ".join(n for n, _ in attn.named_children())
        raise ValueError(
            f"The OV copying score needs separate value and output projections; this attention module has "
            f"{names or 'no sub-modules'} (a fused layout this project does not split)."
        )
    dh = wo.shape[1] // H
    n_kv = wv.shape[0] // dh
    if dh * H != wo.shape[1] or n_kv * dh != wv.shape[0] or n_kv < 1 or H % n_kv:
        raise ValueError(f"layer {layer}: value/output shapes {tuple(wv.shape)} / {tuple(wo.shape)} do not split")
    group = H // n_kv
    values = [wv[(h // group) * dh : (h // group + 1) * dh] for h in range(H)]
    outputs = [wo[:, h * dh : (h + 1) * dh] for h in range(H)]
    return values, outputs


def embed_unembed(handle: ModelHandle, vocab: np.ndarray | None = None) -> torch.Tensor:
    """``G = W_E W_U = Eᵀ U`` ``(d, d)`` float64 over the whole vocabulary, or over the token ids ``vocab``.

    A vocabulary whose float64 copy of ``E`` would exceed :data:`OV_CHUNK_BYTES` (Gemma 3's 262,144 × 640: 1.3 GB,
    twice with ``U``) is summed in slices of rows, ``G = Σ_s E_sᵀ U_s``: the same matrix up to float64 summation
    order, without a whole float64 copy of either matrix (the embedded model's fits in one slice).
    """
    E = handle.model.get_input_embeddings().weight.detach()
    U = model_parts(handle).unembed.weight.detach()
    if vocab is not None:
        ids = torch.as_tensor(np.asarray(vocab), dtype=torch.long, device=E.device)
        E, U = E[ids], U[ids]
    slices = list(row_slices(E.shape[0], E.shape[1], itemsize=8, budget=OV_CHUNK_BYTES))
    if len(slices) <= 1:
        return (E.double().T @ U.double()).cpu()
    G = torch.zeros((E.shape[1], U.shape[1]), dtype=torch.float64, device=E.device)
    for rows in slices:
        G += E[rows].double().T @ U[rows].double()
    return G.cpu()


def ov_eigenvalues(handle: ModelHandle, vocab: np.ndarray | None = None) -> list[list[np.ndarray]]:
    """The eigenvalues of every head's ``W_V^h G W_O^h`` (``[layer][head]``: ``(d_head,)`` complex128)."""
    G = embed_unembed(handle, vocab)
    out = []
    for layer in range(model_parts(handle).n_layers):
        values, outputs = head_value_output(handle, layer)
        out.append([np.linalg.eigvals((wv @ G @ wo).numpy()) for wv, wo in zip(values, outputs)])
    return out


def ov_copying_scores(handle: ModelHandle, vocab: np.ndarray | None = None) -> np.ndarray:
    """Every head's OV copying score ``(n_layers, n_heads)`` float64 (Elhage et al. 2021)."""
    return np.array([[copying_score(lam) for lam in row] for row in ov_eigenvalues(handle, vocab)])
