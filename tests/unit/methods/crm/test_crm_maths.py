"""core.methods.crm.maths and .vocab: PC1/LTS against an independent numpy computation, layer selection, the
supervised direction, the audit rule and the back-projection."""

from __future__ import annotations

import numpy as np
import pytest

from core.methods.crm import maths
from core.methods.crm.vocab import back_projection


def test_pc1_and_lts_match_a_numpy_eigendecomposition(synthetic):
    D, _ = synthetic()
    pc1, evr, evr_within = maths.pc1_directions(D)
    traces = []
    for layer in range(D.shape[1]):
        cov = np.cov(D[:, layer].T)  # independent: eigen-decomposition of the covariance matrix (float64)
        values, vectors = np.linalg.eigh(cov)
        traces.append(values.sum())
        if values[-1] <= 1e-12:
            assert np.all(pc1[layer] == 0)
            continue
        top = vectors[:, -1]
        assert abs(top @ pc1[layer]) == pytest.approx(1.0, abs=1e-9)
        assert evr_within[layer] == pytest.approx(values[-1] / values.sum(), rel=1e-9)
        # sign rule: the calibration mean projects non-negatively
        assert D[:, layer].mean(axis=0) @ pc1[layer] >= 0
    lam1 = np.array([np.linalg.eigvalsh(np.cov(D[:, i].T))[-1] if i else 0.0 for i in range(D.shape[1])])
    np.testing.assert_allclose(evr, lam1 / np.sum(traces), rtol=1e-9, atol=1e-15)
    lts = maths.project(D, pc1)
    np.testing.assert_allclose(lts, np.einsum("nld,ld->nl", D, pc1), rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(pc1[1:], axis=1), 1.0, atol=1e-12)


def test_explained_variance_layer_selection(synthetic):
    D, _ = synthetic()
    _, evr, _ = maths.pc1_directions(D)
    kept = maths.select_layers(evr, 0.01)
    assert 0 not in kept and 1 not in kept  # no variance / near-zero variance (share < 0.01)
    assert kept == [i for i in range(len(evr)) if evr[i] > 0.01]
    assert kept == [2, 3, 4]
    assert maths.select_layers(np.array([0.01, 0.0100001, 0.5]), 0.01) == [1, 2]  # strictly above
    assert maths.select_layers(evr, 1.0) == []


def test_supervised_direction_is_the_normalized_class_mean_difference(synthetic):
    D, y = synthetic()
    sup = maths.supervised_directions(D, y)
    diff = D[y == 1].mean(axis=0) - D[y == 0].mean(axis=0)
    for layer in range(1, D.shape[1]):
        np.testing.assert_allclose(sup[layer], diff[layer] / np.linalg.norm(diff[layer]), rtol=1e-12)
    assert np.all(sup[0] == 0)
    lts = maths.project(D, sup)
    assert lts[y == 1, 3].mean() > lts[y == 0, 3].mean()
    with pytest.raises(ValueError, match="both classes"):
        maths.supervised_directions(D, np.ones(len(y), dtype=int))


def test_audit_rule_flags_layers_outside_two_sigma():
    mu = np.array([0.0, 1.0, 2.0, 0.0])
    sigma = np.array([1.0, 0.5, 0.0, 2.0])
    lts = np.array([2.5, 1.9, 9.0, -4.1])
    assert maths.audit_flags(lts, mu, sigma) == [0, 3]  # 1: |0.9| < 1.0; 2: σ = 0 never flags
    assert maths.audit_flags(lts, mu, sigma, layers=[1, 3]) == [3]
    assert maths.anomaly_score(lts, mu, sigma, [0, 1, 3]) == pytest.approx((2.5 + 1.8 + 2.05) / 3)
    np.testing.assert_allclose(maths.zscores(lts, mu, sigma), [2.5, 1.8, 0.0, -2.05])


def test_bad_inputs_are_value_errors():
    with pytest.raises(ValueError, match="n_prompts"):
        maths.check_displacements(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="at least 2"):
        maths.check_displacements(np.zeros((1, 3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        maths.check_displacements(np.full((2, 3, 2), np.nan))
    with pytest.raises(ValueError, match="0/1"):
        maths.check_labels([0, 2], 2)
    with pytest.raises(ValueError, match="shape"):
        maths.check_labels([0, 1, 1], 2)
    with pytest.raises(ValueError, match="directions"):
        maths.project(np.zeros((3, 4)), np.zeros((3, 5)))
    with pytest.raises(ValueError, match="1-D"):
        maths.audit_flags(np.zeros(3), np.zeros(3), np.zeros(2))


def test_back_projection_returns_both_ends():
    rng = np.random.default_rng(3)
    W = rng.normal(size=(50, 6))
    V = rng.normal(size=(3, 6))
    out = back_projection(W, V, k=4)
    scores = V @ W.T
    for layer in range(3):
        order = np.argsort(-scores[layer])
        np.testing.assert_array_equal(out["top_ids"][layer], order[:4])
        np.testing.assert_array_equal(out["bottom_ids"][layer], order[::-1][:4])
        np.testing.assert_allclose(out["top_scores"][layer], scores[layer, order[:4]], rtol=1e-5)
    assert out["top_ids"].shape == out["bottom_ids"].shape == (3, 4)
    with pytest.raises(ValueError):
        back_projection(W, rng.normal(size=(3, 5)))
