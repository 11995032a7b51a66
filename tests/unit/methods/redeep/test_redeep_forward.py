"""ReDeEP's traced forward against a by-hand computation from transformers' own outputs on a tiny Llama.

ECS: transformers' attentions and last hidden state (``hidden_states[-1]`` is the final-normed state for Llama,
checked by the unembedding reproducing the logits). PKS: the residual stream before the MLP rebuilt from the
attention module's output (a forward hook of the test's own on the model), the logit lens applied with the
model's own ``norm`` and ``lm_head`` in float64, and scipy's Jensen–Shannon distance squared (nats).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon

from core.engine.result import RETRIEVAL
from core.methods.internals import CONTEXT, prompt_segments
from core.methods.internals.replay import path_sequence, prepared_for
from core.methods.redeep import n_top, redeep_trace


def _by_hand(handle, result, k_percent=10.0):
    model = handle.model
    ids, _, prompt_len = path_sequence(handle, result, RETRIEVAL)
    n = len(result.answer_token_ids)
    rows = [prompt_len - 1 + t for t in range(n)]
    segments = prompt_segments(handle, prepared_for(handle, result), RETRIEVAL)
    context = np.array([i for i, s in enumerate(segments) if s == CONTEXT])
    k = n_top(k_percent, len(context))
    attn_out: dict[int, torch.Tensor] = {}
    mlp_out: dict[int, torch.Tensor] = {}
    hooks = []
    for i, layer in enumerate(model.model.layers):
        hooks.append(layer.self_attn.register_forward_hook(lambda m, a, o, i=i: attn_out.__setitem__(i, o[0])))
        hooks.append(layer.mlp.register_forward_hook(lambda m, a, o, i=i: mlp_out.__setitem__(i, o)))
    try:
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    finally:
        for hook in hooks:
            hook.remove()
    hs = [h[0].double() for h in out.hidden_states]
    last = hs[-1].numpy()
    with torch.inference_mode():
        assert np.allclose(model.lm_head(hs[-1].float()).numpy(), out.logits[0].numpy(), atol=1e-4)  # normed
    L, H = len(model.model.layers), model.config.num_attention_heads
    ecs = np.zeros((n, L, H))
    for layer in range(L):
        A = out.attentions[layer][0].double().numpy()
        for h in range(H):
            for t, row in enumerate(rows):
                top = context[np.argsort(-A[h, row, context], kind="stable")[:k]]
                e = last[top].mean(0)
                ecs[t, layer, h] = last[row] @ e / np.linalg.norm(last[row]) / np.linalg.norm(e)

    def lens(x):
        with torch.inference_mode():
            logits = model.lm_head(model.model.norm(x.float())).double()
        return torch.softmax(logits, -1).numpy()

    pks = np.zeros((n, L))
    for layer in range(L):
        mid = hs[layer] + attn_out[layer][0].double()
        post = mid + mlp_out[layer][0].double()
        p, q = lens(mid[rows]), lens(post[rows])
        pks[:, layer] = [jensenshannon(a, b) ** 2 for a, b in zip(p, q)]
    return ecs, pks, k, len(context)


def test_ecs_and_pks_match_a_by_hand_computation(tiny_handle, tiny_result):
    t = redeep_trace(tiny_handle, tiny_result)
    ecs, pks, k, n_ctx = _by_hand(tiny_handle, tiny_result)
    assert (t.n_top, t.n_context) == (k, n_ctx)
    assert t.ecs.shape == ecs.shape and t.pks.shape == pks.shape
    np.testing.assert_allclose(t.ecs, ecs, atol=1e-5)
    np.testing.assert_allclose(t.pks, pks, rtol=1e-3, atol=1e-6)
    assert np.all(t.pks >= 0) and np.all(t.pks <= math.log(2) + 1e-6)
    assert t.pks_refusal is None
    assert t.rows[0] == tiny_result.retrieval.prompt_len - 1


def test_a_larger_k_changes_ecs_and_keeps_pks(tiny_handle, tiny_result):
    base = redeep_trace(tiny_handle, tiny_result)
    wide = redeep_trace(tiny_handle, tiny_result, k_percent=100.0)
    ecs, _, k, n_ctx = _by_hand(tiny_handle, tiny_result, 100.0)
    assert wide.n_top == n_ctx == k
    np.testing.assert_allclose(wide.ecs, ecs, atol=1e-5)
    np.testing.assert_allclose(wide.pks, base.pks, atol=1e-6)
    assert not np.allclose(wide.ecs, base.ecs)


def test_pks_of_chosen_layers_only_equals_the_full_computation_there(tiny_handle, tiny_result):
    """A detector asks only for its chosen layers: the same PKS there, NaN elsewhere, ECS unchanged."""
    full = redeep_trace(tiny_handle, tiny_result)
    chosen = redeep_trace(tiny_handle, tiny_result, layers=[1])
    np.testing.assert_array_equal(chosen.pks[:, 1], full.pks[:, 1])
    assert np.isnan(np.delete(chosen.pks, 1, axis=1)).all()
    np.testing.assert_array_equal(chosen.ecs, full.ecs)


def test_no_pks_when_not_asked_and_the_window_bounds_the_tokens(tiny_handle, tiny_result):
    t = redeep_trace(tiny_handle, tiny_result, pks=False)
    assert t.pks is None and t.pks_refusal is None
    assert t.n_tokens == min(len(tiny_result.answer_token_ids), tiny_result.n_scored)


def test_refusals(tiny_handle, tiny_result):
    from dataclasses import replace

    empty = replace(tiny_result, retrieval=replace(tiny_result.retrieval, token_ids=[], tokens=[]))
    with pytest.raises(ValueError, match="empty"):
        redeep_trace(tiny_handle, empty)
