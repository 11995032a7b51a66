"""Logit noise for RePCS' robustness test (RePCS §V, Table IV): Z under Gaussian noise on both paths' logits.

The paper injects Gaussian noise of standard deviation σ ∈ {0.02, 0.05, 0.10} "before computing the KL
score" and reports ROC-AUC per σ (0.918 → 0.889 at σ = 0.10). Its table is titled *additive Gaussian logit
noise* while its text says the noise goes into the softmax outputs; we follow the table (docs/architecture.md,
"Method notes"): noise is added to the **logits** of both paths, then both are re-normalized by the softmax, so
every noisy P is a proper distribution:

    Z_σ(q) = Σ_{t<T} KL( softmax(ℓ_retrieval,t + σ ε_t) ‖ softmax(ℓ_parametric,t + σ ε′_t) ),  ε, ε′ ~ N(0, I_V)

σ is in logit units (nats of log-odds). The noise of a row is drawn once (ε, ε′ of shape ``(T, V)``) from a
generator seeded by the row's text and a run seed, and the same draw is scaled by every σ (common random
numbers): the AUC-vs-σ curve then reflects σ, not a fresh draw per σ, and a row's Z_σ does not depend on the
batch it was scored in. σ = 0 gives Z exactly. The AUC table over rows is
:func:`core.evaluation.robustness.robustness_table`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import torch

from core.maths.divergence import kl_divergence, log_probs


def row_seed(seed: int, query: str, context: str) -> int:
    """A 63-bit seed from a run seed and a row's text (stable across processes, unlike ``hash``)."""
    digest = hashlib.sha256(f"{int(seed)}\x00{query}\x00{context}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def noisy_repcs_scores(
    retrieval_logits: torch.Tensor,
    parametric_logits: torch.Tensor,
    window: int,
    sigmas: Sequence[float],
    seed: int,
) -> list[float]:
    """Z_σ for each σ (nats), from one seeded noise draw per path scaled by each σ.

    Args:
        retrieval_logits, parametric_logits: ``(n, V)`` logits of both paths predicting the same ``n`` answer
            tokens.
        window: RePCS' T; the first ``min(T, n)`` positions are summed (float64).
        sigmas: noise standard deviations in logit units (each ≥ 0).
        seed: the generator seed (see :func:`row_seed`).

    Returns:
        ``[Z_σ for σ in sigmas]``; ``σ = 0`` equals :func:`core.engine.threshold.repcs_score` of the clean logits.

    Raises:
        ValueError: logits of different shapes or not 2-D, T < 1, or a negative or non-finite σ.
    """
    if retrieval_logits.shape != parametric_logits.shape or retrieval_logits.ndim != 2:
        raise ValueError(
            "need two (n, V) logit tensors of one shape, got "
            f"{tuple(retrieval_logits.shape)} and {tuple(parametric_logits.shape)}"
        )
    if window < 1:
        raise ValueError(f"window T must be >= 1, got {window}")
    if any(float(s) < 0 or not np.isfinite(float(s)) for s in sigmas):
        raise ValueError(f"noise σ must be finite and >= 0, got {list(sigmas)}")
    n = min(window, retrieval_logits.shape[0])
    retrieval = retrieval_logits[:n].float()
    parametric = parametric_logits[:n].to(retrieval.device).float()
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    eps_retrieval = torch.randn(retrieval.shape, generator=gen, dtype=torch.float32).to(retrieval.device)
    eps_parametric = torch.randn(parametric.shape, generator=gen, dtype=torch.float32).to(retrieval.device)
    out = []
    for sigma in sigmas:
        s = float(sigma)
        if s == 0.0:
            kl = kl_divergence(log_probs(retrieval), log_probs(parametric))
        else:
            kl = kl_divergence(log_probs(retrieval + s * eps_retrieval), log_probs(parametric + s * eps_parametric))
        out.append(float(kl.double().sum().item()))
    return out
