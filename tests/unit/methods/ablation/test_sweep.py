"""Dose–response over ε and the single-layer sweep on the tiny random Llama."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from core.engine import DualPathSettings, prepare_prompts
from core.methods import ablation
from core.methods.ablation import count_intervention_hooks, noise_injection

Q, C = "Where is the tower?", "The tower stands in Quillmere."


def _settings(n: int = 6) -> DualPathSettings:
    return DualPathSettings(max_new_tokens=n, score_window=n, top_k=5)


def test_dose_response_grid_seeds_and_exact_eps_zero(tiny_handle):
    calls = []
    grid = ablation.dose_response(
        tiny_handle,
        Q,
        C,
        _settings(),
        "1-2",
        [0.5, 0.0, 1.0],
        [3, 4],
        max_new_tokens=6,
        progress=lambda done, total, label: calls.append((done, total)),
    )
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


def test_a_runner_makes_the_noisy_runs_and_the_grid_reuses_the_clean_run_at_eps_zero(tiny_handle):
    seen = []

    def runner(handle, prepared, settings, runs, progress):
        seen.append((prepared.query, settings.max_new_tokens, runs))

        def outcome(z: float, ids: list[int]) -> SimpleNamespace:
            return SimpleNamespace(z=z, first_token_logprob=-z, first_token_logprob_para=-2 * z, answer_ids=ids,
                                   answer=f"a{z:g}")  # fmt: skip

        return outcome(1.0, [7, 8]), [outcome(10.0 + i, [7]) for i in range(len(runs))], "tok"

    grid = ablation.dose_response(tiny_handle, Q, C, _settings(), "1-2", [0.0, 0.5, 1.0], [3, 4], max_new_tokens=6,
                                  runner=runner)  # fmt: skip
    assert seen == [(Q, 6, [([1, 2], 0.5, 3), ([1, 2], 0.5, 4), ([1, 2], 1.0, 3), ([1, 2], 1.0, 4)])]
    np.testing.assert_array_equal(grid.z, [[1.0, 1.0], [10.0, 11.0], [12.0, 13.0]])
    np.testing.assert_array_equal(grid.first_token_logprob_para, -2 * grid.z)
    np.testing.assert_array_equal(grid.answer_changed, [[False, False], [True, True], [True, True]])
    np.testing.assert_array_equal(grid.n_tokens, [[2, 2], [1, 1], [1, 1]])
    assert (grid.clean_first_token, grid.clean_answer, grid.timings["runs"]) == ("tok", "a1", 5.0)
    assert grid.answers[2] == ["a12", "a13"]
