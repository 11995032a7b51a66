"""Shared fixtures of the RADAR tests: the paper's feature names, in appendix D order."""

from __future__ import annotations

import pytest

PAPER_SURFACE = [
    "mean_confidence",
    "std_confidence",
    "max_confidence",
    "min_confidence",
    "confidence_range",
    "convergence_layer",
    "convergence_speed",
    "confidence_slope",
    "oscillation_count",
    "early_confidence",
    "late_confidence",
    "prediction_stability",
    "mean_entropy",
    "entropy_change",
    "information_gain",
    "layer_consistency",
]
PAPER_MECHANISTIC = [
    "num_specialized_heads",
    "head_specialization_score",
    "factual_head_activation",
    "reasoning_head_activation",
    "attention_entropy",
    "effective_circuit_depth",
    "circuit_complexity",
    "activation_flow_variance",
    "causal_path_length",
    "ablation_robustness",
    "critical_component_count",
    "performance_degradation_slope",
    "intervention_sensitivity",
    "hidden_state_variance",
    "norm_growth_trajectory",
    "working_memory_complexity",
    "state_rank_evolution",
    "direct_logit_attribution",
    "indirect_effect_strength",
    "causal_mediation_score",
    "activation_patching_effect",
]


@pytest.fixture
def paper_surface() -> list[str]:
    """The 16 surface features of appendix D.1, in order."""
    return list(PAPER_SURFACE)


@pytest.fixture
def paper_mechanistic() -> list[str]:
    """The 21 mechanistic features of appendix D.2, in order."""
    return list(PAPER_MECHANISTIC)
