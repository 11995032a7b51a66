"""The OV copying score against the eigenvalues of the full vocabulary × vocabulary OV matrix of a tiny Llama
(grouped-query attention: 4 query heads, 2 key/value heads; untied embeddings)."""

from __future__ import annotations

import numpy as np
import pytest

from core.methods.redeep import copying_score, ov_copying_scores, ov_eigenvalues


def _full_ov(handle, layer: int, head: int) -> np.ndarray:
    model = handle.model
    attn = model.model.layers[layer].self_attn
    H, KV = model.config.num_attention_heads, model.config.num_key_value_heads
    dh = model.config.hidden_size // H
    g = head // (H // KV)
    W_V = attn.v_proj.weight.detach().double().numpy()[g * dh : (g + 1) * dh]  # (dh, d)
    W_O = attn.o_proj.weight.detach().double().numpy()[:, head * dh : (head + 1) * dh]  # (d, dh)
    W_E = model.get_input_embeddings().weight.detach().double().numpy().T  # (d, V)
    W_U = model.lm_head.weight.detach().double().numpy()  # (V, d)
    return W_U @ W_O @ W_V @ W_E  # (V, V)


def test_the_small_eigenproblem_has_the_full_ov_matrix_nonzero_eigenvalues(tiny_handle):
    small = ov_eigenvalues(tiny_handle)
    scores = ov_copying_scores(tiny_handle)
    L, H = tiny_handle.info.n_layers, tiny_handle.info.n_heads
    assert scores.shape == (L, H) and len(small) == L and len(small[0]) == H
    for layer, head in [(0, 0), (1, 3), (2, 2)]:
        full = np.linalg.eigvals(_full_ov(tiny_handle, layer, head))
        dh = small[layer][head].shape[0]
        top = full[np.argsort(-np.abs(full))][:dh]
        ours = small[layer][head]
        key = lambda z: (round(z.real, 6), round(z.imag, 6))  # noqa: E731
        np.testing.assert_allclose(sorted(top, key=key), sorted(ours, key=key), rtol=1e-6, atol=1e-8)
        assert np.abs(full[np.argsort(-np.abs(full))][dh:]).max() < 1e-8 * np.abs(top).max()
        assert scores[layer, head] == pytest.approx(copying_score(full), abs=1e-6)


def test_a_vocabulary_sample_restricts_both_sides(tiny_handle):
    vocab = np.arange(0, 200, 2)
    sampled = ov_eigenvalues(tiny_handle, vocab)
    idx = vocab
    full = _full_ov(tiny_handle, 1, 1)[np.ix_(idx, idx)]
    eig = np.linalg.eigvals(full)
    top = eig[np.argsort(-np.abs(eig))][: sampled[1][1].shape[0]]
    np.testing.assert_allclose(np.sort(np.abs(top)), np.sort(np.abs(sampled[1][1])), rtol=1e-6)
