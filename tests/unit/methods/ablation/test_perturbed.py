"""Perturbed runs, their comparison with the clean run, and per-layer trajectories (tiny random Llama)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.engine import DualPathSettings, prepare_prompts, run_dual_path
from core.methods import ablation
from core.methods.ablation import NoiseSpec, noise_injection

Q, C = "Where is the tower?", "The tower stands in Quillmere."


def _settings(n: int = 6) -> DualPathSettings:
    return DualPathSettings(max_new_tokens=n, score_window=n, top_k=5)


def test_token_changes_align_insertions_and_replacements():
    assert ablation.token_changes([1, 2, 3], [1, 2, 3]) == [False, False, False]
    # one inserted token does not mark the rest as changed
    assert ablation.token_changes([1, 2, 3, 4], [1, 9, 2, 3, 4]) == [False, True, False, False, False]
    assert ablation.token_changes([1, 2, 3], [1, 7, 3]) == [False, True, False]
    assert ablation.token_changes([1, 2], []) == []
    assert ablation.token_changes([], [5, 6]) == [True, True]
    assert ablation.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert ablation.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert ablation.first_difference([1, 2], [1, 2, 3]) == 2


def test_perturbed_run_records_the_intervention_and_the_comparison(tiny_handle):
    s = _settings()
    clean = run_dual_path(tiny_handle, Q, C, s)
    pert = ablation.perturbed_run(
        tiny_handle, Q, C, s, noise=NoiseSpec((0, 1), 1.0, 0), clean_first_token=clean.answer_token_ids[0]
    )
    info = pert.extras["intervention"]
    assert info["noise"]["layers"] == [0, 1] and info["stats"]["noised_forwards"]["0"] > 0
    assert isinstance(pert.extras["first_token_logprob"], float)
    diff = ablation.compare(clean, pert)
    assert diff["delta_z"] == pytest.approx(pert.repcs_score - clean.repcs_score)
    assert len(diff["rag_changed"]) == pert.n_tokens
    assert diff["rag_changed_tokens"] == sum(diff["rag_changed"])
    # the perturbed result still serializes losslessly
    json.loads(pert.to_json())
    # patching + noise compose in one run
    both = ablation.perturbed_run(tiny_handle, Q, C, s, noise=NoiseSpec((1,), 0.5, 1), patch_layers=[2])
    # three forwards see the retrieval prompt: the generation's prefill, the first-token log-prob and the
    # trajectory's forward; the parametric forwards are never patched
    assert both.extras["intervention"]["stats"]["patched_sites"] == 3
    assert set(both.extras["intervention"]) >= {"noise", "patch"}


def test_trajectory_under_noise_changes_only_from_the_noised_layer_on(tiny_handle):
    """d_ℓ = h_ℓ(context) − h_ℓ(no context) at the last prompt token: noise at decoder layer 1 leaves the
    embedding row and layer 0's row (indices 0, 1) exactly as they were, and changes index 2 onwards."""
    s = _settings()
    clean = run_dual_path(tiny_handle, Q, C, s)
    base = ablation.layer_trajectory(tiny_handle, clean)
    assert base.kind in {"lts", "l2"} and base.values.shape == (4,)
    with noise_injection(tiny_handle, [1], 0.5, 0):
        noisy = ablation.layer_trajectory(tiny_handle, clean)
    np.testing.assert_array_equal(noisy.values[:2], base.values[:2])
    assert np.all(np.abs(noisy.values[2:] - base.values[2:]) > 1e-6)
    # the L2 fallback is ‖d_ℓ‖₂ of an independent computation with transformers' hidden states
    prep = prepare_prompts(tiny_handle, Q, C, s)
    with torch.inference_mode():
        outputs = [
            tiny_handle.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
            for ids in (prep.retrieval.ids, prep.parametric.ids)
        ]
        hs = [torch.stack(out.hidden_states)[:, 0, -1] for out in outputs]
    d = (hs[0] - hs[1]).double().numpy()
    own = ablation.displacement(tiny_handle, clean)
    np.testing.assert_allclose(own[:-1], d[:-1], rtol=1e-5, atol=1e-6)  # the last row differs by the final norm
    if base.kind == "l2":
        np.testing.assert_allclose(base.values[:-1], np.linalg.norm(d[:-1], axis=1), rtol=1e-4, atol=1e-6)
    traj = ablation.Trajectory.from_dict(json.loads(json.dumps(base.to_dict())))
    np.testing.assert_array_equal(traj.values, base.values)
