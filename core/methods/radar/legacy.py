"""RADAR — recall vs reasoning from one instrumented forward pass (RADAR 2025, appendices C–G).

RADAR ("Recall vs. Reasoning Detection through Activation Representation") describes a prompt by 37
features read off the model while it reads the prompt, and classifies it as *recall* (the model "knows"
the answer) or *reasoning* (the model must "compute" it) with a soft-vote ensemble. When a reasoning-type
prompt gets a recall-like signature, RADAR reads that as a sign of contamination (§4.1).

What is computed (one forward pass over the prompt tokens only — appendix A.1 "Analysis focused on input
prompt tokens"; no answer is generated, no gradients, appendix F.2):

* **Surface features (16, appendix D.1)** from the logit-lens trajectory of the next-token prediction at
  the last prompt position: for each decoder layer ℓ = 0 … L−1 the layer's residual stream goes through
  the model's final norm and unembedding, giving p_ℓ; confidence c_ℓ = max_i p_ℓ,i and entropy
  H_ℓ = −Σ_i p_ℓ,i log p_ℓ,i (nats, float32 log-space via :mod:`core.divergence`). The last layer's lens
  equals the model's own output distribution.
* **Mechanistic features (21, appendix D.2)** from per-layer, per-head attention entropies (reduced on the
  fly by forward hooks: no layers × heads × T × T stack is kept) and per-layer hidden-state statistics
  (variance, mean L2 norm, effective rank by SVD, float64).

Where appendix D leaves a quantity undefined (e.g. "variance growth", "norm growth trajectory") this
module fixes a definition and says so in the feature's ``note``; where the paper itself says a feature is
a proxy (appendix D.2 and F.1) its ``proxy`` field quotes that. RDS and RCI (appendix C) are only described
in words in the paper ("predefined formulas that weigh different features"); :data:`RDS_FEATURES` and
:data:`RCI_FEATURES` give the formulas used here.

Features are extracted once per model for the bundled training and test sets (``assets/radar``) and cached
as CSV + JSON (the embedded model's ship in ``assets/radar/features``; other models go to
``core.models.cache_dir()/radar``). The classifier is rebuilt from them when needed (no pickles).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.detectors.registry import MEMORIZED_HIGH, Detector, DetectorInput, register
from core.maths.divergence import entropy, log_probs
from core.model.loading import EMBEDDED_MODEL, EMBEDDED_NAME, ModelHandle, cache_dir
from core.io import asset_path

logger = logging.getLogger(__name__)

FEATURE_VERSION = 1
"""Bumped whenever a feature definition changes; cached feature tables of another version are recomputed."""

RADAR_DIR = asset_path("radar")
TRAIN_PATH = RADAR_DIR / "train.csv"
TEST_PATH = RADAR_DIR / "test.csv"
EMBEDDED_FEATURES_PATH = RADAR_DIR / "features" / f"{EMBEDDED_MODEL}.csv"

RECALL = "recall"
REASONING = "reasoning"
LABELS = (RECALL, REASONING)
TRAIN = "train"
TEST = "test"
TRAIN_CATEGORIES = (RECALL, REASONING)
TEST_CATEGORIES = ("clear_recall", "clear_reasoning", "ambiguous", "complex_reasoning")
CATEGORY_TITLES = {
    RECALL: "Recall",
    REASONING: "Reasoning",
    "clear_recall": "Clear recall",
    "clear_reasoning": "Clear reasoning",
    "ambiguous": "Challenging / ambiguous",
    "complex_reasoning": "Complex reasoning",
}

SPECIALIZATION_TAU = 1.5
"""τ of ``num_specialized_heads`` (appendix D.2.1: "typically τ = 1.5"), nats."""
EPS = 1e-8
"""ε of ``factual_head_activation`` (appendix D.2.1); also keeps the two inverse-std features finite."""

PAPER_RESULTS: dict[str, float] = {
    "clear_recall": 1.0,
    "clear_reasoning": 1.0,
    "ambiguous": 23 / 30,
    "complex_reasoning": 1.0,
    "overall": 0.93,
    "recall_tasks": 0.977,
    "reasoning_tasks": 0.893,
    "train_cv": 0.967,
    "rds_recall": 0.933,
    "rds_reasoning": 0.375,
}
"""RADAR Table 1, §3.1 (training cross-validation) and §3.2 (mean RDS) on DialoGPT-medium."""


# ----------------------------------------------------------------------------------------------------------
# The 37 features


@dataclass(frozen=True)
class FeatureSpec:
    """One feature of appendix D.

    Attributes:
        name: the paper's feature name.
        group: ``"surface"`` or ``"mechanistic"``.
        subgroup: the appendix D table it belongs to (e.g. "Confidence-based").
        kind: ``"int"`` or ``"float"`` (the paper's type column).
        formula: the definition as computed here (unicode maths).
        proxy: the paper's own words where it says the feature is a proxy, else ``None``.
        note: what this implementation had to decide where appendix D is not explicit, else ``None``.
    """

    name: str
    group: str
    subgroup: str
    kind: str
    formula: str
    proxy: str | None = None
    note: str | None = None


_S, _M = "surface", "mechanistic"
_CONF, _TRAJ, _INFO = "Confidence-based (D.1.1)", "Trajectory dynamics (D.1.2)", "Information-theoretic (D.1.3)"
_SPEC, _CIRC, _INTV = "Attention specialization (D.2.1)", "Circuit dynamics (D.2.2)", "Intervention sensitivity (D.2.3)"
_WORK, _CAUS = "Working memory (D.2.4)", "Causal effects (D.2.5)"
_ATTN_NOTE = (
    "As the paper writes it, H_ℓ,h sums the row entropies over all query positions i, so it grows with the "
    "prompt length T (each row i contributes at most log(i+1) nats under the causal mask); a one-token prompt "
    "gives 0."
)
_ENTROPY_PROXY = "Derived from attention entropy instead of actual interventions (appendix F.1)."

FEATURES: tuple[FeatureSpec, ...] = (
    # D.1.1 confidence-based (8)
    FeatureSpec("mean_confidence", _S, _CONF, "float", "c̄ = (1/L) Σ_ℓ c_ℓ,  c_ℓ = max_i p_ℓ,i",
                note="p_ℓ = softmax(lm_head(final_norm(h_ℓ))) at the last prompt position (logit lens)."),
    FeatureSpec("std_confidence", _S, _CONF, "float", "σ_c = sqrt( (1/(L−1)) Σ_ℓ (c_ℓ − c̄)² )"),
    FeatureSpec("max_confidence", _S, _CONF, "float", "c_max = max_ℓ c_ℓ"),
    FeatureSpec("min_confidence", _S, _CONF, "float", "c_min = min_ℓ c_ℓ"),
    FeatureSpec("confidence_range", _S, _CONF, "float", "Δc = c_max − c_min"),
    FeatureSpec("convergence_layer", _S, _CONF, "int", "ℓ* = argmax_ℓ c_ℓ",
                note="0-based decoder layer (the first maximum), which is what the +1 in convergence_speed implies."),
    FeatureSpec("convergence_speed", _S, _CONF, "float", "v_conv = 1 / (ℓ* + 1)"),
    FeatureSpec("confidence_slope", _S, _CONF, "float", "β = Σ_ℓ (ℓ − ℓ̄)(c_ℓ − c̄) / Σ_ℓ (ℓ − ℓ̄)²,  ℓ = 1…L"),
    # D.1.2 trajectory dynamics (4)
    FeatureSpec("oscillation_count", _S, _TRAJ, "int",
                "#{ℓ : Δc_ℓ · Δc_ℓ+1 < 0},  Δc_ℓ = c_ℓ+1 − c_ℓ",
                note="A zero difference never counts as a sign change (the product is then 0)."),
    FeatureSpec("early_confidence", _S, _TRAJ, "float", "c_early = mean of c_ℓ over the first ⌊L/2⌋ layers"),
    FeatureSpec("late_confidence", _S, _TRAJ, "float", "c_late = mean of c_ℓ over the remaining L − ⌊L/2⌋ layers"),
    FeatureSpec("prediction_stability", _S, _TRAJ, "float", "s_pred = 1 / (σ_c + ε)",
                note="ε = 1e-8 (as in factual_head_activation) keeps a flat trajectory finite."),
    # D.1.3 information-theoretic (4)
    FeatureSpec("mean_entropy", _S, _INFO, "float", "H̄ = (1/L) Σ_ℓ H_ℓ,  H_ℓ = −Σ_i p_ℓ,i log p_ℓ,i  (nats)"),
    FeatureSpec("entropy_change", _S, _INFO, "float", "ΔH = H_L − H_1"),
    FeatureSpec("information_gain", _S, _INFO, "float", "IG = −ΔH = H_1 − H_L"),
    FeatureSpec("layer_consistency", _S, _INFO, "float", "1 / (σ_H + ε),  σ_H = sqrt( (1/(L−1)) Σ_ℓ (H_ℓ − H̄)² )",
                note="ε = 1e-8 keeps a flat entropy trajectory finite."),
    # D.2.1 attention specialization (5)
    FeatureSpec("num_specialized_heads", _M, _SPEC, "int", "N_spec = Σ_ℓ Σ_h 1[H_ℓ,h < τ],  τ = 1.5", note=_ATTN_NOTE),
    FeatureSpec("head_specialization_score", _M, _SPEC, "float", "S_head = 1 − H̄_attn / 3"),
    FeatureSpec("factual_head_activation", _M, _SPEC, "float", "A_fact = 1 / (H̄_attn + ε),  ε = 1e-8"),
    FeatureSpec("reasoning_head_activation", _M, _SPEC, "float", "A_reason = H̄_attn / 3"),
    FeatureSpec("attention_entropy", _M, _SPEC, "float",
                "H̄_attn = (1/(LH)) Σ_ℓ Σ_h H_ℓ,h,  H_ℓ,h = −Σ_{i,j} A_ℓ,h(i,j) log A_ℓ,h(i,j)",
                note=_ATTN_NOTE),
    # D.2.2 circuit dynamics (4)
    FeatureSpec("effective_circuit_depth", _M, _CIRC, "float", "D = L (number of attention layers analysed)",
                proxy="\"Equal to the number of attention layers analyzed\": a constant per model."),
    FeatureSpec("circuit_complexity", _M, _CIRC, "float", "C = σ²_var · γ_norm,  σ²_var = v_L / v_1",
                note="v_ℓ = variance of all activations of h_ℓ (positions × hidden units); the paper calls σ²_var "
                     "\"activation variance growth\" without a formula: the last/first decoder-layer ratio here."),
    FeatureSpec("activation_flow_variance", _M, _CIRC, "float", "Var_ℓ(n_ℓ),  n_ℓ = (1/T) Σ_t ‖h_ℓ,t‖₂",
                note="\"Variance in activation magnitudes across layers\": population variance over decoder layers "
                     "of the mean token L2 norm."),
    FeatureSpec("causal_path_length", _M, _CIRC, "float", "= effective_circuit_depth = L",
                proxy="\"Currently equal to circuit depth\": a constant per model."),
    # D.2.3 intervention sensitivity (4)
    FeatureSpec("ablation_robustness", _M, _INTV, "float", "R_ablation = 1 − H̄_attn / 5",
                note="No component is ablated: the paper computes it from attention entropy."),
    FeatureSpec("critical_component_count", _M, _INTV, "int", "N_critical = max(1, N_spec)",
                proxy="\"Uses specialized head count as a proxy for critical components\" (appendix F.1)."),
    FeatureSpec("performance_degradation_slope", _M, _INTV, "float",
                "β_degrad = |σ_causal|,  σ_causal = std_ℓ(H̄_attn,ℓ / 10)",
                proxy=_ENTROPY_PROXY,
                note="Layer-wise causal effect estimates are the paper's E_direct terms H̄_attn,ℓ/10; population std."),
    FeatureSpec("intervention_sensitivity", _M, _INTV, "float", "S_interv = 1 − R_ablation",
                note="No intervention is run: the paper computes it from attention entropy."),
    # D.2.4 working memory (4)
    FeatureSpec("hidden_state_variance", _M, _WORK, "float", "(1/L) Σ_ℓ v_ℓ,  v_ℓ = Var_{t,d}(h_ℓ,t,d)",
                note="\"Variance in hidden state activations … across layers\": the mean over decoder layers of the "
                     "per-layer activation variance (residual stream before the final norm)."),
    FeatureSpec("norm_growth_trajectory", _M, _WORK, "float", "γ_norm = n_L / n_1",
                note="\"Growth pattern of activation norms\": ratio of the last to the first decoder layer's mean "
                     "token L2 norm."),
    FeatureSpec("working_memory_complexity", _M, _WORK, "float", "= state_rank_evolution",
                proxy="\"Currently uses rank evolution as a proxy for working memory complexity\" (appendix F.1)."),
    FeatureSpec("state_rank_evolution", _M, _WORK, "float",
                "R_evolution = r_L − r_1,  r_ℓ = exp(−Σ_k q_k log q_k),  q_k = s_k / Σ s  (SVD of h_ℓ, T × d)",
                note="Effective rank (Roy & Vetterli) of the layer's token × hidden matrix, last minus first "
                     "decoder layer; 0 for a one-token prompt."),
    # D.2.5 causal effects (4)
    FeatureSpec("direct_logit_attribution", _M, _CAUS, "float", "E_direct = (1/L) Σ_ℓ H̄_attn,ℓ / 10",
                proxy="\"Proxy for direct causal contribution\", computed from attention entropy (appendix F.1)."),
    FeatureSpec("indirect_effect_strength", _M, _CAUS, "float", "E_indirect = σ_causal", proxy=_ENTROPY_PROXY),
    FeatureSpec("causal_mediation_score", _M, _CAUS, "float", "M_causal = E_direct × E_indirect", proxy=_ENTROPY_PROXY),
    FeatureSpec("activation_patching_effect", _M, _CAUS, "float", "P_patch = E_direct",
                proxy="\"Computed from attention entropy, not from actual activation patching experiments.\""),
)
FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURES)
SURFACE_FEATURES = tuple(f.name for f in FEATURES if f.group == _S)
MECHANISTIC_FEATURES = tuple(f.name for f in FEATURES if f.group == _M)
FEATURE_SPECS: dict[str, FeatureSpec] = {f.name: f for f in FEATURES}

RDS_FEATURES: tuple[str, ...] = (
    "early_confidence",
    "max_confidence",
    "convergence_speed",
    "num_specialized_heads",
    "head_specialization_score",
)
"""Recall signatures named by the paper (§3.2, §4.1, §4.2): higher early confidence, high confidence, faster
convergence, more specialised heads, focused attention. RDS = sigmoid(mean of their training-set z-scores)."""
RCI_FEATURES: tuple[str, ...] = (
    "circuit_complexity",
    "activation_flow_variance",
    "hidden_state_variance",
    "reasoning_head_activation",
    "convergence_layer",
)
"""Reasoning signatures named by the paper (§3.2, §4.2): higher circuit complexity, higher activation flow
variance, hidden-state variance, distributed attention, later stabilisation. RCI = sigmoid(mean z-score)."""
RDS_FORMULA = (
    "RDS = sigmoid( mean_f∈R z_f ),  z_f = (x_f − μ_f)/σ_f over the training set,  R = " + ", ".join(RDS_FEATURES)
)
RCI_FORMULA = "RCI = sigmoid( mean_f∈C z_f ),  C = " + ", ".join(RCI_FEATURES)


# ----------------------------------------------------------------------------------------------------------
# One instrumented forward pass


@dataclass(frozen=True)
class RadarTrace:
    """What one forward pass over a prompt yields (all CPU numpy, float64 unless noted).

    Attributes:
        text: the analysed prompt text.
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


@dataclass(frozen=True)
class _ModelParts:
    layers: Sequence[torch.nn.Module]
    attention: list[torch.nn.Module]
    norm: torch.nn.Module
    lm_head: torch.nn.Module


def _first_attr(obj: Any, names: Sequence[str]) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _model_parts(model: torch.nn.Module) -> _ModelParts:
    """Decoder layers, their attention modules, the final norm and the unembedding of a Llama-like model.

    Llama/Mistral/Qwen/SmolLM: ``model.model.layers[ℓ].self_attn``, ``model.model.norm``, ``model.lm_head``.
    GPT-2-style names (``transformer.h``, ``ln_f``, ``attn``) are tried as well.

    Raises:
        ValueError: when one of the parts cannot be found.
    """
    base = None
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        try:
            base = get_decoder()
        except (AttributeError, NotImplementedError, TypeError):
            base = None
    if base is None or base is model:
        base = _first_attr(model, ("model", "transformer", "gpt_neox"))
    layers = _first_attr(base, ("layers", "h", "blocks")) if base is not None else None
    norm = _first_attr(base, ("norm", "ln_f", "final_layernorm", "final_layer_norm")) if base is not None else None
    lm_head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if layers is None or norm is None or lm_head is None or len(layers) == 0:
        raise ValueError(
            f"RADAR needs a decoder-only model with decoder layers, a final norm and an output embedding "
            f"(Llama-like: model.model.layers, model.model.norm, lm_head); {type(model).__name__} lacks "
            + ", ".join(n for n, v in (("layers", layers), ("final norm", norm), ("lm_head", lm_head)) if not v)
        )
    attention = []
    for i, layer in enumerate(layers):
        attn = _first_attr(layer, ("self_attn", "attn", "self_attention", "attention"))
        if attn is None:
            raise ValueError(f"Decoder layer {i} of {type(model).__name__} has no attention module RADAR can hook.")
        attention.append(attn)
    return _ModelParts(list(layers), attention, norm, lm_head)


class _AttentionEntropyHooks:
    """Context manager: forward hooks that reduce each layer's attention weights to per-head entropies.

    The hook receives ``(attn_output, attn_weights)`` from the attention module (eager attention returns the
    weights, shape ``(1, H, T, T)``), computes H_ℓ,h = −Σ_{i,j} A log A in float32 and drops the weights.
    Hooks are removed in ``__exit__`` whatever happens.
    """

    def __init__(self, modules: Sequence[torch.nn.Module]) -> None:
        self.modules = list(modules)
        self.head_entropy: list[np.ndarray | None] = [None] * len(self.modules)
        self._handles: list[Any] = []

    def _hook(self, index: int) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            weights = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else None
            if weights is None:
                return
            w = weights[0].float()  # (H, T, T)
            per_row = entropy(torch.log(w), dim=-1)  # (H, T): −Σ_j A log A, 0·log 0 = 0
            self.head_entropy[index] = per_row.double().sum(dim=-1).cpu().numpy()

        return hook

    def __enter__(self) -> _AttentionEntropyHooks:
        try:
            for i, module in enumerate(self.modules):
                self._handles.append(module.register_forward_hook(self._hook(i)))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


class _CaptureInput:
    """Context manager: a forward pre-hook keeping the input of one module (the final norm's input is the
    raw residual stream after the last decoder layer; transformers 5 replaces ``hidden_states[-1]`` by the
    normed ``last_hidden_state``)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.value: torch.Tensor | None = None
        self._handle: Any = None

    def __enter__(self) -> _CaptureInput:
        def pre_hook(module: torch.nn.Module, args: Any) -> None:
            if args and isinstance(args[0], torch.Tensor):
                self.value = args[0]

        self._handle = self.module.register_forward_pre_hook(pre_hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def effective_rank(matrix: torch.Tensor) -> float:
    """Roy & Vetterli effective rank exp(−Σ q_k log q_k), q_k = s_k / Σ s, of a 2-D matrix (float64 SVD).

    Returns 0 for an all-zero matrix.
    """
    if matrix.ndim != 2:
        raise ValueError(f"effective_rank needs a 2-D matrix, got shape {tuple(matrix.shape)}")
    s = torch.linalg.svdvals(matrix.double())
    total = float(s.sum())
    if total <= 0.0:
        return 0.0
    q = s / total
    q = q[q > 0]
    return float(torch.exp(-(q * q.log()).sum()))


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


def radar_prompt(query: str, context: str | None = None) -> str:
    """The text RADAR analyses for a query: the query alone (default: the model's own recall vs reasoning),
    or the context, a blank line and the query."""
    query = (query or "").strip()
    if context is not None and context.strip():
        return f"{context.strip()}\n\n{query}"
    return query


def trace_prompt(handle: ModelHandle, text: str) -> RadarTrace:
    """Run the one instrumented forward pass over a prompt and reduce everything RADAR needs.

    ``output_hidden_states=True`` gives the residual stream after each decoder layer; the final norm's input
    (captured by a pre-hook) replaces the last one, which transformers returns already normed. Attention
    weights are reduced to per-head entropies inside forward hooks (``output_attentions`` is not requested,
    so no stack of attention maps is kept). The logit lens is ``lm_head(final_norm(h_ℓ))`` at the last prompt
    position; for the last layer it equals the model's output logits.

    Args:
        handle: the shared model (eager attention is required for the attention weights).
        text: the prompt (see :func:`radar_prompt`).

    Returns:
        A :class:`RadarTrace`.

    Raises:
        ValueError: bad prompt (see :func:`encode_radar_prompt`), an unsupported architecture, or attention
            weights that the model does not return (SDPA/flash attention).
    """
    ids = encode_radar_prompt(handle, text)
    parts = _model_parts(handle.model)
    n_layers = len(parts.layers)
    if n_layers < 2:
        raise ValueError(f"RADAR's trajectory features need at least 2 decoder layers; this model has {n_layers}.")
    input_ids = torch.tensor([ids], dtype=torch.long, device=handle.device)
    with handle.lock, torch.inference_mode():
        with _AttentionEntropyHooks(parts.attention) as attn, _CaptureInput(parts.norm) as final_in:
            out = handle.model(input_ids=input_ids, output_hidden_states=True, use_cache=False)
        hidden = out.hidden_states
        if hidden is None or len(hidden) != n_layers + 1:
            raise ValueError(
                f"Expected {n_layers + 1} hidden states (embeddings + one per decoder layer), got "
                f"{0 if hidden is None else len(hidden)}."
            )
        if final_in.value is None:
            raise ValueError("The final norm was not called during the forward pass; cannot apply the logit lens.")
        layers = [hidden[i][0] for i in range(1, n_layers)] + [final_in.value[0]]  # each (T, d)
        last = torch.stack([h[-1] for h in layers])  # (L, d)
        lens_logits = parts.lm_head(parts.norm(last))  # (L, V)
        logp = log_probs(lens_logits)
        confidence = logp.max(dim=-1).values.exp().double().cpu().numpy()
        top_ids = logp.argmax(dim=-1).cpu().tolist()
        lens_entropy = entropy(logp).double().cpu().numpy()
        variance = np.array([float(h.double().var(unbiased=False)) for h in layers])
        norms = np.array([float(h.double().norm(dim=-1).mean()) for h in layers])
        ranks = np.array([effective_rank(h) for h in layers])
        del out, hidden, layers
    missing = [i for i, e in enumerate(attn.head_entropy) if e is None]
    if missing:
        raise ValueError(
            "The model did not return attention weights (layers " + ", ".join(map(str, missing[:5]))
            + ("…" if len(missing) > 5 else "") + "). Load it with attn_implementation='eager'."
        )
    head_entropy = np.stack([np.asarray(e, dtype=np.float64) for e in attn.head_entropy])
    return RadarTrace(
        text=text,
        token_ids=[int(i) for i in ids],
        tokens=handle.decode_tokens(ids),
        confidence=confidence,
        entropy=lens_entropy,
        top_token_ids=[int(i) for i in top_ids],
        top_tokens=handle.decode_tokens(top_ids),
        head_entropy=head_entropy,
        layer_variance=variance,
        layer_norm=norms,
        layer_rank=ranks,
    )


# ----------------------------------------------------------------------------------------------------------
# Features from a trace (pure numpy)


def _sample_std(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if x.size > 1 else 0.0


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b > 0 else 0.0


def surface_features(confidence: np.ndarray, layer_entropy: np.ndarray) -> dict[str, float]:
    """The 16 surface features of appendix D.1 from the trajectories c_ℓ and H_ℓ (ℓ = 1 … L).

    Args:
        confidence: c_ℓ, shape ``(L,)``, L ≥ 2.
        layer_entropy: H_ℓ in nats, shape ``(L,)``.
    """
    c = np.asarray(confidence, dtype=np.float64)
    h = np.asarray(layer_entropy, dtype=np.float64)
    if c.ndim != 1 or h.shape != c.shape:
        raise ValueError(f"confidence and entropy must be 1-D of equal length, got {c.shape} and {h.shape}")
    n = c.size
    if n < 2:
        raise ValueError(f"need at least 2 layers, got {n}")
    c_mean, c_std = float(c.mean()), _sample_std(c)
    l_star = int(np.argmax(c))
    layers = np.arange(1, n + 1, dtype=np.float64)
    l_centered = layers - (n + 1) / 2.0
    slope = float((l_centered * (c - c_mean)).sum() / (l_centered**2).sum())
    dc = np.diff(c)
    oscillations = int(np.sum(dc[:-1] * dc[1:] < 0)) if dc.size > 1 else 0
    half = n // 2
    return {
        "mean_confidence": c_mean,
        "std_confidence": c_std,
        "max_confidence": float(c.max()),
        "min_confidence": float(c.min()),
        "confidence_range": float(c.max() - c.min()),
        "convergence_layer": float(l_star),
        "convergence_speed": 1.0 / (l_star + 1),
        "confidence_slope": slope,
        "oscillation_count": float(oscillations),
        "early_confidence": float(c[:half].mean()),
        "late_confidence": float(c[half:].mean()),
        "prediction_stability": 1.0 / (c_std + EPS),
        "mean_entropy": float(h.mean()),
        "entropy_change": float(h[-1] - h[0]),
        "information_gain": float(h[0] - h[-1]),
        "layer_consistency": 1.0 / (_sample_std(h) + EPS),
    }


def mechanistic_features(
    head_entropy: np.ndarray, layer_variance: np.ndarray, layer_norm: np.ndarray, layer_rank: np.ndarray
) -> dict[str, float]:
    """The 21 mechanistic features of appendix D.2.

    Args:
        head_entropy: H_ℓ,h in nats, shape ``(L, H)``.
        layer_variance, layer_norm, layer_rank: v_ℓ, n_ℓ, r_ℓ, shape ``(L,)`` (decoder layers 1 … L).
    """
    he = np.asarray(head_entropy, dtype=np.float64)
    v = np.asarray(layer_variance, dtype=np.float64)
    nrm = np.asarray(layer_norm, dtype=np.float64)
    r = np.asarray(layer_rank, dtype=np.float64)
    if he.ndim != 2 or he.shape[0] < 1 or he.shape[1] < 1:
        raise ValueError(f"head_entropy must have shape (L, H), got {he.shape}")
    n_layers = he.shape[0]
    for name, arr in (("layer_variance", v), ("layer_norm", nrm), ("layer_rank", r)):
        if arr.shape != (n_layers,):
            raise ValueError(f"{name} must have shape ({n_layers},), got {arr.shape}")
    h_attn = float(he.mean())
    n_spec = int(np.sum(he < SPECIALIZATION_TAU))
    per_layer_effect = he.mean(axis=1) / 10.0  # E_direct terms, one per layer
    sigma_causal = float(np.std(per_layer_effect))
    e_direct = float(per_layer_effect.mean())
    r_ablation = 1.0 - h_attn / 5.0
    variance_growth = _ratio(v[-1], v[0])
    norm_growth = _ratio(nrm[-1], nrm[0])
    rank_evolution = float(r[-1] - r[0])
    depth = float(n_layers)
    return {
        "num_specialized_heads": float(n_spec),
        "head_specialization_score": 1.0 - h_attn / 3.0,
        "factual_head_activation": 1.0 / (h_attn + EPS),
        "reasoning_head_activation": h_attn / 3.0,
        "attention_entropy": h_attn,
        "effective_circuit_depth": depth,
        "circuit_complexity": variance_growth * norm_growth,
        "activation_flow_variance": float(np.var(nrm)),
        "causal_path_length": depth,
        "ablation_robustness": r_ablation,
        "critical_component_count": float(max(1, n_spec)),
        "performance_degradation_slope": abs(sigma_causal),
        "intervention_sensitivity": 1.0 - r_ablation,
        "hidden_state_variance": float(v.mean()),
        "norm_growth_trajectory": norm_growth,
        "working_memory_complexity": rank_evolution,
        "state_rank_evolution": rank_evolution,
        "direct_logit_attribution": e_direct,
        "indirect_effect_strength": sigma_causal,
        "causal_mediation_score": e_direct * sigma_causal,
        "activation_patching_effect": e_direct,
    }


def features_from_trace(trace: RadarTrace) -> dict[str, float]:
    """All 37 features, in :data:`FEATURE_NAMES` order (surface first), as plain floats."""
    values = {
        **surface_features(trace.confidence, trace.entropy),
        **mechanistic_features(trace.head_entropy, trace.layer_variance, trace.layer_norm, trace.layer_rank),
    }
    out = {name: float(values[name]) for name in FEATURE_NAMES}
    bad = [k for k, v in out.items() if not math.isfinite(v)]
    if bad:
        raise ValueError(f"Non-finite RADAR feature(s) {', '.join(bad)} for {trace.text[:60]!r}")
    return out


def feature_vector(features: dict[str, float]) -> np.ndarray:
    """The 37 features as a float64 vector in :data:`FEATURE_NAMES` order (appendix G: f ∈ R³⁷)."""
    missing = [n for n in FEATURE_NAMES if n not in features]
    if missing:
        raise ValueError(f"missing RADAR feature(s): {', '.join(missing)}")
    return np.array([features[n] for n in FEATURE_NAMES], dtype=np.float64)


def extract_features(handle: ModelHandle, text: str) -> tuple[dict[str, float], RadarTrace]:
    """One forward pass → (the 37 features, the trace they come from)."""
    trace = trace_prompt(handle, text)
    return features_from_trace(trace), trace


# ----------------------------------------------------------------------------------------------------------
# The bundled prompt sets and feature tables


@dataclass(frozen=True)
class RadarPrompt:
    """One labelled prompt of the bundled sets."""

    id: str
    prompt: str
    category: str
    label: str
    split: str


def _read_set(path: Path, split: str, categories: Sequence[str]) -> list[RadarPrompt]:
    rows = list(csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8"))))
    out = []
    for number, row in enumerate(rows, start=1):
        missing = [k for k in ("id", "prompt", "category", "label") if not (row.get(k) or "").strip()]
        if missing:
            raise ValueError(f"{path}: row {number} lacks {', '.join(missing)}")
        if row["label"] not in LABELS:
            raise ValueError(f"{path}: row {number} has label {row['label']!r}, not one of {', '.join(LABELS)}")
        if row["category"] not in categories:
            raise ValueError(
                f"{path}: row {number} has category {row['category']!r}, not one of {', '.join(categories)}"
            )
        out.append(RadarPrompt(row["id"].strip(), row["prompt"].strip(), row["category"], row["label"], split))
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate ids")
    return out


def load_prompt_sets(train_path: Path = TRAIN_PATH, test_path: Path = TEST_PATH) -> list[RadarPrompt]:
    """The bundled training (30) and test (100) prompts, training first."""
    return _read_set(train_path, TRAIN, TRAIN_CATEGORIES) + _read_set(test_path, TEST, TEST_CATEGORIES)


def prompts_signature(prompts: Sequence[RadarPrompt]) -> str:
    """A short hash of the prompt sets (ids, text, categories, labels): cached features must match it."""
    payload = json.dumps([[p.split, p.id, p.prompt, p.category, p.label] for p in prompts], ensure_ascii=False)
    return hashlib.sha1(payload.encode("utf-8")).hexdigest()[:16]


@dataclass
class FeatureTable:
    """Features of the bundled prompts for one model.

    Attributes:
        prompts: the prompts, row by row.
        X: shape ``(n, 37)``, float64, columns in :data:`FEATURE_NAMES` order.
        meta: model name/source, layers, heads, dtype, device, ``feature_version``, ``prompts_signature``.
    """

    prompts: list[RadarPrompt]
    X: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.X = np.asarray(self.X, dtype=np.float64)
        if self.X.shape != (len(self.prompts), len(FEATURE_NAMES)):
            raise ValueError(
                f"feature matrix has shape {self.X.shape}, expected ({len(self.prompts)}, {len(FEATURE_NAMES)})"
            )

    def split(self, split: str) -> tuple[list[RadarPrompt], np.ndarray]:
        rows = [i for i, p in enumerate(self.prompts) if p.split == split]
        return [self.prompts[i] for i in rows], self.X[rows]

    def labels(self, split: str) -> np.ndarray:
        """1 = recall, 0 = reasoning (the paper's y) for the rows of ``split``."""
        return np.array([1 if p.label == RECALL else 0 for p in self.prompts if p.split == split], dtype=np.int64)

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["split", "id", "category", "label", *FEATURE_NAMES])
        for p, row in zip(self.prompts, self.X, strict=True):
            writer.writerow([p.split, p.id, p.category, p.label, *(repr(float(v)) for v in row)])
        return buf.getvalue()


def model_slug(handle: ModelHandle) -> str:
    """A file-name-safe key for a model: ``embedded`` or the sanitised name plus a short hash of its source."""
    if handle.info.name == EMBEDDED_NAME:
        return EMBEDDED_MODEL
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", handle.info.name).strip("._")[:60] or "model"
    digest = hashlib.sha1(f"{handle.info.name}|{handle.info.source}".encode()).hexdigest()[:8]
    return f"{safe}-{digest}"


def feature_cache_path(handle: ModelHandle) -> Path:
    """Where this model's features are cached on disk (CSV; its metadata sits next to it as JSON)."""
    return cache_dir() / "radar" / f"{model_slug(handle)}.csv"


def _meta_path(csv_path: Path) -> Path:
    return csv_path.with_suffix(".json")


def _expected_meta(handle: ModelHandle, prompts: Sequence[RadarPrompt]) -> dict[str, Any]:
    info = handle.info
    return {
        "model": info.name,
        "source": info.source,
        "n_layers": info.n_layers,
        "n_heads": info.n_heads,
        "dtype": info.dtype,
        "device": info.device,
        "feature_version": FEATURE_VERSION,
        "prompts_signature": prompts_signature(prompts),
        "feature_names": list(FEATURE_NAMES),
        "prompt_format": "raw text, tokenizer special tokens, no chat template",
    }


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_feature_table(table: FeatureTable, path: Path) -> None:
    """Write the table as CSV and its metadata as JSON next to it (both atomically)."""
    path = Path(path)
    _atomic_write(path, table.to_csv())
    _atomic_write(_meta_path(path), json.dumps(table.meta, indent=2, ensure_ascii=False) + "\n")


def read_feature_table(path: Path, prompts: Sequence[RadarPrompt]) -> FeatureTable:
    """Read a feature CSV (+ JSON metadata) and align it with ``prompts`` by (split, id).

    Raises:
        ValueError: unreadable file, different feature columns, or rows that do not match the prompts.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        meta = json.loads(_meta_path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"Cannot read RADAR features from {path}: {exc}") from exc
    reader = csv.reader(io.StringIO(text))
    header = next(reader, [])
    if header[4:] != list(FEATURE_NAMES):
        raise ValueError(f"{path}: the feature columns differ from the 37 features of this version")
    rows = {(r[0], r[1]): np.array([float(v) for v in r[4:]], dtype=np.float64) for r in reader if r}
    missing = [p.id for p in prompts if (p.split, p.id) not in rows]
    if missing or len(rows) != len(prompts):
        raise ValueError(f"{path}: rows do not match the bundled prompt sets ({len(missing)} missing)")
    X = np.stack([rows[(p.split, p.id)] for p in prompts])
    return FeatureTable(list(prompts), X, meta)


def _meta_matches(meta: dict[str, Any], expected: dict[str, Any]) -> bool:
    keys = ("model", "n_layers", "n_heads", "feature_version", "prompts_signature", "feature_names")
    return all(meta.get(k) == expected.get(k) for k in keys)


def cached_feature_table(handle: ModelHandle, prompts: Sequence[RadarPrompt] | None = None) -> FeatureTable | None:
    """This model's features of the bundled sets if they are on disk and current, else ``None``.

    The embedded model's ship in ``assets/radar/features``; any model's are looked up in the user cache.
    """
    prompts = list(prompts) if prompts is not None else load_prompt_sets()
    expected = _expected_meta(handle, prompts)
    candidates = [EMBEDDED_FEATURES_PATH] if model_slug(handle) == EMBEDDED_MODEL else []
    candidates.append(feature_cache_path(handle))
    for path in candidates:
        if not path.is_file():
            continue
        try:
            table = read_feature_table(path, prompts)
        except ValueError as exc:
            logger.warning("Ignoring RADAR feature cache %s: %s", path, exc)
            continue
        if _meta_matches(table.meta, expected):
            return table
        logger.info("RADAR feature cache %s is stale (model, version or prompt sets changed)", path)
    return None


Progress = Callable[[int, int], None]


def extract_feature_table(
    handle: ModelHandle, prompts: Sequence[RadarPrompt] | None = None, progress: Progress | None = None
) -> FeatureTable:
    """Extract the 37 features of every prompt (one forward pass each; ``progress(done, total)``)."""
    prompts = list(prompts) if prompts is not None else load_prompt_sets()
    rows = []
    for i, p in enumerate(prompts):
        features, _ = extract_features(handle, p.prompt)
        rows.append(feature_vector(features))
        if progress is not None:
            progress(i + 1, len(prompts))
    return FeatureTable(list(prompts), np.stack(rows), _expected_meta(handle, prompts))


def feature_table_for(
    handle: ModelHandle, *, compute: bool = True, progress: Progress | None = None, path: Path | None = None
) -> FeatureTable | None:
    """The model's features of the bundled sets: from disk when current, else extracted and cached.

    Args:
        compute: extract (130 forward passes) when nothing is cached; ``False`` returns ``None`` instead.
        progress: ``progress(done, total)`` during extraction.
        path: where to cache (default :func:`feature_cache_path`).
    """
    prompts = load_prompt_sets()
    table = cached_feature_table(handle, prompts)
    if table is not None or not compute:
        return table
    logger.info("Extracting RADAR features of %d prompts for %s", len(prompts), handle.info.name)
    table = extract_feature_table(handle, prompts, progress)
    save_feature_table(table, path or feature_cache_path(handle))
    return table


# ----------------------------------------------------------------------------------------------------------
# The ensemble, RDS and RCI


def build_ensemble(random_state: int = 0) -> Any:
    """StandardScaler + soft-vote ensemble of RF, GB, SVM and LR (§2.3), as a scikit-learn Pipeline.

    The SVM's probabilities come from Platt scaling over 5 stratified folds, as ``SVC(probability=True)``
    computes them; scikit-learn 1.9 deprecates that flag in favour of exactly this
    ``CalibratedClassifierCV(SVC(), method="sigmoid", ensemble=False)``.
    """
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier, VotingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    voter = VotingClassifier(
        estimators=[
            ("random_forest", RandomForestClassifier(n_estimators=200, random_state=random_state)),
            ("gradient_boosting", GradientBoostingClassifier(random_state=random_state)),
            ("svm", CalibratedClassifierCV(SVC(kernel="rbf", random_state=random_state), method="sigmoid",
                                           cv=5, ensemble=False)),
            ("logistic_regression", LogisticRegression(max_iter=5000)),
        ],
        voting="soft",
    )
    return Pipeline([("scaler", StandardScaler()), ("ensemble", voter)])


ESTIMATOR_TITLES = {
    "random_forest": "Random forest",
    "gradient_boosting": "Gradient boosting",
    "svm": "SVM (Platt-scaled)",
    "logistic_regression": "Logistic regression",
}


def _sigmoid(x: float) -> float:
    return float(1.0 / (1.0 + math.exp(-x))) if x >= 0 else float(math.exp(x) / (1.0 + math.exp(x)))


@dataclass(frozen=True)
class RadarPrediction:
    """The ensemble's reading of one prompt (§2.3).

    Attributes:
        p_recall: p̄ = (1/M) Σ_j p_j, the mean of the four classifiers' recall probabilities (soft vote).
        label: the paper's ŷ = 1[(1/M) Σ_j ŷ_j > 1/2] — a strict majority of hard votes (2–2 → reasoning).
        confidence: p̄ if ŷ = recall else 1 − p̄ (the paper's "conf").
        soft_label: recall iff p̄ > 1/2 (scikit-learn's soft vote).
        probabilities: each classifier's p_j.
        votes: each classifier's hard label ŷ_j (1 = recall).
        rds, rci: Recall Detection Score and Reasoning Complexity Index (see :data:`RDS_FORMULA`).
    """

    p_recall: float
    label: str
    confidence: float
    soft_label: str
    probabilities: dict[str, float]
    votes: dict[str, int]
    rds: float
    rci: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RadarClassifier:
    """The fitted ensemble plus the training-set statistics RDS and RCI are normalised with."""

    def __init__(self, pipeline: Any, mean: np.ndarray, std: np.ndarray, n_train: int) -> None:
        self.pipeline = pipeline
        self.mean = mean
        self.std = std
        self.n_train = n_train

    @classmethod
    def fit(cls, X: np.ndarray, y: np.ndarray, random_state: int = 0) -> RadarClassifier:
        """Fit on features ``X`` (n, 37) and labels ``y`` (1 = recall, 0 = reasoning)."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.int64)
        if X.ndim != 2 or X.shape[1] != len(FEATURE_NAMES):
            raise ValueError(f"X must have shape (n, {len(FEATURE_NAMES)}), got {X.shape}")
        if y.shape != (X.shape[0],) or set(np.unique(y).tolist()) != {0, 1}:
            raise ValueError("y must hold one 0/1 label per row, with both classes present")
        if int(np.bincount(y).min()) < 5:
            raise ValueError("need at least 5 examples of each class (the SVM's Platt scaling uses 5 folds)")
        if not np.isfinite(X).all():
            raise ValueError("X holds non-finite values")
        pipeline = build_ensemble(random_state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=UserWarning)
            pipeline.fit(X, y)
        std = X.std(axis=0)
        return cls(pipeline, X.mean(axis=0), np.where(std > 0, std, 1.0), int(X.shape[0]))

    @classmethod
    def from_table(cls, table: FeatureTable, random_state: int = 0) -> RadarClassifier:
        """Fit on the training rows of a :class:`FeatureTable`."""
        _, X = table.split(TRAIN)
        return cls.fit(X, table.labels(TRAIN), random_state)

    def p_recall(self, X: np.ndarray) -> np.ndarray:
        """p̄ for each row of ``X`` (n, 37)."""
        return self.pipeline.predict_proba(np.atleast_2d(X))[:, 1]

    def _z(self, X: np.ndarray, names: Sequence[str]) -> np.ndarray:
        idx = [FEATURE_NAMES.index(n) for n in names]
        return (np.atleast_2d(X)[:, idx] - self.mean[idx]) / self.std[idx]

    def rds(self, X: np.ndarray) -> np.ndarray:
        """Recall Detection Score per row: sigmoid of the mean training-set z-score of :data:`RDS_FEATURES`."""
        return np.array([_sigmoid(float(z)) for z in self._z(X, RDS_FEATURES).mean(axis=1)])

    def rci(self, X: np.ndarray) -> np.ndarray:
        """Reasoning Complexity Index per row: the same over :data:`RCI_FEATURES`."""
        return np.array([_sigmoid(float(z)) for z in self._z(X, RCI_FEATURES).mean(axis=1)])

    def predict(self, X: np.ndarray) -> list[RadarPrediction]:
        """The paper's prediction for each row of ``X`` (n, 37)."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        scaled = self.pipeline[:-1].transform(X)
        voter = self.pipeline[-1]
        names = [name for name, _ in voter.estimators]
        probs = np.stack([est.predict_proba(scaled)[:, 1] for est in voter.estimators_], axis=1)  # (n, M)
        votes = np.stack([est.predict(scaled) for est in voter.estimators_], axis=1).astype(np.int64)
        p_bar = probs.mean(axis=1)
        rds, rci = self.rds(X), self.rci(X)
        out = []
        for i in range(X.shape[0]):
            recall = bool(votes[i].mean() > 0.5)
            out.append(
                RadarPrediction(
                    p_recall=float(p_bar[i]),
                    label=RECALL if recall else REASONING,
                    confidence=float(p_bar[i] if recall else 1.0 - p_bar[i]),
                    soft_label=RECALL if p_bar[i] > 0.5 else REASONING,
                    probabilities={n: float(p) for n, p in zip(names, probs[i], strict=True)},
                    votes={n: int(v) for n, v in zip(names, votes[i], strict=True)},
                    rds=float(rds[i]),
                    rci=float(rci[i]),
                )
            )
        return out


def cross_validated_accuracy(X: np.ndarray, y: np.ndarray, folds: int = 5, random_state: int = 0) -> float:
    """Stratified k-fold accuracy of the soft-vote ensemble on the training set (the paper's 96.7 %)."""
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=random_state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        scores = cross_val_score(build_ensemble(random_state), X, y, cv=cv, scoring="accuracy")
    return float(np.mean(scores))


def prompt_token_counts(handle: ModelHandle, prompts: Sequence[RadarPrompt]) -> list[int]:
    """The number of tokens of each prompt as RADAR reads it (tokenisation only, no model call)."""
    return [len(encode_radar_prompt(handle, p.prompt)) for p in prompts]


def length_baseline(table: FeatureTable, token_counts: Sequence[int], random_state: int = 0) -> np.ndarray:
    """A control the paper does not report: logistic regression on log(prompt length) alone, trained on the
    same training rows; returns its 0/1 (1 = recall) predictions for the test rows.

    Several RADAR features grow with the prompt length by construction (the attention entropy sums over all
    query positions), so this shows how much of the accuracy the length alone explains.
    """
    from sklearn.linear_model import LogisticRegression

    counts = np.asarray(token_counts, dtype=np.float64)
    if counts.shape != (len(table.prompts),) or (counts < 1).any():
        raise ValueError(f"need one positive token count per prompt ({len(table.prompts)}), got shape {counts.shape}")
    is_train = np.array([p.split == TRAIN for p in table.prompts])
    logt = np.log(counts)[:, None]
    model = LogisticRegression(random_state=random_state).fit(logt[is_train], table.labels(TRAIN))
    return model.predict(logt[~is_train]).astype(np.int64)


def evaluate_table(
    table: FeatureTable, random_state: int = 0, cv: bool = True, token_counts: Sequence[int] | None = None
) -> dict[str, Any]:
    """Train on the table's training rows, evaluate on its test rows, per category, next to the paper.

    Args:
        token_counts: the prompts' lengths in tokens, row by row; when given, the report adds the accuracy of
            :func:`length_baseline` (``length_accuracy``) everywhere.

    Returns:
        ``{"categories": [{category, title, n, correct, accuracy, soft_accuracy, length_accuracy, paper}],
        "overall", "recall_tasks", "reasoning_tasks", "train_cv", "rds_mean", "rows": [...]}`` — accuracies
        use the paper's hard-majority label; ``soft_accuracy`` uses p̄ > 1/2.
    """
    clf = RadarClassifier.from_table(table, random_state)
    prompts, X = table.split(TEST)
    if not prompts:
        raise ValueError("The feature table has no test rows.")
    preds = clf.predict(X)
    baseline = length_baseline(table, token_counts, random_state) if token_counts is not None else None
    test_counts = (
        [int(n) for n, p in zip(token_counts, table.prompts, strict=True) if p.split == TEST]
        if token_counts is not None else [None] * len(prompts)
    )
    rows = [
        {
            "id": p.id,
            "prompt": p.prompt,
            "category": p.category,
            "label": p.label,
            "predicted": pr.label,
            "correct": pr.label == p.label,
            "soft_correct": pr.soft_label == p.label,
            "p_recall": pr.p_recall,
            "rds": pr.rds,
            "rci": pr.rci,
            "n_tokens": test_counts[i],
            "length_correct": None if baseline is None else bool((baseline[i] == 1) == (p.label == RECALL)),
        }
        for i, (p, pr) in enumerate(zip(prompts, preds, strict=True))
    ]

    def summary(selected: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(selected)
        correct = sum(r["correct"] for r in selected)
        return {
            "n": n,
            "correct": int(correct),
            "accuracy": correct / n if n else None,
            "soft_accuracy": sum(r["soft_correct"] for r in selected) / n if n else None,
            "length_accuracy": (sum(r["length_correct"] for r in selected) / n
                                if n and baseline is not None else None),
        }

    categories = []
    for cat in TEST_CATEGORIES:
        selected = [r for r in rows if r["category"] == cat]
        categories.append({"category": cat, "title": CATEGORY_TITLES[cat], **summary(selected),
                           "paper": PAPER_RESULTS[cat]})
    rds_mean: dict[str, float | None] = {}
    for lab in LABELS:
        values = [r["rds"] for r in rows if r["label"] == lab]
        rds_mean[lab] = float(np.mean(values)) if values else None
    _, X_train = table.split(TRAIN)
    return {
        "model": table.meta.get("model"),
        "categories": categories,
        "overall": {**summary(rows), "paper": PAPER_RESULTS["overall"]},
        "recall_tasks": {**summary([r for r in rows if r["label"] == RECALL]), "paper": PAPER_RESULTS["recall_tasks"]},
        "reasoning_tasks": {**summary([r for r in rows if r["label"] == REASONING]),
                            "paper": PAPER_RESULTS["reasoning_tasks"]},
        "train_cv": {"accuracy": cross_validated_accuracy(X_train, table.labels(TRAIN), random_state=random_state)
                     if cv else None, "paper": PAPER_RESULTS["train_cv"]},
        "rds_mean": {"recall": rds_mean[RECALL], "reasoning": rds_mean[REASONING],
                     "paper_recall": PAPER_RESULTS["rds_recall"], "paper_reasoning": PAPER_RESULTS["rds_reasoning"]},
        "rows": rows,
    }


# ----------------------------------------------------------------------------------------------------------
# One prompt, end to end, and the detector


@dataclass(frozen=True)
class RadarAnalysis:
    """Everything the RADAR page shows for one prompt."""

    model: str
    text: str
    features: dict[str, float]
    trace: RadarTrace
    prediction: RadarPrediction | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "text": self.text,
            "features": dict(self.features),
            "feature_specs": [asdict(f) for f in FEATURES],
            "trace": self.trace.to_dict(),
            "prediction": None if self.prediction is None else self.prediction.to_dict(),
            "rds_formula": RDS_FORMULA,
            "rci_formula": RCI_FORMULA,
            "feature_version": FEATURE_VERSION,
        }


_CLASSIFIERS: dict[tuple[str, str], RadarClassifier] = {}
_CLASSIFIERS_LOCK = threading.Lock()


def classifier_for(
    handle: ModelHandle, *, compute: bool = True, progress: Progress | None = None
) -> RadarClassifier | None:
    """The ensemble for this model, rebuilt from its cached features (extracting them first if needed and
    ``compute``); kept in memory per model and feature signature."""
    table = feature_table_for(handle, compute=compute, progress=progress)
    if table is None:
        return None
    return classifier_from_table(table)


def classifier_from_table(table: FeatureTable) -> RadarClassifier:
    """The ensemble fitted on a table's training rows, memoised per (model, content hash)."""
    digest = hashlib.sha1(np.ascontiguousarray(table.X).tobytes()).hexdigest()[:16]
    key = (str(table.meta.get("model")), digest)
    with _CLASSIFIERS_LOCK:
        clf = _CLASSIFIERS.get(key)
    if clf is None:
        clf = RadarClassifier.from_table(table)
        with _CLASSIFIERS_LOCK:
            _CLASSIFIERS[key] = clf
    return clf


def analyse_prompt(handle: ModelHandle, text: str, classifier: RadarClassifier | None = None) -> RadarAnalysis:
    """Features, trajectories and (when a classifier is given) the prediction for one prompt."""
    features, trace = extract_features(handle, text)
    prediction = classifier.predict(feature_vector(features)[None, :])[0] if classifier is not None else None
    return RadarAnalysis(handle.info.name, text, features, trace, prediction)
