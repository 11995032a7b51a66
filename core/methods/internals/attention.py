"""RADAR's attention-specialization features from a layers × heads entropy map (RADAR appendix D.2.1).

Pure numpy: entropies in nats in, counts and scalars out.
"""

from __future__ import annotations

import numpy as np

RADAR_TAU = 1.5
"""RADAR's specialization threshold τ (nats): a head is *specialized* when its attention entropy is below τ."""


def specialized_heads(entropy_lh: np.ndarray, tau: float = RADAR_TAU) -> int:
    """RADAR's ``N_spec = Σ_ℓ Σ_h 1[H_{ℓ,h} < τ]`` over a ``(layers, heads)`` entropy map (nats).

    Raises:
        ValueError: a map that is not 2-D.
    """
    h = np.asarray(entropy_lh, dtype=np.float64)
    if h.ndim != 2:
        raise ValueError(f"entropy map must be (layers, heads), got shape {h.shape}")
    return int((h < float(tau)).sum())


def attention_specialization(entropy_lh: np.ndarray, tau: float = RADAR_TAU) -> dict[str, float]:
    """RADAR's five attention-specialization features (appendix D.2.1) from a ``(layers, heads)`` map.

    With ``H̄ = mean_{ℓ,h} H_{ℓ,h}`` (nats):
    ``num_specialized_heads = Σ 1[H_{ℓ,h} < τ]``, ``head_specialization_score = 1 − H̄/3``,
    ``factual_head_activation = 1/(H̄ + 1e−8)``, ``reasoning_head_activation = H̄/3``,
    ``attention_entropy = H̄``. The constants 3.0 and 1e−8 are the paper's.
    """
    h = np.asarray(entropy_lh, dtype=np.float64)
    mean = float(h.mean()) if h.size else 0.0
    return {
        "num_specialized_heads": float(specialized_heads(h, tau)),
        "head_specialization_score": 1.0 - mean / 3.0,
        "factual_head_activation": 1.0 / (mean + 1e-8),
        "reasoning_head_activation": mean / 3.0,
        "attention_entropy": mean,
    }
