"""Distribution maths over next-token logits, in float32 log-space (nats).

Small pure functions with an explicit ``dim`` in the style of tuned-lens ``stats/distance.py``. Inputs are
logits of any dtype; everything is upcast to float32 before the softmax.

**Large vocabularies.** A ``(rows, V)`` float32 temporary is ``4·V`` bytes a row: 1 MiB a row for Gemma 3's
262,144 tokens. :func:`kl_divergence` and :func:`entropy` reduce over the last dimension in slices of at most
:data:`CHUNK_BYTES` of temporaries (:func:`row_slices`), so their own work never spans a whole
``positions × V`` or ``layers × positions × V`` input; callers that build such inputs (a lens, a context score)
slice their rows with the same helpers. Each row's value is computed from that row alone, so slicing changes no
result beyond the order of float32 summation (the embedded model's inputs fit in one slice).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np
import torch

CHUNK_BYTES = 64 << 20
"""The most bytes of one ``(rows, V)`` temporary the sliced reductions create (64 MiB: 341 rows of the embedded
model's 49,152-token vocabulary in float32, 64 rows of Gemma 3's 262,144)."""


def rows_per_chunk(vocab_size: int, *, itemsize: int = 4, budget: int | None = None) -> int:
    """How many rows of ``vocab_size`` values of ``itemsize`` bytes fit in ``budget`` bytes (default
    :data:`CHUNK_BYTES`; at least 1)."""
    budget = CHUNK_BYTES if budget is None else budget
    return max(1, int(budget) // (max(1, int(itemsize)) * max(1, int(vocab_size))))


def row_slices(n_rows: int, vocab_size: int, *, itemsize: int = 4, budget: int | None = None) -> Iterator[slice]:
    """Consecutive slices of ``range(n_rows)`` of at most :func:`rows_per_chunk` rows each (one slice when all fit)."""
    step = rows_per_chunk(vocab_size, itemsize=itemsize, budget=budget)
    for start in range(0, n_rows, step):
        yield slice(start, min(n_rows, start + step))


def _by_rows(fn: Callable[..., torch.Tensor], dim: int, *tensors: torch.Tensor) -> torch.Tensor:
    """``fn(*tensors, dim)``, a reduction over ``dim``; when ``dim`` is the last dimension and the temporaries would
    exceed :data:`CHUNK_BYTES`, applied to slices of the leading rows (the result keeps the leading shape)."""
    x = tensors[0]
    rows = math.prod(x.shape[:-1]) if x.dim() else 1
    if x.dim() < 2 or dim not in (-1, x.dim() - 1) or rows <= rows_per_chunk(x.shape[-1]):
        return fn(*tensors, dim)
    flat = [t.reshape(-1, t.shape[-1]) for t in tensors]
    parts = [fn(*(t[s] for t in flat), -1) for s in row_slices(rows, x.shape[-1])]
    return torch.cat(parts).reshape(x.shape[:-1])


def log_probs(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``log softmax`` of ``logits`` in float32."""
    return torch.log_softmax(logits.float(), dim=dim)


def kl_divergence(logp: torch.Tensor, logq: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """KL(P ‖ Q) = Σ_v p_v (log p_v − log q_v) in nats (RePCS eq. 2 per position; CRM eq. 4).

    Args:
        logp: log-probabilities of P, shape ``(..., V)``.
        logq: log-probabilities of Q, same shape.
        dim: the vocabulary dimension.

    Returns:
        KL per leading index, shape ``(...)``, float32. Rounding can leave values of order −1e-7 for
        identical inputs; they are clipped at 0 (KL is non-negative). Reduced in slices of rows when the
        temporaries would exceed :data:`CHUNK_BYTES`.
    """
    if logp.shape != logq.shape:
        raise ValueError(f"logp and logq must have the same shape, got {tuple(logp.shape)} and {tuple(logq.shape)}")
    return _by_rows(_kl, dim, logp, logq)


def _kl(logp: torch.Tensor, logq: torch.Tensor, dim: int) -> torch.Tensor:
    logp, logq = logp.float(), logq.float()
    p = logp.exp()
    terms = torch.where(p > 0, p * (logp - logq), torch.zeros_like(p))
    return terms.sum(dim=dim).clamp_min(0.0)


def entropy(logp: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy H(P) = −Σ p log p in nats, float32 (reduced in slices of rows, see :data:`CHUNK_BYTES`)."""
    return _by_rows(_entropy, dim, logp)


def _entropy(logp: torch.Tensor, dim: int) -> torch.Tensor:
    logp = logp.float()
    p = logp.exp()
    return -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(dim=dim)


def topk_entropy(logp: torch.Tensor, k: int | None, dim: int = -1) -> torch.Tensor:
    """Entropy of the top-``k`` probabilities renormalized to sum to one (the Self-Critique
    approximation); ``k=None`` or ``k >= V`` gives the full entropy."""
    size = logp.shape[dim]
    if k is None or k >= size:
        return entropy(logp, dim=dim)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    top = torch.topk(logp.float(), k, dim=dim).values
    return entropy(torch.log_softmax(top, dim=dim), dim=dim)


def kl_statistics(token_kl: np.ndarray, split: int = 32) -> dict[str, float | int | None]:
    """The five CRM level-2 statistics of a per-step KL sequence (CRM appendix P.2).

    Args:
        token_kl: KL_t per answer position, shape ``(n,)``, nats.
        split: the early/late split point (CRM: first 32 tokens vs. the rest).

    Returns:
        ``mean``, ``max``, ``var`` (population variance), ``early`` (mean of the first ``split``),
        ``late`` (mean of the rest, ``None`` when the answer is not longer than ``split``), ``split``
        and ``trend`` (slope of the least-squares line of KL_t against t, nats per token; 0 for n < 2).
    """
    kl = np.asarray(token_kl, dtype=np.float64)
    if kl.ndim != 1:
        raise ValueError(f"token_kl must be 1-D, got shape {kl.shape}")
    if split < 1:
        raise ValueError(f"split must be >= 1, got {split}")
    n = kl.size
    if n == 0:
        return {"mean": None, "max": None, "var": None, "early": None, "late": None, "split": split, "trend": None}
    trend = float(np.polyfit(np.arange(n, dtype=np.float64), kl, 1)[0]) if n >= 2 else 0.0
    return {
        "mean": float(kl.mean()),
        "max": float(kl.max()),
        "var": float(kl.var()),
        "early": float(kl[:split].mean()),
        "late": float(kl[split:].mean()) if n > split else None,
        "split": split,
        "trend": trend,
    }
