"""RADAR's feature maths (appendix D): trajectories and per-layer statistics in, the 37 features out.

Small and pure: arrays or tensors in, floats or arrays out; no model, no IO. The instrumented forward pass
that produces the inputs lives in :mod:`core.methods.radar.trace`.

Notation (appendix D): L decoder layers ℓ = 1 … L, H heads, T prompt tokens, d hidden units.

* c_ℓ, H_ℓ — confidence and entropy (nats) of the logit-lens distribution at the last prompt position;
* H_ℓ,h — attention entropy of head h, summed over query positions: −Σ_{i,j} A log A (nats);
* v_ℓ, n_ℓ, r_ℓ — variance, mean token L2 norm and effective rank of the residual stream after layer ℓ.
"""

from __future__ import annotations

import numpy as np
import torch

from core.maths.divergence import entropy
from core.methods.radar.features import EPS, SPECIALIZATION_TAU


def effective_rank(matrix: torch.Tensor) -> float:
    """Roy & Vetterli effective rank exp(−Σ q_k log q_k), q_k = s_k / Σ s, of a 2-D matrix (float64 SVD).

    Args:
        matrix: shape ``(T, d)``.

    Returns:
        The effective rank, in ``[1, min(T, d)]``; 0 for an all-zero matrix.

    Raises:
        ValueError: when ``matrix`` is not 2-D.
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


def head_entropies(weights: torch.Tensor) -> np.ndarray:
    """H_ℓ,h = −Σ_{i,j} A_h(i, j) log A_h(i, j) of one layer's attention weights (appendix D.2.1), in nats.

    Args:
        weights: the layer's attention weights, shape ``(H, T_q, T_k)``; each row sums to 1.

    Returns:
        float64 array of shape ``(H,)``: each head's row entropies (0·log 0 = 0, float32) summed over the
        query positions.

    Raises:
        ValueError: when ``weights`` is not 3-D.
    """
    if weights.ndim != 3:
        raise ValueError(f"attention weights must have shape (H, T_q, T_k), got {tuple(weights.shape)}")
    per_row = entropy(torch.log(weights.float()), dim=-1)  # (H, T_q)
    return per_row.double().sum(dim=-1).cpu().numpy()


def residual_statistics(hidden: torch.Tensor) -> tuple[float, float, float]:
    """v_ℓ, n_ℓ, r_ℓ of one layer's residual stream (appendix D.2.2 and D.2.4), float64.

    Args:
        hidden: the residual stream after one decoder layer, shape ``(T, d)``.

    Returns:
        ``(variance over all T × d activations, mean over positions of the L2 norm, effective rank)``.

    Raises:
        ValueError: when ``hidden`` is not 2-D.
    """
    if hidden.ndim != 2:
        raise ValueError(f"hidden states must have shape (T, d), got {tuple(hidden.shape)}")
    h = hidden.double()
    return float(h.var(unbiased=False)), float(h.norm(dim=-1).mean()), effective_rank(h)


def _sample_std(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1)) if x.size > 1 else 0.0


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b > 0 else 0.0


def surface_features(confidence: np.ndarray, layer_entropy: np.ndarray) -> dict[str, float]:
    """The 16 surface features of appendix D.1 from the trajectories c_ℓ and H_ℓ (ℓ = 1 … L).

    Args:
        confidence: c_ℓ, shape ``(L,)``, L ≥ 2.
        layer_entropy: H_ℓ in nats, shape ``(L,)``.

    Returns:
        The features in appendix D.1 order.

    Raises:
        ValueError: shapes that differ, are not 1-D, or hold fewer than 2 layers.
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


def attention_specialization(head_entropy: np.ndarray, tau: float = SPECIALIZATION_TAU) -> dict[str, float]:
    """The five attention-specialization features of appendix D.2.1 from a ``(L, H)`` entropy map (nats).

    With H̄ = mean_{ℓ,h} H_ℓ,h: ``num_specialized_heads = Σ 1[H_ℓ,h < τ]``, ``head_specialization_score =
    1 − H̄/3``, ``factual_head_activation = 1/(H̄ + ε)``, ``reasoning_head_activation = H̄/3``,
    ``attention_entropy = H̄``. The constants 3 and ε = 1e-8 are the paper's.

    Raises:
        ValueError: when ``head_entropy`` is not a non-empty 2-D array.
    """
    he = np.asarray(head_entropy, dtype=np.float64)
    if he.ndim != 2 or he.shape[0] < 1 or he.shape[1] < 1:
        raise ValueError(f"head_entropy must have shape (L, H), got {he.shape}")
    h_attn = float(he.mean())
    return {
        "num_specialized_heads": float(np.sum(he < float(tau))),
        "head_specialization_score": 1.0 - h_attn / 3.0,
        "factual_head_activation": 1.0 / (h_attn + EPS),
        "reasoning_head_activation": h_attn / 3.0,
        "attention_entropy": h_attn,
    }


def mechanistic_features(
    head_entropy: np.ndarray, layer_variance: np.ndarray, layer_norm: np.ndarray, layer_rank: np.ndarray
) -> dict[str, float]:
    """The 21 mechanistic features of appendix D.2.

    Args:
        head_entropy: H_ℓ,h in nats, shape ``(L, H)``.
        layer_variance, layer_norm, layer_rank: v_ℓ, n_ℓ, r_ℓ, shape ``(L,)`` (decoder layers 1 … L).

    Returns:
        The features in appendix D.2 order.

    Raises:
        ValueError: when the shapes do not fit together.
    """
    spec = attention_specialization(head_entropy)
    he = np.asarray(head_entropy, dtype=np.float64)
    v = np.asarray(layer_variance, dtype=np.float64)
    nrm = np.asarray(layer_norm, dtype=np.float64)
    r = np.asarray(layer_rank, dtype=np.float64)
    n_layers = he.shape[0]
    for name, arr in (("layer_variance", v), ("layer_norm", nrm), ("layer_rank", r)):
        if arr.shape != (n_layers,):
            raise ValueError(f"{name} must have shape ({n_layers},), got {arr.shape}")
    h_attn = spec["attention_entropy"]
    n_spec = int(spec["num_specialized_heads"])
    per_layer_effect = he.mean(axis=1) / 10.0  # E_direct terms, one per layer
    sigma_causal = float(np.std(per_layer_effect))
    e_direct = float(per_layer_effect.mean())
    r_ablation = 1.0 - h_attn / 5.0
    variance_growth = _ratio(v[-1], v[0])
    norm_growth = _ratio(nrm[-1], nrm[0])
    rank_evolution = float(r[-1] - r[0])
    depth = float(n_layers)
    return {
        **spec,
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
