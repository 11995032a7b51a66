"""The OV copying score for large vocabularies: ``G = Eᵀ U`` summed in slices of the vocabulary (no whole float64 copy
of the embedding) is the whole product, and gives the same copying scores."""

from __future__ import annotations

import numpy as np

import core.methods.redeep.ov as ov


def test_embed_unembed_in_slices_of_the_vocabulary_equals_the_whole(tiny_handle, monkeypatch):
    whole, scores = ov.embed_unembed(tiny_handle), ov.ov_copying_scores(tiny_handle)
    d = tiny_handle.info.hidden_size
    monkeypatch.setattr(ov, "OV_CHUNK_BYTES", 50 * d * 8)  # 50 vocabulary rows a slice: 6 slices of 258
    sliced = ov.embed_unembed(tiny_handle)
    np.testing.assert_allclose(sliced.numpy(), whole.numpy(), rtol=1e-12, atol=1e-12)
    E = tiny_handle.model.get_input_embeddings().weight.detach().double().numpy()
    U = tiny_handle.model.lm_head.weight.detach().double().numpy()
    np.testing.assert_allclose(sliced.numpy(), E.T @ U, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ov.ov_copying_scores(tiny_handle), scores, rtol=1e-9, atol=1e-12)
