"""RADAR's logit-lens features in slices of layers (large vocabularies): the same 37 features."""

from __future__ import annotations

import numpy as np

import core.maths.divergence as div
from core.methods import radar


def test_features_in_slices_of_layers_equal_the_whole(tiny_handle, monkeypatch):
    whole, trace = radar.extract_features(tiny_handle, "The capital of France is")
    monkeypatch.setattr(div, "CHUNK_BYTES", 4 * tiny_handle.info.vocab_size)  # one layer a slice
    sliced, trace_s = radar.extract_features(tiny_handle, "The capital of France is")
    assert list(sliced) == list(whole)
    np.testing.assert_allclose(list(sliced.values()), list(whole.values()), rtol=1e-6, atol=1e-7)
    assert trace_s.top_token_ids == trace.top_token_ids
    np.testing.assert_allclose(trace_s.entropy, trace.entropy, rtol=1e-6, atol=1e-7)
