"""CRM's back-projection in slices of the vocabulary (large vocabularies, half-precision unembeddings): the same
tokens and scores as the whole product."""

from __future__ import annotations

import numpy as np
import torch

from core.methods.crm.vocab import back_projection


def test_back_projection_in_slices_of_the_vocabulary_equals_the_whole():
    gen = torch.Generator().manual_seed(0)
    unembed = torch.randn(997, 24, generator=gen)
    directions = np.random.default_rng(1).standard_normal((6, 24))
    whole = back_projection(unembed, directions, k=8)
    sliced = back_projection(unembed, directions, k=8, budget=6 * 4 * 50)  # 50 vocabulary rows a slice
    for key in whole:
        np.testing.assert_array_equal(sliced[key], whole[key], err_msg=key)
    scores = directions.astype(np.float32) @ unembed.numpy().T
    np.testing.assert_array_equal(whole["top_ids"], np.argsort(-scores, axis=1, kind="stable")[:, :8])


def test_a_half_precision_unembedding_is_scored_in_float32_slices():
    unembed = torch.randn(300, 16, generator=torch.Generator().manual_seed(2)).half()
    directions = np.random.default_rng(3).standard_normal((4, 16))
    got = back_projection(unembed, directions, k=5)
    want = back_projection(unembed.float(), directions, k=5)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
