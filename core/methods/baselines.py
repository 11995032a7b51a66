"""Black-box membership baselines on the context text (CRM appendix Q.1, tier 1), from one forward pass.

The context is scored as plain text by the same model (no prompt template, no query): token log-probabilities
``log p(x_i | x_<i)`` for every context token that has a prefix. **Beginning of sequence**, as in the reference
implementations of Min-K% (Shi et al.) and Min-K%++ (Zhang et al.), which call ``tokenizer(text)`` with its
defaults and score ``input_ids[1:]``: a BOS token is prepended only when the tokenizer adds one by default
(:func:`adds_bos`: ``tokenizer("x").input_ids[0] == bos_token_id``, e.g. Llama 2/3, Mistral), so the first
context token is then scored after a real BOS; otherwise (e.g. SmolLM2 and Qwen, whose ``bos_token`` is the
chat-turn marker ``<|im_start|>`` and is never added to plain text) nothing is prepended and scoring starts at
the second token — the first context word is never scored as "what follows a chat-turn marker". All four
baselines come from that single forward pass, shared across detectors through ``DetectorInput.cache``:

* **Perplexity** (PPL) = exp(−(1/N) Σ_i log p(x_i | x_<i)). Memorized text is predictable: *lower* PPL ⇒
  memorized.
* **zlib ratio** (Carlini et al., 2021) = log PPL / zlib entropy, with zlib entropy = the length in bytes of
  ``zlib.compress(text.encode("utf-8"))``: the model's surprise relative to a generic compressor's. *Lower* ⇒
  memorized.
* **Min-K% Prob** (Shi et al., 2024) = mean of the k% lowest token log-probs (⌈k·N/100⌉ ≥ 1 tokens): a
  memorized text has few surprising tokens. *Higher* ⇒ memorized.
* **Min-K%++** (Zhang et al., 2024): each token's log-prob standardized by the next-token distribution it was
  drawn from, ``(log p(x_i) − μ_i) / σ_i`` with ``μ_i = E_{z∼p(·|x_<i)}[log p(z)]`` and
  ``σ_i² = E[(log p(z))²] − μ_i²``; then the mean of the k% lowest. *Higher* ⇒ memorized.

k is selectable: the detectors ``min_k_<k>`` and ``min_kpp_<k>`` (:mod:`core.detectors.baselines`) exist for any
integer 1 ≤ k ≤ 100 (k = 10 and 20, the CRM paper's values, are listed by default).

What they can and cannot say: they measure how familiar the *context text* is to the model (membership
inference), not whether the answer used it; a well-known fact stated in unusual words can look unfamiliar.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np
import torch

from core.model.handle import ModelHandle

DEFAULT_KS = (10, 20)


def adds_bos(tokenizer: Any) -> bool:
    """Whether the tokenizer adds its BOS token to plain text by default (the reference implementations' test:
    ``tokenizer("x").input_ids[0] == bos_token_id``); ``False`` when it has no BOS token."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    ids = list(tokenizer("x")["input_ids"])
    return bool(ids) and int(ids[0]) == int(bos)


def context_token_stats(handle: ModelHandle, text: str) -> dict[str, np.ndarray]:
    """Per-token statistics of ``text`` under the model, from one forward pass (float64 numpy, nats).

    The BOS token is prepended only when :func:`adds_bos` (then all N context tokens are scored); otherwise
    the first context token has no prefix and is not scored (N − 1 values).

    Returns:
        ``logprob``: ``log p(x_i | x_<i)``, shape ``(N,)``; ``mu`` and ``sigma``: mean and standard deviation
        of ``log p(z)`` under ``z ∼ p(· | x_<i)`` (Min-K%++), shape ``(N,)``.

    Raises:
        ValueError: empty text, a text with no scorable token (one token and no BOS added), or over the model's
            budget.
    """
    ids = context_ids(handle, text)
    x = torch.tensor([ids], dtype=torch.long, device=handle.device)
    return stats_from_logits(handle.forward(input_ids=x, use_cache=False).logits[0, :-1], ids)


def context_ids(handle: ModelHandle, text: str) -> list[int]:
    """The tokens :func:`context_token_stats` scores (BOS first when :func:`adds_bos`).

    Raises:
        ValueError: see :func:`context_token_stats`.
    """
    if not text or not text.strip():
        raise ValueError("the context is empty")
    tok = handle.tokenizer
    ids = [int(i) for i in tok(text, add_special_tokens=False)["input_ids"]]
    if adds_bos(tok):
        ids = [int(tok.bos_token_id), *ids]
    if len(ids) < 2:
        raise ValueError(
            "the context has no token to score (a single token, and this tokenizer adds no BOS token before it)"
        )
    if len(ids) > handle.info.max_tokens:
        raise ValueError(f"the context is {len(ids):,} tokens, over the model's limit of {handle.info.max_tokens:,}")
    return ids


def stats_from_logits(logits: torch.Tensor, ids: list[int]) -> dict[str, np.ndarray]:
    """:func:`context_token_stats` from the logits of positions ``0 … N − 2`` of ``ids`` (row i predicts
    ``ids[i + 1]``)."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    target = torch.tensor(ids[1:], dtype=torch.long, device=logits.device).unsqueeze(-1)
    token_lp = logp.gather(-1, target).squeeze(-1)
    p = logp.exp()
    mu = (p * logp).sum(-1)
    var = (p * logp.square()).sum(-1) - mu.square()
    sigma = var.clamp_min(1e-12).sqrt()
    return {"logprob": token_lp.cpu().numpy(), "mu": mu.cpu().numpy(), "sigma": sigma.cpu().numpy()}


def perplexity(logprob: np.ndarray) -> float:
    """PPL = exp(−mean log p)."""
    lp = np.asarray(logprob, dtype=np.float64)
    if lp.size == 0:
        raise ValueError("no token log-probabilities")
    return float(np.exp(-lp.mean()))


def zlib_ratio(logprob: np.ndarray, text: str) -> float:
    """log PPL / zlib entropy (bytes of ``zlib.compress(text)``)."""
    lp = np.asarray(logprob, dtype=np.float64)
    if lp.size == 0:
        raise ValueError("no token log-probabilities")
    return float(-lp.mean() / len(zlib.compress(text.encode("utf-8"))))


def min_k_mean(values: np.ndarray, k: float) -> float:
    """Mean of the ``k`` % lowest values (at least one value; ``k`` in (0, 100])."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("no values")
    if not 0 < k <= 100:
        raise ValueError(f"k must be in (0, 100], got {k}")
    m = max(1, math.ceil(v.size * k / 100.0))
    return float(np.sort(v)[:m].mean())


def min_k_prob(logprob: np.ndarray, k: float) -> float:
    """Min-K% Prob: mean of the k% lowest token log-probs (nats)."""
    return min_k_mean(logprob, k)


def min_k_plus_plus(logprob: np.ndarray, mu: np.ndarray, sigma: np.ndarray, k: float) -> float:
    """Min-K%++: mean of the k% lowest ``(log p(x_i) − μ_i) / σ_i``."""
    lp, m, s = (np.asarray(a, dtype=np.float64) for a in (logprob, mu, sigma))
    if not lp.shape == m.shape == s.shape:
        raise ValueError(f"shapes differ: {lp.shape}, {m.shape}, {s.shape}")
    return min_k_mean((lp - m) / s, k)
