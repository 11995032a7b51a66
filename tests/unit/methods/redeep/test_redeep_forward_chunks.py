"""ReDeEP's PKS in slices (large vocabularies): a layer whose rows exceed the lens budget is read in slices of
answer rows, and gives the PKS of the whole computation."""

from __future__ import annotations

import numpy as np

import core.methods.redeep.forward as forward
from core.methods.redeep import redeep_trace


def test_pks_in_slices_of_rows_equals_the_whole_lens(tiny_handle, tiny_result, monkeypatch):
    whole = redeep_trace(tiny_handle, tiny_result)
    vocab = tiny_handle.info.vocab_size
    monkeypatch.setattr(forward, "PKS_LENS_BYTES", 2 * 2 * 4 * vocab)  # two answer rows a slice, one layer a product
    sliced = redeep_trace(tiny_handle, tiny_result)
    assert len(whole.rows) > 2  # more than one slice
    assert sliced.pks.shape == whole.pks.shape
    np.testing.assert_allclose(sliced.pks, whole.pks, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(sliced.ecs, whole.ecs)
