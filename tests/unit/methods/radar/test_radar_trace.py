"""RADAR's instrumented forward pass on the tiny random Llama, against an independent forward pass."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core.methods import radar


def _rmsnorm(x: np.ndarray, norm: torch.nn.Module) -> np.ndarray:
    eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
    w = norm.weight.detach().double().numpy()
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def test_trace_matches_an_independent_forward_pass(tiny_handle):
    text = "The capital of France is"
    trace = radar.trace_prompt(tiny_handle, text)
    model = tiny_handle.model
    L, H = tiny_handle.info.n_layers, tiny_handle.info.n_heads
    ids = tiny_handle.tokenizer(text)["input_ids"]
    raw = {}
    handle = model.model.layers[-1].register_forward_hook(
        lambda m, a, o: raw.setdefault("h", o[0] if isinstance(o, tuple) else o)
    )
    try:
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    finally:
        handle.remove()
    assert trace.token_ids == ids and trace.n_layers == L and trace.head_entropy.shape == (L, H)

    # attention entropy H_l,h = −Σ_{i,j} A log A, float64
    for layer in range(L):
        A = out.attentions[layer][0].double().numpy()
        terms = np.where(A > 0, A * np.log(np.where(A > 0, A, 1.0)), 0.0)
        np.testing.assert_allclose(trace.head_entropy[layer], -terms.sum(axis=(1, 2)), rtol=1e-4, atol=1e-5)

    # logit lens: lm_head(final_norm(h_l)) at the last position; the last layer is the raw residual stream
    states = [out.hidden_states[i][0].double().numpy() for i in range(1, L)] + [raw["h"][0].double().numpy()]
    W = model.lm_head.weight.detach().double().numpy()
    for layer, h in enumerate(states):
        logits = W @ _rmsnorm(h[-1], model.model.norm)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        assert trace.confidence[layer] == pytest.approx(p.max(), rel=1e-4)
        assert trace.entropy[layer] == pytest.approx(-(p * np.log(p)).sum(), rel=1e-4, abs=1e-5)
        assert trace.layer_variance[layer] == pytest.approx(h.var(), rel=1e-5)
        assert trace.layer_norm[layer] == pytest.approx(np.linalg.norm(h, axis=-1).mean(), rel=1e-5)
    final = torch.softmax(out.logits[0, -1].double(), -1)
    assert trace.confidence[-1] == pytest.approx(float(final.max()), rel=1e-4)

    features = radar.features_from_trace(trace)
    he = -np.array(
        [
            [np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0)), 0.0).sum() for a in att[0].double().numpy()]
            for att in out.attentions
        ]
    )
    assert features["attention_entropy"] == pytest.approx(he.mean(), rel=1e-4)
    assert features["num_specialized_heads"] == float((he < 1.5).sum())


def _hook_count(model: torch.nn.Module) -> int:
    """Forward and forward-pre hooks registered anywhere in ``model``."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _trace_fails_under(handle, module: torch.nn.Module, hook, error: type[Exception], match: str) -> None:
    """With ``hook`` on ``module``, ``trace_prompt`` raises ``error`` (``match``) and leaves no hook of its own."""
    before = _hook_count(handle.model)
    extra = module.register_forward_hook(hook)
    try:
        with pytest.raises(error, match=match):
            radar.trace_prompt(handle, "hello")
    finally:
        extra.remove()
    assert _hook_count(handle.model) == before


def test_trace_leaves_no_hooks_even_on_error(tiny_handle):
    before = _hook_count(tiny_handle.model)
    radar.trace_prompt(tiny_handle, "hello")
    assert _hook_count(tiny_handle.model) == before

    def boom(module, args, output):
        raise RuntimeError("boom")

    _trace_fails_under(tiny_handle, tiny_handle.model.model.layers[1], boom, RuntimeError, "boom")


def test_one_token_prompt_gives_37_finite_features(tiny_handle):
    features, trace = radar.extract_features(tiny_handle, "a")
    assert len(trace.token_ids) == 1
    assert list(features) == list(radar.FEATURE_NAMES)
    assert all(math.isfinite(v) for v in features.values())
    L, H = tiny_handle.info.n_layers, tiny_handle.info.n_heads
    assert features["attention_entropy"] == 0.0  # one position attends to itself with weight 1
    assert features["num_specialized_heads"] == L * H
    assert features["state_rank_evolution"] == pytest.approx(0.0)
    assert features["effective_circuit_depth"] == L


def test_long_and_odd_prompts_are_finite(tiny_handle):
    long_text = "If a store has 100 items and sells 30% of them, how many items remain? " * 3
    for text in [long_text, "émoji 🚀 <b>&amp;</b>"]:
        features, _ = radar.extract_features(tiny_handle, text)
        assert len(features) == 37 and all(math.isfinite(v) for v in features.values())


def test_bad_prompts_raise(tiny_handle):
    for text in ["", "   \n"]:
        with pytest.raises(ValueError, match="empty"):
            radar.trace_prompt(tiny_handle, text)
    with pytest.raises(ValueError, match="limit"):
        radar.trace_prompt(tiny_handle, "x" * (tiny_handle.info.max_tokens + 5))


def test_radar_prompt():
    assert radar.radar_prompt("  What is 2+2? ") == "What is 2+2?"
    assert radar.radar_prompt("Q?", "  Some context. ") == "Some context.\n\nQ?"
    assert radar.radar_prompt("Q?", "   ") == "Q?"


def test_missing_attention_weights_raise_and_leave_no_hooks(tiny_handle):
    def drop_weights(module, args, output):  # what SDPA attention returns: no weights
        return (output[0], None)

    attention = tiny_handle.model.model.layers[1].self_attn
    _trace_fails_under(tiny_handle, attention, drop_weights, ValueError, "eager")
    assert not tiny_handle.is_busy()
