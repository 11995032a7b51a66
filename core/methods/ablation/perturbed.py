"""A full dual-path run under an intervention, for display next to the clean run, and what changed.

:func:`perturbed_run` is :func:`core.engine.run_dual_path` (both answers re-generated, KL per token, Z) under
noise and/or activation patching, plus the first-token log-probability and the per-layer trajectory, all in
the same hooked session. :func:`compare` lines the perturbed result up with the clean one.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from core.engine import DualPathResult, DualPathSettings, prepare_prompts, run_dual_path
from core.engine.generation import EventCallback
from core.methods.ablation.interventions import Intervention
from core.methods.ablation.scoring import first_token_logprob
from core.methods.ablation.specs import NoiseSpec, PatchSpec
from core.methods.ablation.trajectory import layer_trajectory
from core.model.handle import ModelHandle

NO_PATCH_SITE = "Activation patching found no place to patch: the retrieval prompt was never processed."


def perturbed_run(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: DualPathSettings,
    *,
    noise: NoiseSpec | None = None,
    patch_layers: Sequence[int] | None = None,
    clean_first_token: int | None = None,
    trajectory: bool = True,
    on_event: EventCallback | None = None,
) -> DualPathResult:
    """:func:`core.engine.run_dual_path` under noise and/or activation patching.

    Both answers are re-generated under the intervention; the result's ``extras`` get ``intervention`` (the
    specs and what was done), ``first_token_logprob`` (log P_retrieval of ``clean_first_token`` under the
    intervention) and ``trajectory`` (:class:`~core.methods.ablation.trajectory.Trajectory` of the perturbed
    displacement) — all computed inside the same hooked session.
    ``on_event`` gets :func:`~core.engine.run_dual_path`'s stream events (one per generated token; a progress bar).

    Raises:
        ValueError: bad inputs, settings or specifications (nothing has run then).
    """
    prepared = prepare_prompts(handle, query, context, settings)
    patch = None
    if patch_layers:
        patch = PatchSpec(
            tuple(int(x) for x in patch_layers), tuple(prepared.parametric.ids), tuple(prepared.retrieval.ids)
        )
    with Intervention(handle, noise=noise, patch=patch) as iv:
        result = run_dual_path(handle, query, context, settings, free_parametric=True, on_event=on_event)
        token = clean_first_token if clean_first_token is not None else (result.answer_token_ids or [None])[0]
        lp = first_token_logprob(handle, prepared.retrieval.ids, token) if token is not None else None
        traj = layer_trajectory(handle, result) if trajectory else None
    result.extras["intervention"] = iv.describe()
    result.extras["first_token_logprob"] = lp
    if traj is not None:
        result.extras["trajectory"] = traj.to_dict()
    if patch is not None and iv.stats.patched_sites == 0:
        result.warnings.append(NO_PATCH_SITE)
    return result


def token_changes(clean_ids: Sequence[int], new_ids: Sequence[int]) -> list[bool]:
    """For each token of ``new_ids``: is it *not* part of an unchanged stretch of ``clean_ids``?

    Tokens are aligned with :class:`difflib.SequenceMatcher` (no junk heuristic), so one inserted token does
    not mark everything after it as changed.
    """
    changed = [True] * len(new_ids)
    matcher = difflib.SequenceMatcher(a=list(clean_ids), b=list(new_ids), autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for j in range(j1, j2):
                changed[j] = False
    return changed


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where two token sequences differ (``None`` when they are identical)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(clean: DualPathResult, perturbed: DualPathResult) -> dict[str, Any]:
    """What changed between a clean and a perturbed result (JSON-ready; keys kept from the first release)."""
    retrieval_changed = token_changes(clean.answer_token_ids, perturbed.answer_token_ids)
    parametric_changed = token_changes(clean.parametric.token_ids, perturbed.parametric.token_ids)
    return {
        "z_clean": clean.repcs_score,
        "z_perturbed": perturbed.repcs_score,
        "delta_z": perturbed.repcs_score - clean.repcs_score,
        "verdict_clean": clean.verdict,
        "verdict_perturbed": perturbed.verdict,
        "rag_answer_changed": clean.answer_token_ids != perturbed.answer_token_ids,
        "parametric_answer_changed": clean.parametric.token_ids != perturbed.parametric.token_ids,
        "rag_first_difference": first_difference(clean.answer_token_ids, perturbed.answer_token_ids),
        "parametric_first_difference": first_difference(clean.parametric.token_ids, perturbed.parametric.token_ids),
        "rag_changed_tokens": int(sum(retrieval_changed)),
        "parametric_changed_tokens": int(sum(parametric_changed)),
        "rag_changed": retrieval_changed,
        "parametric_changed": parametric_changed,
    }
