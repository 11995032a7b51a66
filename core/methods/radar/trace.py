"""RADAR's one instrumented forward pass over a prompt, and the 37 features read off it (appendix A.1, D).

One forward pass over the prompt tokens only — appendix A.1 "Analysis focused on input prompt tokens"; no
answer is generated, no gradients (appendix F.2) — through :func:`core.model.trace.trace`:

* the residual stream after each decoder layer at every prompt position (the trace's rows 1 … L; the last one
  is the final norm's input, not the normed state transformers returns as its last hidden state);
* each layer's attention weights, reduced to per-head entropies inside the trace's hooks (no layers × heads ×
  T × T stack is kept);
* the logit lens ``W_U · norm(h_ℓ)`` at the last prompt position (:func:`core.model.lens.lens_logits`); for the
  last layer it equals the model's own output distribution.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from core.maths.divergence import entropy, log_probs, row_slices
from core.methods.radar.features import FEATURE_NAMES
from core.methods.radar.maths import head_entropies, mechanistic_features, residual_statistics, surface_features
from core.model.handle import ModelHandle
from core.model.lens import lens_logits
from core.model.parts import model_parts
from core.model.trace import ALL, Trace, trace


@dataclass(frozen=True)
class RadarTrace:
    """What one forward pass over a prompt yields (all CPU numpy, float64 unless noted).

    Attributes:
        text: the analyzed prompt text.
        token_ids, tokens: the prompt's tokens (T of them).
        confidence: c_ℓ, shape ``(L,)``: max probability of the logit-lens distribution at the last prompt
            position after decoder layer ℓ.
        entropy: H_ℓ, shape ``(L,)``, nats, of the same distributions.
        top_token_ids, top_tokens: the arg-max token of each layer's lens, ``(L,)``.
        head_entropy: H_ℓ,h, shape ``(L, H)``, nats: attention entropy summed over query positions
            (appendix D.2.1: H_ℓ,h = −Σ_{i,j} A log A).
        layer_variance: v_ℓ, ``(L,)``: variance of the residual stream after layer ℓ over positions × units.
        layer_norm: n_ℓ, ``(L,)``: mean over positions of the residual stream's L2 norm.
        layer_rank: r_ℓ, ``(L,)``: effective rank of the ``T × d`` residual-stream matrix.
    """

    text: str
    token_ids: list[int]
    tokens: list[str]
    confidence: np.ndarray
    entropy: np.ndarray
    top_token_ids: list[int]
    top_tokens: list[str]
    head_entropy: np.ndarray
    layer_variance: np.ndarray
    layer_norm: np.ndarray
    layer_rank: np.ndarray

    @property
    def n_layers(self) -> int:
        return int(self.confidence.shape[0])

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, np.ndarray):
                out[key] = value.tolist()
        return out


def encode_radar_prompt(handle: ModelHandle, text: str) -> list[int]:
    """The prompt's token ids as RADAR reads it: the raw text with the tokenizer's own special tokens
    (no chat template — the paper feeds plain completion prompts such as "The capital of France is").

    Raises:
        ValueError: empty text, no tokens, or more tokens than the model's budget.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("The prompt is empty: RADAR needs at least one token of text.")
    ids = list(handle.tokenizer(text, add_special_tokens=True)["input_ids"])
    if not ids:
        raise ValueError("The prompt produced no tokens.")
    if len(ids) > handle.info.max_tokens:
        raise ValueError(
            f"The prompt is {len(ids):,} tokens, over this model's limit of {handle.info.max_tokens:,}; shorten it "
            "(nothing is cut automatically)."
        )
    return ids


def trace_prompt(handle: ModelHandle, text: str) -> RadarTrace:
    """Run the one instrumented forward pass over a prompt and reduce everything RADAR needs.

    Args:
        handle: the shared model (eager attention is required for the attention weights).
        text: the prompt (see :func:`core.methods.radar.prompts.radar_prompt`).

    Returns:
        A :class:`RadarTrace`.

    Raises:
        ValueError: bad prompt (see :func:`encode_radar_prompt`), an unsupported architecture, fewer than two
            decoder layers, or attention weights that the model does not return (SDPA/flash attention).
    """
    ids = encode_radar_prompt(handle, text)
    check_layers(handle)
    t = trace(handle, [ids], positions=ALL, attention={HEAD_ENTROPY: head_entropy_reducer})
    return trace_from(handle, text, ids, t)


HEAD_ENTROPY = "head_entropy"
"""The name of RADAR's attention reducer in a :func:`~core.model.trace.trace` (:func:`head_entropy_reducer`)."""


def head_entropy_reducer(layer: int, w: torch.Tensor) -> Any:
    """RADAR's attention reducer: each head's entropy at every query position (:func:`head_entropies`)."""
    return head_entropies(w)


def check_layers(handle: ModelHandle) -> None:
    """Raise ``ValueError`` for a model with fewer than the two decoder layers RADAR's trajectories need."""
    n_layers = model_parts(handle).n_layers
    if n_layers < 2:
        raise ValueError(f"RADAR's trajectory features need at least 2 decoder layers; this model has {n_layers}.")


def lens_rows(t: Trace, b: int = 0) -> torch.Tensor:
    """The states RADAR reads through the logit lens: each decoder layer's output at the last position, ``(L, d)``."""
    return t.residual[b][1:, -1]


def trace_from(
    handle: ModelHandle,
    text: str,
    ids: list[int],
    t: Trace,
    b: int = 0,
    *,
    lens_logits_rows: torch.Tensor | None = None,
) -> RadarTrace:
    """The :class:`RadarTrace` of sequence ``b`` of a trace over ``ids`` that kept every position's residual stream
    and ran :func:`head_entropy_reducer` under :data:`HEAD_ENTROPY` (e.g. batched with another text).

    Args:
        lens_logits_rows: the logit lens of :func:`lens_rows`, when the caller ran it (with other rows, in one
            unembedding product); else it is run here.
    """
    parts = model_parts(handle)
    layers = list(t.residual[b][1:])  # each (T, d) float32: decoder layer ℓ's output, the last one un-normed
    head_entropy = t.attention[HEAD_ENTROPY][b]
    param = next(handle.model.parameters())
    with handle.session():
        if lens_logits_rows is None:
            lens_logits_rows = lens_logits(parts, lens_rows(t, b).to(device=param.device, dtype=param.dtype))
        conf, tops, ents = [], [], []
        for rows in row_slices(lens_logits_rows.shape[0], lens_logits_rows.shape[-1]):  # one slice unless L·V is large
            logp = log_probs(lens_logits_rows[rows])  # (rows, V), float32
            conf.append(logp.max(dim=-1).values.exp().double().cpu().numpy())
            tops += logp.argmax(dim=-1).cpu().tolist()
            ents.append(entropy(logp).double().cpu().numpy())
            del logp
        confidence, top_ids, lens_entropy = np.concatenate(conf), tops, np.concatenate(ents)
    stats = np.array([residual_statistics(h) for h in layers], dtype=np.float64)  # (L, 3)
    return RadarTrace(
        text=text,
        token_ids=[int(i) for i in ids],
        tokens=handle.decode_tokens(ids),
        confidence=confidence,
        entropy=lens_entropy,
        top_token_ids=[int(i) for i in top_ids],
        top_tokens=handle.decode_tokens(top_ids),
        head_entropy=np.stack([np.asarray(e, dtype=np.float64) for e in head_entropy]),
        layer_variance=stats[:, 0].copy(),
        layer_norm=stats[:, 1].copy(),
        layer_rank=stats[:, 2].copy(),
    )


def features_from_trace(trace: RadarTrace) -> dict[str, float]:
    """All 37 features, in :data:`~core.methods.radar.features.FEATURE_NAMES` order (surface first).

    Raises:
        ValueError: when a feature is not finite.
    """
    values = {
        **surface_features(trace.confidence, trace.entropy),
        **mechanistic_features(trace.head_entropy, trace.layer_variance, trace.layer_norm, trace.layer_rank),
    }
    out = {name: float(values[name]) for name in FEATURE_NAMES}
    bad = [k for k, v in out.items() if not math.isfinite(v)]
    if bad:
        raise ValueError(f"Non-finite RADAR feature(s) {', '.join(bad)} for {trace.text[:60]!r}")
    return out


def extract_features(handle: ModelHandle, text: str) -> tuple[dict[str, float], RadarTrace]:
    """One forward pass → (the 37 features, the trace they come from)."""
    trace = trace_prompt(handle, text)
    return features_from_trace(trace), trace
