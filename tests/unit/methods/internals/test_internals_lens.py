"""core.methods.internals.lens and .attention: the logit lens against a float64 numpy computation, RADAR's
attention features."""

from __future__ import annotations

import numpy as np
import pytest

from core.methods.internals.attention import attention_specialization, specialized_heads
from core.methods.internals.lens import logit_lens_compare
from core.model.parts import model_parts


def test_logit_lens_matches_a_float64_numpy_computation(tiny_handle):
    rng = np.random.default_rng(1)
    n_rows, d = tiny_handle.info.n_layers + 1, tiny_handle.info.hidden_size
    a = rng.normal(size=(n_rows, 3, d)).astype(np.float32)
    b = rng.normal(size=(n_rows, 3, d)).astype(np.float32)
    targets = [5, 17]
    lens = logit_lens_compare(tiny_handle, a, b, targets=targets, top_k=4, chunk=5)
    parts = model_parts(tiny_handle)
    w_norm = parts.final_norm.weight.detach().double().numpy()
    eps = float(parts.final_norm.variance_epsilon)
    w_u = parts.unembed.weight.detach().double().numpy()

    def log_softmax(x):
        h = x.astype(np.float64)
        h = h / np.sqrt((h**2).mean(-1, keepdims=True) + eps) * w_norm
        z = h @ w_u.T
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))

    la, lb = log_softmax(a), log_softmax(b)
    kl = (np.exp(la) * (la - lb)).sum(-1)
    np.testing.assert_allclose(lens.kl, kl, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(lens.retrieval.entropy, -(np.exp(la) * la).sum(-1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lens.parametric.entropy, -(np.exp(lb) * lb).sum(-1), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(lens.retrieval.topk_ids[..., 0], la.argmax(-1))
    np.testing.assert_array_equal(lens.path("parametric").topk_ids[..., 0], lb.argmax(-1))
    expected = lb[:, np.arange(2), targets]
    np.testing.assert_allclose(lens.parametric.target_logprob[:, :2], expected, rtol=1e-4, atol=1e-5)
    assert np.all(np.isnan(lens.retrieval.target_logprob[:, 2]))
    assert lens.retrieval.topk_probs.shape == (n_rows, 3, 4)


def test_lens_input_errors_are_value_errors(tiny_handle):
    with pytest.raises(ValueError, match="shape"):
        logit_lens_compare(tiny_handle, np.zeros((2, 1, 4)), np.zeros((2, 1, 5)))
    with pytest.raises(ValueError, match="top_k"):
        logit_lens_compare(tiny_handle, np.zeros((2, 1, 4)), np.zeros((2, 1, 4)), top_k=0)


def test_radar_attention_features():
    entropy = np.array([[0.5, 2.0, 1.49], [3.0, 1.5, 0.1]])
    assert specialized_heads(entropy, 1.5) == 3  # strictly below τ
    features = attention_specialization(entropy, 1.5)
    mean = entropy.mean()
    assert features["num_specialized_heads"] == 3
    assert features["attention_entropy"] == pytest.approx(mean)
    assert features["head_specialization_score"] == pytest.approx(1 - mean / 3)
    assert features["reasoning_head_activation"] == pytest.approx(mean / 3)
    assert features["factual_head_activation"] == pytest.approx(1 / (mean + 1e-8))
    with pytest.raises(ValueError, match="layers, heads"):
        specialized_heads(np.zeros(3))


def test_target_probability_is_the_exponential_of_the_target_log_probability(tiny_handle):
    rng = np.random.default_rng(2)
    n_rows, d = tiny_handle.info.n_layers + 1, tiny_handle.info.hidden_size
    a = rng.normal(size=(n_rows, 2, d)).astype(np.float32)
    lens = logit_lens_compare(tiny_handle, a, a[::-1].copy(), targets=[3], top_k=2)
    for path in (lens.retrieval, lens.parametric):
        p = path.target_probability()
        np.testing.assert_array_equal(p[:, 0], np.exp(path.target_logprob[:, 0]))
        assert np.isnan(p[:, 1]).all(), "no target at the last position"
        assert ((p[:, 0] > 0) & (p[:, 0] <= 1)).all()
