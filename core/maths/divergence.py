"""Distribution maths over next-token logits, in float32 log-space (nats).

Small pure functions with an explicit ``dim`` in the style of tuned-lens ``stats/distance.py``. Inputs are
logits of any dtype; everything is upcast to float32 before the softmax.
"""

from __future__ import annotations

import numpy as np
import torch


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
        identical inputs; they are clipped at 0 (KL is non-negative).
    """
    if logp.shape != logq.shape:
        raise ValueError(f"logp and logq must have the same shape, got {tuple(logp.shape)} and {tuple(logq.shape)}")
    logp, logq = logp.float(), logq.float()
    p = logp.exp()
    terms = torch.where(p > 0, p * (logp - logq), torch.zeros_like(p))
    return terms.sum(dim=dim).clamp_min(0.0)


def entropy(logp: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy H(P) = −Σ p log p in nats, float32."""
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
