"""Ablations: noise injection and activation patching on decoder layers, and the experiments built on them
(CRM §4.4, appendix J).

Modules, one layer each:

* :mod:`~core.methods.ablation.layers` — layer sets: presets, :func:`parse_layers`, :func:`format_layers`;
* :mod:`~core.methods.ablation.noise` — the seeded noise field and h′ = h + ε·σ(h)·z (pure maths);
* :mod:`~core.methods.ablation.specs` — :class:`NoiseSpec`, :class:`PatchSpec`, :class:`InterventionStats`;
* :mod:`~core.methods.ablation.hooks` — hook plumbing (positions, patch sites, hook counters);
* :mod:`~core.methods.ablation.capture` — :func:`capture_layer_outputs`, :func:`last_token_states`;
* :mod:`~core.methods.ablation.interventions` — the context managers: :class:`Intervention`,
  :func:`noise_injection`, :func:`activation_patching`, :func:`intervene`;
* :mod:`~core.methods.ablation.scoring` — one lean scoring run (:func:`score_run`);
* :mod:`~core.methods.ablation.sweep` — :func:`dose_response`, :func:`layer_sweep` → :class:`NoiseGrid`;
* :mod:`~core.methods.ablation.patching` — :func:`patching_scores`;
* :mod:`~core.methods.ablation.trajectory` — the per-layer :class:`Trajectory` (LTS or ‖d_ℓ‖₂);
* :mod:`~core.methods.ablation.perturbed` — :func:`perturbed_run` and :func:`compare` for the page.

What these experiments can and cannot show (CRM §4.4): a change in Z under noise shows the perturbed layers
carry information the context-vs-no-context contrast depends on *for this prompt*; no change does not show
they carry none (residual connections let later layers recover — the paper's reason single-position
patching had negligible effect, and why single layers can look immune while the block is not).
"""

from core.methods.ablation.capture import capture_layer_outputs, last_token_states
from core.methods.ablation.hooks import HOOK_MARK, count_hooks, count_intervention_hooks
from core.methods.ablation.interventions import (
    Intervention,
    activation_patching,
    intervene,
    intervention_parts,
    noise_injection,
)
from core.methods.ablation.layers import CONTROL_BLOCK, PRESETS, format_layers, layer_preset, parse_layers
from core.methods.ablation.noise import NOISE_BLOCK, apply_noise, noise_block, noise_field, token_sigma
from core.methods.ablation.patching import patching_scores
from core.methods.ablation.perturbed import compare, first_difference, perturbed_run, token_changes
from core.methods.ablation.scoring import (
    SWEEP_MAX_NEW_TOKENS,
    ScoredRun,
    first_token_logprob,
    score_run,
    sweep_settings,
)
from core.methods.ablation.specs import MAX_EPS, InterventionStats, NoiseSpec, PatchSpec
from core.methods.ablation.sweep import (
    DEFAULT_EPS_GRID,
    DEFAULT_SEEDS,
    MAX_RUNS,
    NoiseGrid,
    assemble_grid,
    check_run_budget,
    dose_response,
    layer_sweep,
    plan_layer_sweep,
    validate_seeds,
)
from core.methods.ablation.trajectory import (
    Trajectory,
    crm_basis,
    displacement,
    flagged_layers,
    layer_trajectory,
)

__all__ = [
    "CONTROL_BLOCK",
    "DEFAULT_EPS_GRID",
    "DEFAULT_SEEDS",
    "HOOK_MARK",
    "MAX_EPS",
    "MAX_RUNS",
    "NOISE_BLOCK",
    "PRESETS",
    "SWEEP_MAX_NEW_TOKENS",
    "Intervention",
    "InterventionStats",
    "NoiseGrid",
    "NoiseSpec",
    "PatchSpec",
    "ScoredRun",
    "Trajectory",
    "activation_patching",
    "apply_noise",
    "assemble_grid",
    "capture_layer_outputs",
    "check_run_budget",
    "compare",
    "count_hooks",
    "count_intervention_hooks",
    "crm_basis",
    "displacement",
    "dose_response",
    "first_difference",
    "first_token_logprob",
    "flagged_layers",
    "format_layers",
    "intervene",
    "intervention_parts",
    "last_token_states",
    "layer_preset",
    "layer_sweep",
    "layer_trajectory",
    "noise_block",
    "noise_field",
    "noise_injection",
    "parse_layers",
    "patching_scores",
    "perturbed_run",
    "plan_layer_sweep",
    "score_run",
    "sweep_settings",
    "token_changes",
    "token_sigma",
    "validate_seeds",
]
