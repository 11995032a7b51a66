"""RADAR's feature maths against independent float64 computations (no model)."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
import torch

from core.methods import radar


def _independent_surface(c: np.ndarray, h: np.ndarray) -> dict[str, float]:
    L = len(c)
    layers = list(range(1, L + 1))
    osc = 0
    diffs = [c[i + 1] - c[i] for i in range(L - 1)]
    for a, b in itertools.pairwise(diffs):
        if a * b < 0:
            osc += 1
    std_c = statistics.stdev(c.tolist())
    return {
        "mean_confidence": statistics.fmean(c.tolist()),
        "std_confidence": std_c,
        "confidence_range": max(c) - min(c),
        "convergence_layer": float(list(c).index(max(c))),
        "convergence_speed": 1.0 / (list(c).index(max(c)) + 1),
        "confidence_slope": float(np.polyfit(layers, c, 1)[0]),
        "oscillation_count": float(osc),
        "early_confidence": statistics.fmean(c[: L // 2].tolist()),
        "late_confidence": statistics.fmean(c[L // 2 :].tolist()),
        "prediction_stability": 1.0 / (std_c + 1e-8),
        "mean_entropy": statistics.fmean(h.tolist()),
        "entropy_change": h[-1] - h[0],
        "information_gain": h[0] - h[-1],
        "layer_consistency": 1.0 / (statistics.stdev(h.tolist()) + 1e-8),
    }


@pytest.mark.parametrize("L", [2, 7, 30])
def test_surface_features_against_independent_computation(L, paper_surface):
    rng = np.random.default_rng(L)
    c = rng.uniform(0.05, 0.99, size=L)
    h = rng.uniform(0.0, 8.0, size=L)
    got = radar.surface_features(c, h)
    assert list(got) == paper_surface
    for name, expected in _independent_surface(c, h).items():
        assert got[name] == pytest.approx(expected, rel=1e-9, abs=1e-12), name


def test_oscillations_ignore_zero_differences():
    # Δc = (+0.1, 0, −0.1, +0.2): only the last pair changes sign across non-zero neighbors
    c = np.array([0.1, 0.2, 0.2, 0.1, 0.3])
    assert radar.surface_features(c, np.ones(5))["oscillation_count"] == 1.0
    assert radar.surface_features(np.array([0.1, 0.5, 0.2, 0.6, 0.3]), np.ones(5))["oscillation_count"] == 3.0


def test_surface_features_reject_bad_shapes():
    with pytest.raises(ValueError):
        radar.surface_features(np.array([0.5]), np.array([1.0]))
    with pytest.raises(ValueError):
        radar.surface_features(np.ones(4), np.ones(3))


def test_mechanistic_features_against_independent_computation(paper_mechanistic):
    rng = np.random.default_rng(3)
    L, H = 6, 4
    he = rng.uniform(0.0, 4.0, size=(L, H))
    v = rng.uniform(1.0, 50.0, size=L)
    n = rng.uniform(1.0, 80.0, size=L)
    r = rng.uniform(1.0, 6.0, size=L)
    got = radar.mechanistic_features(he, v, n, r)
    assert list(got) == paper_mechanistic
    h_attn = sum(he.ravel().tolist()) / (L * H)
    n_spec = sum(1 for x in he.ravel() if x < 1.5)
    layer_effects = [sum(row) / H / 10 for row in he.tolist()]
    sigma = statistics.pstdev(layer_effects)
    e_direct = statistics.fmean(layer_effects)
    expected = {
        "num_specialized_heads": n_spec,
        "head_specialization_score": 1 - h_attn / 3,
        "factual_head_activation": 1 / (h_attn + 1e-8),
        "reasoning_head_activation": h_attn / 3,
        "attention_entropy": h_attn,
        "effective_circuit_depth": L,
        "circuit_complexity": (v[-1] / v[0]) * (n[-1] / n[0]),
        "activation_flow_variance": statistics.pvariance(n.tolist()),
        "causal_path_length": L,
        "ablation_robustness": 1 - h_attn / 5,
        "critical_component_count": max(1, n_spec),
        "performance_degradation_slope": sigma,
        "intervention_sensitivity": h_attn / 5,
        "hidden_state_variance": statistics.fmean(v.tolist()),
        "norm_growth_trajectory": n[-1] / n[0],
        "working_memory_complexity": r[-1] - r[0],
        "state_rank_evolution": r[-1] - r[0],
        "direct_logit_attribution": e_direct,
        "indirect_effect_strength": sigma,
        "causal_mediation_score": e_direct * sigma,
        "activation_patching_effect": e_direct,
    }
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name


def test_effective_rank_against_numpy():
    rng = np.random.default_rng(0)
    m = rng.normal(size=(5, 12))
    s = np.linalg.svd(m, compute_uv=False)
    q = s / s.sum()
    assert radar.effective_rank(torch.tensor(m)) == pytest.approx(math.exp(-(q * np.log(q)).sum()), rel=1e-10)
    assert radar.effective_rank(torch.ones(1, 7)) == pytest.approx(1.0)
    assert radar.effective_rank(torch.zeros(3, 4)) == 0.0


def test_head_entropies_sum_row_entropies():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(3, 4, 4))
    logits = np.where(np.tril(np.ones((4, 4))) > 0, logits, -np.inf)  # causal mask
    A = np.exp(logits - logits.max(-1, keepdims=True))
    A /= A.sum(-1, keepdims=True)
    terms = np.where(A > 0, A * np.log(np.where(A > 0, A, 1.0)), 0.0)
    got = radar.head_entropies(torch.tensor(A, dtype=torch.float32))
    assert got.dtype == np.float64 and got.shape == (3,)
    np.testing.assert_allclose(got, -terms.sum(axis=(1, 2)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        radar.head_entropies(torch.ones(4, 4))


def test_residual_statistics_against_numpy():
    rng = np.random.default_rng(6)
    h = rng.normal(size=(5, 8))
    variance, norm, rank = radar.residual_statistics(torch.tensor(h, dtype=torch.float32))
    assert variance == pytest.approx(h.var(), rel=1e-5)
    assert norm == pytest.approx(np.linalg.norm(h, axis=-1).mean(), rel=1e-5)
    assert rank == pytest.approx(radar.effective_rank(torch.tensor(h)), rel=1e-5)
    with pytest.raises(ValueError):
        radar.residual_statistics(torch.ones(2, 3, 4))


def test_attention_specialization_is_the_mechanistic_subset():
    he = np.array([[0.5, 2.0, 1.49], [3.0, 1.5, 0.1]])
    spec = radar.attention_specialization(he)
    assert spec["num_specialized_heads"] == 3.0  # strictly below τ = 1.5
    assert spec["attention_entropy"] == pytest.approx(he.mean())
    ones = np.ones(2)
    full = radar.mechanistic_features(he, ones, ones, ones)
    assert {k: full[k] for k in spec} == spec
    assert radar.attention_specialization(he, tau=2.5)["num_specialized_heads"] == 5.0
    with pytest.raises(ValueError):
        radar.attention_specialization(np.ones(3))
