"""Activation patching scored like the sweeps: Z with h_ℓ(context) at the last prompt token replaced by
h_ℓ(no context) (CRM §4.4 finding 4), next to the clean Z of the same short settings.

The paper found this has almost no effect (ΔAUC < 0.01): the residual stream and the other context tokens let
later layers recover, so a small ΔZ does not mean the patched layers are unimportant.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from core.engine import DualPathSettings, prepare_prompts
from core.methods.ablation.interventions import Intervention, intervention_parts
from core.methods.ablation.layers import format_layers, parse_layers
from core.methods.ablation.scoring import SWEEP_MAX_NEW_TOKENS, score_run, sweep_settings
from core.methods.ablation.specs import PatchSpec
from core.model.handle import ModelHandle


def patching_scores(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: DualPathSettings,
    layers: str | Sequence[int],
    *,
    max_new_tokens: int = SWEEP_MAX_NEW_TOKENS,
) -> dict[str, Any]:
    """Z with activation patching on ``layers`` against the clean Z (same short settings as the sweeps).

    Returns:
        A JSON-ready dict with the clean and patched Z, ΔZ, answers and first-token log-probs.

    Raises:
        ValueError: bad layers, settings or inputs.
    """
    chosen = parse_layers(layers, intervention_parts(handle).n_layers)
    s = sweep_settings(settings, max_new_tokens)
    prepared = prepare_prompts(handle, query, context, s)
    t0 = time.perf_counter()
    clean = score_run(handle, prepared, s)
    spec = PatchSpec(tuple(chosen), tuple(prepared.parametric.ids), tuple(prepared.retrieval.ids))
    with Intervention(handle, patch=spec) as iv:
        patched = score_run(handle, prepared, s, clean.answer_ids[0])
    return {
        "kind": "patching",
        "model": handle.info.name,
        "layers": chosen,
        "layers_spec": format_layers(chosen),
        "settings": s.to_dict(),
        "clean": {"z": clean.z, "answer": clean.answer, "first_token_logprob": clean.first_token_logprob},
        "patched": {
            "z": patched.z,
            "answer": patched.answer,
            "first_token_logprob": patched.first_token_logprob,
            "answer_changed": patched.answer_ids != clean.answer_ids,
        },
        "delta_z": patched.z - clean.z,
        "intervention": iv.describe(),
        "timings": {"total_s": time.perf_counter() - t0},
    }
