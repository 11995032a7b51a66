"""The 37 RADAR features of appendix D: their names, groups, formulas and the paper's own proxy notes.

Pure data (no model, no IO): the feature order here is the column order of every feature vector and
feature table (appendix G: f ∈ R³⁷, surface first). Where appendix D leaves a quantity undefined (e.g.
"variance growth", "norm growth trajectory") the feature's ``note`` says which definition is used; where the
paper itself says a feature is a proxy (appendix D.2 and F.1) its ``proxy`` field quotes that. RDS and RCI
(appendix C) are only described in words in the paper ("predefined formulas that weigh different
features"); :data:`RDS_FEATURES` and :data:`RCI_FEATURES` give the formulas used here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

FEATURE_VERSION = 1
"""Bumped whenever a feature definition changes; cached feature tables of another version are recomputed."""

SPECIALIZATION_TAU = 1.5
"""τ of ``num_specialized_heads`` (appendix D.2.1: "typically τ = 1.5"), nats: a head is *specialized* when its
attention entropy is below τ. The one definition in the project (the Attention view uses it too)."""
EPS = 1e-8
"""ε of ``factual_head_activation`` (appendix D.2.1); also keeps the two inverse-std features finite."""


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

_GROUPS = {_CONF: _S, _TRAJ: _S, _INFO: _S, _SPEC: _M, _CIRC: _M, _INTV: _M, _WORK: _M, _CAUS: _M}
"""The group of each subgroup (the appendix D table a feature comes from)."""
_ATTENTION_ENTROPY = "H̄_attn = (1/(LH)) Σ_ℓ Σ_h H_ℓ,h,  H_ℓ,h = −Σ_{i,j} A_ℓ,h(i,j) log A_ℓ,h(i,j)"
_RANK_EVOLUTION = "R_evolution = r_L − r_1,  r_ℓ = exp(−Σ_k q_k log q_k),  q_k = s_k / Σ s  (SVD of h_ℓ, T × d)"
# One row per feature, as a table reads (the two longest formulas are named above).
# fmt: off
_TABLE: tuple[tuple[str, str, str, str], ...] = (
    ("mean_confidence", _CONF, "float", "c̄ = (1/L) Σ_ℓ c_ℓ,  c_ℓ = max_i p_ℓ,i"),
    ("std_confidence", _CONF, "float", "σ_c = sqrt( (1/(L−1)) Σ_ℓ (c_ℓ − c̄)² )"),
    ("max_confidence", _CONF, "float", "c_max = max_ℓ c_ℓ"),
    ("min_confidence", _CONF, "float", "c_min = min_ℓ c_ℓ"),
    ("confidence_range", _CONF, "float", "Δc = c_max − c_min"),
    ("convergence_layer", _CONF, "int", "ℓ* = argmax_ℓ c_ℓ"),
    ("convergence_speed", _CONF, "float", "v_conv = 1 / (ℓ* + 1)"),
    ("confidence_slope", _CONF, "float", "β = Σ_ℓ (ℓ − ℓ̄)(c_ℓ − c̄) / Σ_ℓ (ℓ − ℓ̄)²,  ℓ = 1…L"),
    ("oscillation_count", _TRAJ, "int", "#{ℓ : Δc_ℓ · Δc_ℓ+1 < 0},  Δc_ℓ = c_ℓ+1 − c_ℓ"),
    ("early_confidence", _TRAJ, "float", "c_early = mean of c_ℓ over the first ⌊L/2⌋ layers"),
    ("late_confidence", _TRAJ, "float", "c_late = mean of c_ℓ over the remaining L − ⌊L/2⌋ layers"),
    ("prediction_stability", _TRAJ, "float", "s_pred = 1 / (σ_c + ε)"),
    ("mean_entropy", _INFO, "float", "H̄ = (1/L) Σ_ℓ H_ℓ,  H_ℓ = −Σ_i p_ℓ,i log p_ℓ,i  (nats)"),
    ("entropy_change", _INFO, "float", "ΔH = H_L − H_1"),
    ("information_gain", _INFO, "float", "IG = −ΔH = H_1 − H_L"),
    ("layer_consistency", _INFO, "float", "1 / (σ_H + ε),  σ_H = sqrt( (1/(L−1)) Σ_ℓ (H_ℓ − H̄)² )"),
    ("num_specialized_heads", _SPEC, "int", f"N_spec = Σ_ℓ Σ_h 1[H_ℓ,h < τ],  τ = {SPECIALIZATION_TAU:g}"),
    ("head_specialization_score", _SPEC, "float", "S_head = 1 − H̄_attn / 3"),
    ("factual_head_activation", _SPEC, "float", "A_fact = 1 / (H̄_attn + ε),  ε = 1e-8"),
    ("reasoning_head_activation", _SPEC, "float", "A_reason = H̄_attn / 3"),
    ("attention_entropy", _SPEC, "float", _ATTENTION_ENTROPY),
    ("effective_circuit_depth", _CIRC, "float", "D = L (number of attention layers analyzed)"),
    ("circuit_complexity", _CIRC, "float", "C = σ²_var · γ_norm,  σ²_var = v_L / v_1"),
    ("activation_flow_variance", _CIRC, "float", "Var_ℓ(n_ℓ),  n_ℓ = (1/T) Σ_t ‖h_ℓ,t‖₂"),
    ("causal_path_length", _CIRC, "float", "= effective_circuit_depth = L"),
    ("ablation_robustness", _INTV, "float", "R_ablation = 1 − H̄_attn / 5"),
    ("critical_component_count", _INTV, "int", "N_critical = max(1, N_spec)"),
    ("performance_degradation_slope", _INTV, "float", "β_degrad = |σ_causal|,  σ_causal = std_ℓ(H̄_attn,ℓ / 10)"),
    ("intervention_sensitivity", _INTV, "float", "S_interv = 1 − R_ablation"),
    ("hidden_state_variance", _WORK, "float", "(1/L) Σ_ℓ v_ℓ,  v_ℓ = Var_{t,d}(h_ℓ,t,d)"),
    ("norm_growth_trajectory", _WORK, "float", "γ_norm = n_L / n_1"),
    ("working_memory_complexity", _WORK, "float", "= state_rank_evolution"),
    ("state_rank_evolution", _WORK, "float", _RANK_EVOLUTION),
    ("direct_logit_attribution", _CAUS, "float", "E_direct = (1/L) Σ_ℓ H̄_attn,ℓ / 10"),
    ("indirect_effect_strength", _CAUS, "float", "E_indirect = σ_causal"),
    ("causal_mediation_score", _CAUS, "float", "M_causal = E_direct × E_indirect"),
    ("activation_patching_effect", _CAUS, "float", "P_patch = E_direct"),
)
# fmt: on
"""Appendix D as one table, one row per feature in the paper's order: ``(name, subgroup, kind, formula)``."""

_PROXIES: dict[str, str] = {
    "effective_circuit_depth": '"Equal to the number of attention layers analyzed": a constant per model.',
    "causal_path_length": '"Currently equal to circuit depth": a constant per model.',
    "critical_component_count": '"Uses specialized head count as a proxy for critical components" (appendix F.1).',
    "performance_degradation_slope": _ENTROPY_PROXY,
    "working_memory_complexity": '"Currently uses rank evolution as a proxy for working memory complexity" '
    "(appendix F.1).",
    "direct_logit_attribution": '"Proxy for direct causal contribution", computed from attention entropy '
    "(appendix F.1).",
    "indirect_effect_strength": _ENTROPY_PROXY,
    "causal_mediation_score": _ENTROPY_PROXY,
    "activation_patching_effect": '"Computed from attention entropy, not from actual activation patching experiments."',
}
"""The paper's own words where it says a feature is a proxy (appendix D.2 and F.1), by feature."""
_NOTES: dict[str, str] = {
    "mean_confidence": "p_ℓ = softmax(lm_head(final_norm(h_ℓ))) at the last prompt position (logit lens).",
    "convergence_layer": "0-based decoder layer (the first maximum), which is what the +1 in convergence_speed "
    "implies.",
    "oscillation_count": "A zero difference never counts as a sign change (the product is then 0).",
    "prediction_stability": "ε = 1e-8 (as in factual_head_activation) keeps a flat trajectory finite.",
    "layer_consistency": "ε = 1e-8 keeps a flat entropy trajectory finite.",
    "num_specialized_heads": _ATTN_NOTE,
    "attention_entropy": _ATTN_NOTE,
    "circuit_complexity": "v_ℓ = variance of all activations of h_ℓ (positions × hidden units); the paper calls σ²_var "
    '"activation variance growth" without a formula: the last/first decoder-layer ratio here.',
    "activation_flow_variance": '"Variance in activation magnitudes across layers": population variance over decoder '
    "layers of the mean token L2 norm.",
    "ablation_robustness": "No component is ablated: the paper computes it from attention entropy.",
    "performance_degradation_slope": "Layer-wise causal effect estimates are the paper's E_direct terms H̄_attn,ℓ/10; "
    "population std.",
    "intervention_sensitivity": "No intervention is run: the paper computes it from attention entropy.",
    "hidden_state_variance": '"Variance in hidden state activations … across layers": the mean over decoder layers '
    "of the per-layer activation variance (residual stream before the final norm).",
    "norm_growth_trajectory": '"Growth pattern of activation norms": ratio of the last to the first decoder '
    "layer's mean token L2 norm.",
    "state_rank_evolution": "Effective rank (Roy & Vetterli) of the layer's token × hidden matrix, last minus first "
    "decoder layer; 0 for a one-token prompt.",
}
"""What this implementation decided where appendix D is not explicit, by feature."""

FEATURES: tuple[FeatureSpec, ...] = tuple(
    FeatureSpec(name, _GROUPS[subgroup], subgroup, kind, formula, _PROXIES.get(name), _NOTES.get(name))
    for name, subgroup, kind, formula in _TABLE
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
convergence, more specialized heads, focused attention. RDS = sigmoid(mean of their training-set z-scores)."""
RCI_FEATURES: tuple[str, ...] = (
    "circuit_complexity",
    "activation_flow_variance",
    "hidden_state_variance",
    "reasoning_head_activation",
    "convergence_layer",
)
"""Reasoning signatures named by the paper (§3.2, §4.2): higher circuit complexity, higher activation flow
variance, hidden-state variance, distributed attention, later stabilization. RCI = sigmoid(mean z-score)."""
RDS_FORMULA = "RDS = sigmoid( mean_f∈R z_f ),  z_f = (x_f − μ_f)/σ_f over the training set,  R = " + ", ".join(
    RDS_FEATURES
)
RCI_FORMULA = "RCI = sigmoid( mean_f∈C z_f ),  C = " + ", ".join(RCI_FEATURES)


def feature_vector(features: Mapping[str, float]) -> np.ndarray:
    """The 37 features as a float64 vector in :data:`FEATURE_NAMES` order (appendix G: f ∈ R³⁷), shape ``(37,)``.

    Raises:
        ValueError: when a feature is missing.
    """
    missing = [n for n in FEATURE_NAMES if n not in features]
    if missing:
        raise ValueError(f"missing RADAR feature(s): {', '.join(missing)}")
    return np.array([features[n] for n in FEATURE_NAMES], dtype=np.float64)
