"""Vocabulary back-projection of hidden-state directions through the unembedding (CRM appendix U.2).

``scores_ℓ = W_U v_ℓ`` over the vocabulary; since the sign of PC1 is arbitrary both ends are returned. Early
layers are not in the unembedding's basis, so their lists are suggestive, not a decoding.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from core.maths.divergence import CHUNK_BYTES, row_slices
from core.model.handle import ModelHandle
from core.model.parts import model_parts


def back_projection(
    unembed: np.ndarray | torch.Tensor, directions: np.ndarray, k: int = 10, *, budget: int | None = None
) -> dict[str, np.ndarray]:
    """The ``k`` highest- and lowest-scoring tokens of ``W_U v_ℓ`` for every direction (pure).

    Args:
        unembed: ``W_U`` of shape ``(V, d)``, any float dtype (scored in float32).
        directions: ``(L1, d)``.
        k: tokens per end.
        budget: the most bytes of ``(L1, V)`` float32 scores held at once (default
            :data:`core.maths.divergence.CHUNK_BYTES`): above it (or for a half-precision
            ``W_U``, which would otherwise be copied whole to float32) the vocabulary is scored in slices of rows of
            ``W_U``, keeping each slice's ``k`` ends and then the best ``k`` of those (the same tokens and scores).

    Returns:
        ``top_ids``/``bottom_ids`` ``(L1, k)`` int64 (highest / lowest score first), ``top_scores``/
        ``bottom_scores`` ``(L1, k)`` float32, and ``defined`` ``(L1,)`` bool: the direction is not zero (a zero
        direction scores every token 0, so its lists say nothing).

    Raises:
        ValueError: shapes that do not share the hidden size, or ``k`` outside ``[1, V]``.
    """
    w = torch.as_tensor(unembed).detach()
    v = torch.as_tensor(np.asarray(directions, dtype=np.float32))
    if w.ndim != 2 or v.ndim != 2 or w.shape[1] != v.shape[1]:
        raise ValueError(f"unembedding {tuple(w.shape)} and directions {tuple(v.shape)} do not share the hidden size")
    if not 1 <= k <= w.shape[0]:
        raise ValueError(f"k must be in [1, {w.shape[0]}], got {k}")
    budget = CHUNK_BYTES if budget is None else budget
    with torch.inference_mode():
        if w.dtype == torch.float32 and v.shape[0] * w.shape[0] * 4 <= budget:
            scores = v.to(w.device) @ w.T  # (L1, V)
            top = torch.topk(scores, k, dim=-1)
            bottom = torch.topk(-scores, k, dim=-1)
        else:
            top, bottom = _chunked_ends(w, v.to(w.device), k, budget)
    return {
        "top_ids": top.indices.cpu().numpy().astype(np.int64),
        "top_scores": top.values.cpu().numpy().astype(np.float32),
        "bottom_ids": bottom.indices.cpu().numpy().astype(np.int64),
        "bottom_scores": (-bottom.values).cpu().numpy().astype(np.float32),
        "defined": np.linalg.norm(np.asarray(directions, dtype=np.float64), axis=1) > 0,
    }


def _chunked_ends(w: torch.Tensor, v: torch.Tensor, k: int, budget: int) -> tuple[Any, Any]:
    """``torch.topk`` of ``v @ W_U^T`` and of its negative over the vocabulary, scored slice by slice of ``W_U``."""
    ends: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {"top": [], "bottom": []}
    for rows in row_slices(w.shape[0], v.shape[0], budget=budget):
        scores = v @ w[rows].float().T  # (L1, rows)
        m = min(k, scores.shape[1])
        for end, values in (("top", scores), ("bottom", -scores)):
            best = torch.topk(values, m, dim=-1)
            ends[end].append((best.values, best.indices + rows.start))
    out = []
    for end in ("top", "bottom"):
        values = torch.cat([val for val, _ in ends[end]], dim=-1)
        ids = torch.cat([idx for _, idx in ends[end]], dim=-1)
        best = torch.topk(values, k, dim=-1)
        out.append(torch.return_types.topk((best.values, ids.gather(-1, best.indices))))
    return out[0], out[1]


def unit_directions(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to unit L2 norm; a zero row stays zero (pure).

    Args:
        vectors: ``(L1, d)``, e.g. a run's displacement d_ℓ at the last prompt token.

    Returns:
        ``(L1, d)`` float64.
    """
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)


def vocabulary_projection(handle: ModelHandle, directions: np.ndarray, k: int = 10) -> dict[str, Any]:
    """:func:`back_projection` through this model's unembedding, with the tokens decoded.

    Args:
        directions: ``(L1, d)`` directions (e.g. a basis' PC1, or a run's normalized displacement).

    Returns:
        The arrays of :func:`back_projection` plus ``top_tokens``/``bottom_tokens`` (lists ``L1 × k``).
    """
    weight = model_parts(handle).unembed.weight
    with handle.session():
        out: dict[str, Any] = back_projection(weight, directions, k)
    for end in ("top", "bottom"):
        out[f"{end}_tokens"] = [handle.decode_tokens(row) for row in out[f"{end}_ids"].tolist()]
    return out
