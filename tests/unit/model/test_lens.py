"""core.model.lens in slices (large vocabularies): the sliced lens equals the whole one, and the logit-lens comparison
of the internals pages gives the same numbers whatever its slice size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import core.model.lens as lens
from core.methods.internals.lens import logit_lens_compare
from core.model.lens import lens_log_probs, lens_log_probs_chunks, lens_rows_per_chunk


@pytest.fixture
def states(tiny_handle):
    gen = torch.Generator().manual_seed(3)
    return torch.randn(11, tiny_handle.info.hidden_size, generator=gen)


def test_the_lens_in_slices_equals_the_whole_lens(tiny_handle, states):
    budget = 4 * 4 * tiny_handle.info.vocab_size  # four rows a slice
    assert lens_rows_per_chunk(tiny_handle, budget) == 4
    pieces = list(lens_log_probs_chunks(tiny_handle, states, budget=budget))
    assert [(s.start, s.stop) for s, _ in pieces] == [(0, 4), (4, 8), (8, 11)]
    whole = lens_log_probs(tiny_handle, states)
    torch.testing.assert_close(torch.cat([lp for _, lp in pieces]), whole, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"states must be \(N, d\)"):
        next(lens_log_probs_chunks(tiny_handle, states[None]))


def test_the_lens_comparison_does_not_depend_on_its_slices(tiny_handle, monkeypatch):
    gen = np.random.default_rng(0)
    shape = (tiny_handle.info.n_layers + 1, 5, tiny_handle.info.hidden_size)
    a, b = gen.standard_normal(shape).astype(np.float32), gen.standard_normal(shape).astype(np.float32)
    whole = logit_lens_compare(tiny_handle, a, b, targets=[1, 2, 3], top_k=3, chunk=10_000)
    monkeypatch.setattr(lens, "LENS_CHUNK_BYTES", 3 * 4 * tiny_handle.info.vocab_size)  # default: 3 rows a slice
    sliced = logit_lens_compare(tiny_handle, a, b, targets=[1, 2, 3], top_k=3)
    np.testing.assert_allclose(sliced.kl, whole.kl, rtol=1e-5, atol=1e-6)
    for path in ("retrieval", "parametric"):
        got, want = sliced.path(path), whole.path(path)
        np.testing.assert_allclose(got.entropy, want.entropy, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got.topk_ids, want.topk_ids)
        np.testing.assert_allclose(got.target_logprob, want.target_logprob, rtol=1e-5, atol=1e-6)
    # the full KL, independently: softmax of the model's own unembedding of each state
    lp_a = torch.log_softmax(lens.lens_log_probs(tiny_handle, a.reshape(-1, shape[-1])).double(), -1)
    lp_b = torch.log_softmax(lens.lens_log_probs(tiny_handle, b.reshape(-1, shape[-1])).double(), -1)
    kl = (lp_a.exp() * (lp_a - lp_b)).sum(-1).reshape(shape[0], shape[1]).numpy()
    np.testing.assert_allclose(sliced.kl, kl, rtol=1e-4, atol=1e-5)
