"""core.methods.internals.forward: hidden states and attention reduced on the fly, against transformers."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from core.methods.internals.forward import attention_pattern, instrumented_forward, layer_states
from core.methods.internals.segments import SEGMENTS
from core.model import trace as model_trace
from core.model.parts import model_parts


def test_layer_states_match_transformers_hidden_states(tiny_handle, tiny_ids, hf_forward):
    ids = tiny_ids("Layer states, checked one by one.")
    positions = [0, 5, -1]
    ours = layer_states(tiny_handle, ids, positions)
    n_layers = tiny_handle.info.n_layers
    assert ours.shape == (n_layers + 1, 3, tiny_handle.info.hidden_size)
    assert ours.dtype == np.float32
    hf = hf_forward(tiny_handle, ids, output_hidden_states=True).hidden_states
    rows = [0, 5, len(ids) - 1]
    for i in range(n_layers):  # index 0 = embeddings, i = output of decoder layer i − 1
        np.testing.assert_allclose(ours[i], hf[i][0, rows].numpy(), rtol=0, atol=1e-6)
    # transformers replaces the last entry by the normed state; ours is the raw output of the last layer
    norm = model_parts(tiny_handle).final_norm
    with torch.inference_mode():
        normed = norm(torch.from_numpy(ours[n_layers])).numpy()
    np.testing.assert_allclose(normed, hf[n_layers][0, rows].numpy(), rtol=0, atol=1e-5)


def test_attention_reductions_equal_full_attention(tiny_handle, tiny_ids, hf_forward):
    ids = tiny_ids("Attention is reduced inside the hook, one layer at a time.")
    T = len(ids)
    rng = np.random.default_rng(0)
    segments = rng.integers(0, len(SEGMENTS), size=T)
    rows = [2, 17, T - 1]
    capture = instrumented_forward(
        tiny_handle, ids, positions=rows, attention=True, rows=rows, segment_ids=segments.tolist(), head=(1, 2)
    )
    full = hf_forward(tiny_handle, ids, output_attentions=True).attentions  # L × (1, H, T, T)
    A = np.stack([a[0].numpy().astype(np.float64) for a in full])  # (L, H, T, T)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(A > 0, A * np.log(A), 0.0)
    expected_entropy = -plogp.sum(axis=-1)
    np.testing.assert_allclose(capture.entropy, expected_entropy, rtol=1e-5, atol=1e-5)
    onehot = np.eye(len(SEGMENTS))[segments]  # (T, S)
    expected_mass = np.einsum("lhrt,ts->lhrs", A[:, :, rows, :], onehot)
    np.testing.assert_allclose(capture.mass, expected_mass, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(capture.pattern, A[1, 2], rtol=1e-5, atol=1e-7)
    # the kept pieces are reductions: nothing of shape (L, H, T, T)
    assert capture.entropy.shape == (tiny_handle.info.n_layers, tiny_handle.info.n_heads, T)
    assert capture.mass.shape == (tiny_handle.info.n_layers, tiny_handle.info.n_heads, 3, len(SEGMENTS))


def test_attention_pattern_is_causal_and_normalized(tiny_handle, tiny_ids):
    ids = tiny_ids("Causal rows sum to one.")
    pattern = attention_pattern(tiny_handle, ids, 0, 3)
    assert pattern.shape == (len(ids), len(ids))
    np.testing.assert_allclose(pattern.sum(axis=1), 1.0, atol=1e-5)
    assert np.all(np.triu(pattern, k=1) == 0)


def test_hooks_are_removed_even_when_the_forward_fails(tiny_handle, tiny_ids, monkeypatch):
    parts = model_parts(tiny_handle)
    modules = [*parts.layers, *parts.attentions]

    def count() -> int:
        return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in modules)

    before = count()
    instrumented_forward(tiny_handle, tiny_ids("hooks"), attention=True, head=(0, 0))
    assert count() == before

    def boom(model, keep, **inputs):
        raise RuntimeError("forward failed")

    monkeypatch.setattr(model_trace, "run_model", boom)
    with pytest.raises(RuntimeError, match="forward failed"):
        instrumented_forward(tiny_handle, tiny_ids("hooks"), attention=True)
    assert count() == before
    free: list[bool] = []  # the model's lock was released too (asked from another thread: it is re-entrant)
    probe = threading.Thread(target=lambda: free.append(not tiny_handle.is_busy()))
    probe.start()
    probe.join()
    assert free == [True]


def test_input_errors_are_value_errors(tiny_handle):
    with pytest.raises(ValueError, match="empty"):
        layer_states(tiny_handle, [])
    with pytest.raises(ValueError, match="outside"):
        layer_states(tiny_handle, [1, 2, 3], positions=[3])
    with pytest.raises(ValueError, match="vocabulary"):
        layer_states(tiny_handle, [10**7])
    with pytest.raises(ValueError, match="head"):
        attention_pattern(tiny_handle, [1, 2, 3], tiny_handle.info.n_layers, 0)
    with pytest.raises(ValueError, match="segment_ids"):
        instrumented_forward(tiny_handle, [1, 2, 3], attention=True, rows=[1], segment_ids=[0, 1])
