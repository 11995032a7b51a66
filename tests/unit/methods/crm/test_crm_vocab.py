"""core.methods.crm.vocab: which directions are defined (non-zero) and unit directions, against numpy by hand."""

from __future__ import annotations

import numpy as np

from core.methods.crm.vocab import back_projection, unit_directions, vocabulary_projection


def test_a_zero_direction_is_not_defined_and_the_others_are():
    rng = np.random.default_rng(4)
    V = rng.normal(size=(4, 6))
    V[0] = 0.0
    V[2] = 1e-30  # tiny, not zero: still defined (the check is done in float64)
    out = back_projection(rng.normal(size=(30, 6)), V, k=3)
    assert out["defined"].tolist() == [False, True, True, True]
    assert out["defined"].dtype == bool


def test_unit_directions_have_norm_one_or_stay_zero():
    d = np.array([[3.0, 4.0], [0.0, 0.0], [-1.0, 0.0]], dtype=np.float32)
    u = unit_directions(d)
    np.testing.assert_allclose(u, [[0.6, 0.8], [0.0, 0.0], [-1.0, 0.0]], rtol=0, atol=1e-12)
    assert u.dtype == np.float64 and np.isfinite(u).all()


def test_a_runs_projection_is_its_normalized_displacement_projected(tiny_handle):
    rng = np.random.default_rng(5)
    d = rng.normal(size=(tiny_handle.info.n_layers + 1, tiny_handle.info.hidden_size)).astype(np.float32)
    d[0] = 0.0  # the embedding row of a displacement is zero: nothing to read
    out = vocabulary_projection(tiny_handle, unit_directions(d), k=3)
    by_hand = d.astype(np.float64) / np.maximum(np.linalg.norm(d.astype(np.float64), axis=1, keepdims=True), 1e-300)
    again = vocabulary_projection(tiny_handle, by_hand, k=3)
    np.testing.assert_array_equal(out["top_ids"], again["top_ids"])
    assert out["defined"].tolist() == [False] + [True] * tiny_handle.info.n_layers
