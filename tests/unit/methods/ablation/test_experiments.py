"""Ablation experiments on the tiny random Llama (dose–response, single-layer sweep, patching, perturbed
runs, trajectories, the CLI) and one short integration test on the embedded model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import core.cli.commands.ablate as ablate_cmd
from core.methods.ablation import experiments as ablation
from core.cli import main
from core.engine.dual_path import DualPathSettings, prepare_prompts, run_dual_path
from core.methods.ablation.interventions import NoiseSpec, count_intervention_hooks, noise_injection

Q, C = "Where is the tower?", "The tower stands in Quillmere."


def _settings(n: int = 6) -> DualPathSettings:
    return DualPathSettings(max_new_tokens=n, score_window=n, top_k=5)


# ----------------------------------------------------------------------------------------------------------
# Pure helpers


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


def test_sweep_settings_tie_the_window_to_the_answer_length():
    s = ablation.sweep_settings(DualPathSettings(max_new_tokens=64, score_window=64, template="A"), 16)
    assert (s.max_new_tokens, s.score_window, s.template, s.force_length) == (16, 16, "A", False)
    with pytest.raises(ValueError):
        ablation.sweep_settings(DualPathSettings(), 0)


# ----------------------------------------------------------------------------------------------------------
# Scoring runs, dose–response and sweeps


def test_score_run_matches_the_engine(tiny_handle):
    s = _settings()
    prep = prepare_prompts(tiny_handle, Q, C, s)
    rec = ablation.score_run(tiny_handle, prep, s)
    res = run_dual_path(tiny_handle, Q, C, s, free_parametric=False)
    assert rec.answer_ids == res.answer_token_ids
    np.testing.assert_array_equal(rec.token_kl, res.token_kl)
    assert rec.z == res.repcs_score
    assert rec.first_token_logprob == pytest.approx(float(res.retrieval.logprob[0]), abs=1e-6)
    assert rec.first_token_logprob_para == pytest.approx(float(res.parametric.logprob[0]), abs=1e-6)
    with noise_injection(tiny_handle, [1], 0.7, 2):
        noisy = ablation.score_run(tiny_handle, prep, s, clean_first_token=rec.answer_ids[0])
        lp = ablation.first_token_logprob(tiny_handle, prep.retrieval.ids, rec.answer_ids[0])
    assert noisy.first_token_logprob == pytest.approx(lp, abs=1e-5)
    assert noisy.first_token_logprob != pytest.approx(rec.first_token_logprob, abs=1e-6)


def test_dose_response_grid_seeds_and_exact_eps_zero(tiny_handle):
    calls = []
    grid = ablation.dose_response(tiny_handle, Q, C, _settings(), "1-2", [0.5, 0.0, 1.0], [3, 4], max_new_tokens=6,
                                  progress=lambda done, total, label: calls.append((done, total)))
    assert grid.conditions == [0.0, 0.5, 1.0] and grid.seeds == [3, 4] and grid.layers == [1, 2]
    assert grid.z.shape == grid.first_token_logprob.shape == grid.answer_changed.shape == (3, 2)
    assert [c[0] for c in calls] == list(range(1, 6)) and {c[1] for c in calls} == {5}
    # ε = 0 is the clean run, and it equals a hooked run with ε = 0
    assert np.all(grid.z[0] == grid.clean_z) and not grid.answer_changed[0].any()
    assert np.all(grid.n_tokens[0] == grid.clean_n_tokens) and np.all((grid.n_tokens >= 1) & (grid.n_tokens <= 6))
    s = ablation.sweep_settings(_settings(), 6)
    prep = prepare_prompts(tiny_handle, Q, C, s)
    with noise_injection(tiny_handle, [1, 2], 0.0, 3):
        zero = ablation.score_run(tiny_handle, prep, s)
    assert zero.z == grid.clean_z
    # each noisy cell is an independent noise_injection run with that seed
    first = ablation.score_run(tiny_handle, prep, s).answer_ids[0]
    with noise_injection(tiny_handle, [1, 2], 1.0, 4):
        cell = ablation.score_run(tiny_handle, prep, s, first)
    assert grid.z[2, 1] == cell.z and grid.first_token_logprob[2, 1] == cell.first_token_logprob
    # statistics over seeds (sample sd), ΔZ, determinism
    np.testing.assert_allclose(grid.z_std, grid.z.std(axis=1, ddof=1))
    np.testing.assert_allclose(grid.delta_z, grid.z - grid.clean_z)
    assert grid.z_std[0] == 0.0 and grid.z_std[2] > 0
    again = ablation.dose_response(tiny_handle, Q, C, _settings(), [1, 2], [0.0, 0.5, 1.0], [3, 4], max_new_tokens=6)
    np.testing.assert_array_equal(again.z, grid.z)
    # JSON and CSV records
    data = json.loads(json.dumps(grid.to_dict(), allow_nan=False))
    assert data["kind"] == "dose_response" and data["layers_spec"] == "1-2" and len(data["z"]) == 3
    rows = grid.rows()
    assert len(rows) == 6 and rows[-1]["eps"] == 1.0 and rows[-1]["seed"] == 4
    assert count_intervention_hooks(tiny_handle.model) == 0


def test_layer_sweep_is_one_single_layer_run_per_layer(tiny_handle):
    grid = ablation.layer_sweep(tiny_handle, Q, C, _settings(), 0.8, [0], max_new_tokens=6)
    assert grid.kind == "layer_sweep" and grid.conditions == [0, 1, 2] and grid.z.shape == (3, 1)
    s = ablation.sweep_settings(_settings(), 6)
    prep = prepare_prompts(tiny_handle, Q, C, s)
    first = ablation.score_run(tiny_handle, prep, s).answer_ids[0]
    with noise_injection(tiny_handle, [2], 0.8, 0):
        only_2 = ablation.score_run(tiny_handle, prep, s, first)
    assert grid.z[2, 0] == only_2.z
    np.testing.assert_allclose(grid.delta_z[:, 0], grid.z[:, 0] - grid.clean_z)
    assert [r["layers"] for r in grid.rows()] == ["0", "1", "2"]
    with pytest.raises(ValueError, match="ε > 0"):
        ablation.layer_sweep(tiny_handle, Q, C, _settings(), 0.0)
    with pytest.raises(ValueError):
        ablation.dose_response(tiny_handle, Q, C, _settings(), "5", [0.5], [0])
    with pytest.raises(ValueError):
        ablation.dose_response(tiny_handle, Q, C, _settings(), "1", [-0.5], [0])
    with pytest.raises(ValueError):
        ablation.dose_response(tiny_handle, Q, C, _settings(), "1", [0.5], [])


def test_patching_scores_and_a_last_layer_patch(tiny_handle):
    out = ablation.patching_scores(tiny_handle, Q, C, _settings(), "2", max_new_tokens=6)
    assert out["intervention"]["stats"]["patched_sites"] == 1
    assert out["delta_z"] == pytest.approx(out["patched"]["z"] - out["clean"]["z"])
    json.dumps(out, allow_nan=False)


# ----------------------------------------------------------------------------------------------------------
# Perturbed runs and trajectories


def test_perturbed_run_records_the_intervention_and_the_comparison(tiny_handle):
    s = _settings()
    clean = run_dual_path(tiny_handle, Q, C, s)
    pert = ablation.perturbed_run(tiny_handle, Q, C, s, noise=NoiseSpec((0, 1), 1.0, 0),
                                  clean_first_token=clean.answer_token_ids[0])
    info = pert.extras["intervention"]
    assert info["noise"]["layers"] == [0, 1] and info["stats"]["noised_forwards"]["0"] > 0
    assert isinstance(pert.extras["first_token_logprob"], float)
    diff = ablation.compare(clean, pert)
    assert diff["delta_z"] == pytest.approx(pert.repcs_score - clean.repcs_score)
    assert len(diff["rag_changed"]) == pert.n_tokens
    assert diff["rag_changed_tokens"] == sum(diff["rag_changed"])
    # the perturbed result still serialises losslessly
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
        hs = [torch.stack(tiny_handle.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states)[:, 0, -1]
              for ids in (prep.retrieval.ids, prep.parametric.ids)]
    d = (hs[0] - hs[1]).double().numpy()
    own = ablation._own_displacement(tiny_handle, clean)
    np.testing.assert_allclose(own[:-1], d[:-1], rtol=1e-5, atol=1e-6)  # the last row differs by the final norm
    if base.kind == "l2":
        np.testing.assert_allclose(base.values[:-1], np.linalg.norm(d[:-1], axis=1), rtol=1e-4, atol=1e-6)
    traj = ablation.Trajectory.from_dict(json.loads(json.dumps(base.to_dict())))
    np.testing.assert_array_equal(traj.values, base.values)


# ----------------------------------------------------------------------------------------------------------
# Command line


def test_cli_ablate_noise_sweep_and_patch(tiny_handle, monkeypatch, capsys):
    monkeypatch.setattr(ablate_cmd, "load_model", lambda *a, **k: tiny_handle)
    common = ["ablate", "--query", Q, "--context", C, "--max-new-tokens", "4"]
    assert main([*common, "--layers", "1-2", "--eps", "0.5", "--seeds", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "dose_response" and out["layers"] == [1, 2] and out["eps"] == [0.5]
    assert out["seeds"] == [0, 1, 2] and len(out["z"][0]) == 3 and out["settings"]["score_window"] == 4
    assert main([*common, "--sweep", "--eps", "0.5", "--seeds", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "layer_sweep" and out["conditions"] == [0, 1, 2]
    assert main([*common, "--layers", "late", "--patch", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "patching" and out["layers"] == [2]
    assert main([*common, "--layers", "middle", "--grid", "0,1", "--seeds", "2"]) == 0
    text = capsys.readouterr().out
    assert "clean Z" in text and "Z mean" in text
    assert main([*common, "--layers", "7"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main([*common]) == 2
    assert "--layers is required" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------
# The embedded model


@pytest.mark.slow
def test_embedded_model_noise_and_patching(embedded_handle):
    q, c = "What is the capital of Veltria?", "The capital of the Republic of Veltria is Marrowgate."
    s = DualPathSettings(max_new_tokens=8, score_window=8)
    clean = run_dual_path(embedded_handle, q, c, s)
    with noise_injection(embedded_handle, range(30), 0.0, 0):
        zero = run_dual_path(embedded_handle, q, c, s)
    assert zero.answer_token_ids == clean.answer_token_ids and np.array_equal(zero.token_kl, clean.token_kl)
    grid = ablation.dose_response(embedded_handle, q, c, s, "early", [0.0, 1.0], [0], max_new_tokens=8)
    assert grid.z[1, 0] != grid.clean_z  # noise over the early third moves Z
    prep = prepare_prompts(embedded_handle, q, c, s)
    from core.methods.ablation.interventions import activation_patching

    with activation_patching(embedded_handle, [29], prep.parametric.ids, prep.retrieval.ids):
        patched = run_dual_path(embedded_handle, q, c, s, free_parametric=False)
    assert patched.token_kl[0] == pytest.approx(0.0, abs=1e-4)  # the first token is predicted as without context
    assert count_intervention_hooks(embedded_handle.model) == 0
