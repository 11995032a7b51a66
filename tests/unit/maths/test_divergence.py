"""KL, entropy and CRM level-2 statistics against independent float64 computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.maths.divergence import entropy, kl_divergence, kl_statistics, log_probs, topk_entropy


def _np_kl(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    """KL(P‖Q) in float64 with scipy-free, independent maths (softmax then p·log(p/q))."""
    p = np.exp(p_logits - p_logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    q = np.exp(q_logits - q_logits.max(-1, keepdims=True))
    q /= q.sum(-1, keepdims=True)
    return (p * np.log(p / q)).sum(-1)


def test_kl_matches_float64_reference():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(7, 300)) * 3, rng.normal(size=(7, 300)) * 3
    ours = kl_divergence(
        log_probs(torch.tensor(a, dtype=torch.float32)), log_probs(torch.tensor(b, dtype=torch.float32))
    )
    assert ours.dtype == torch.float32
    np.testing.assert_allclose(ours.numpy(), _np_kl(a, b), rtol=1e-4, atol=1e-5)


def test_kl_of_half_precision_logits_is_float32():
    a = torch.randn(3, 50).half()
    out = kl_divergence(log_probs(a), log_probs(a.flip(-1)))
    assert out.dtype == torch.float32 and torch.all(out >= 0)


def test_kl_nonnegative_and_zero_on_identical():
    x = torch.randn(20, 1000) * 5
    lp = log_probs(x)
    assert torch.all(kl_divergence(lp, log_probs(torch.randn(20, 1000))) >= 0)
    assert torch.all(kl_divergence(lp, lp) == 0)


def test_kl_shape_mismatch_raises():
    with pytest.raises(ValueError, match="same shape"):
        kl_divergence(torch.zeros(2, 3), torch.zeros(2, 4))


def test_entropy_uniform_and_onehot():
    v = 64
    assert entropy(log_probs(torch.zeros(v))).item() == pytest.approx(np.log(v), rel=1e-6)
    peaked = torch.full((v,), -1e4)
    peaked[3] = 0
    assert entropy(log_probs(peaked)).item() == pytest.approx(0.0, abs=1e-6)


def test_topk_entropy_converges_to_full():
    torch.manual_seed(0)
    lp = log_probs(torch.randn(500) * 2)
    full = entropy(lp).item()
    errors = [abs(topk_entropy(lp, k).item() - full) for k in (3, 30, 300, 499)]
    assert errors == sorted(errors, reverse=True)
    assert topk_entropy(lp, 500).item() == pytest.approx(full)
    assert topk_entropy(lp, None).item() == pytest.approx(full)
    with pytest.raises(ValueError):
        topk_entropy(lp, 0)


def test_kl_statistics_by_hand():
    kl = np.array([1.0, 2.0, 3.0, 6.0])
    s = kl_statistics(kl, split=2)
    assert s["mean"] == pytest.approx(3.0)
    assert s["max"] == 6.0
    assert s["var"] == pytest.approx(np.var(kl))
    assert s["early"] == pytest.approx(1.5) and s["late"] == pytest.approx(4.5)
    # least-squares slope of (0,1),(1,2),(2,3),(3,6): cov(t,kl)/var(t) = 1.6
    assert s["trend"] == pytest.approx(1.6)
    short = kl_statistics(np.array([0.5]), split=32)
    assert short["late"] is None and short["trend"] == 0.0
    assert kl_statistics(np.array([]))["mean"] is None
    with pytest.raises(ValueError):
        kl_statistics(np.zeros((2, 2)))
