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

from core.maths.divergence import row_slices
from core.model.handle import ModelHandle
from core.model.lens import lens_logits
from core.model.parts import model_parts
from core.model.trace import ALL, trace

DEFAULT_KS = (10, 20)
FULL_LOGITS_BYTES = 256 << 20
"""Up to this many bytes of float32 logits (tokens × V × 4) the context is scored from one forward's logits (the
embedded model's texts up to 1,365 tokens); a longer text of a large vocabulary (Gemma 3: over 256 tokens) is
scored from the last layer's states, its logits computed slice by slice (:func:`stats_from_states`)."""


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
    if (len(ids) - 1) * handle.info.vocab_size * 4 <= FULL_LOGITS_BYTES:
        x = torch.tensor([ids], dtype=torch.long, device=handle.device)
        return stats_from_logits(handle.forward(input_ids=x, use_cache=False).logits[0, :-1], ids)
    # a long text of a large vocabulary: the last layer's states, then the logits slice by slice (the logit lens of
    # the last layer is the model's own logits; see core.model.lens)
    states = trace(handle, [ids], positions=ALL).residual[0][-1]
    return stats_from_states(handle, states[:-1], ids)


def stats_from_states(handle: ModelHandle, states: torch.Tensor, ids: list[int]) -> dict[str, np.ndarray]:
    """:func:`stats_from_logits` from the last decoder layer's output (un-normed) at positions ``0 … N − 2`` of
    ``ids``, ``(N − 1, d)``: the logits are computed through :func:`core.model.lens.lens_logits` (final norm,
    unembedding, the family's scale and soft-cap: the model's own logits) in slices of rows, so no
    ``(N − 1) × V`` tensor is ever whole."""
    if states.shape[0] != len(ids) - 1:
        raise ValueError(f"{states.shape[0]} states for {len(ids)} ids (need one per scored token)")
    parts = model_parts(handle)
    param = next(handle.model.parameters())
    out: list[dict[str, np.ndarray]] = []
    with handle.session():
        for rows in row_slices(states.shape[0], handle.info.vocab_size, itemsize=8):
            logits = lens_logits(parts, states[rows].to(device=param.device, dtype=param.dtype))
            out.append(_stats(logits, ids[rows.start + 1 : rows.stop + 1]))
    return {key: np.concatenate([o[key] for o in out]) for key in out[0]}


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
    ``ids[i + 1]``), computed in float64 in slices of rows (:func:`core.maths.divergence.row_slices`: at most
    64 MiB of float64 temporaries at once; one slice for the embedded model's texts up to 170 tokens)."""
    if logits.shape[0] != len(ids) - 1:
        raise ValueError(f"{logits.shape[0]} logit rows for {len(ids)} ids (need one per scored token)")
    parts = [
        _stats(logits[rows], ids[rows.start + 1 : rows.stop + 1])
        for rows in row_slices(logits.shape[0], logits.shape[-1], itemsize=8)
    ]
    if len(parts) == 1:
        return parts[0]
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def _stats(logits: torch.Tensor, targets: list[int]) -> dict[str, np.ndarray]:
    """Per-row log-probability of ``targets`` and Min-K%++'s μ, σ, from ``(n, V)`` logits (float64)."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    target = torch.tensor(targets, dtype=torch.long, device=logits.device).unsqueeze(-1)
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
