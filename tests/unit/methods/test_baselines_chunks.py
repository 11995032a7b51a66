"""core.methods.baselines for large vocabularies: the context's statistics in slices of rows, and from the last
layer's states through the lens (no whole positions × V logits), equal the one-forward computation."""

from __future__ import annotations

import numpy as np
import torch

import core.maths.divergence as div
import core.methods.baselines as baselines
from core.methods.baselines import context_ids, context_token_stats, stats_from_logits, stats_from_states
from core.model.trace import ALL, trace

TEXT = "The tower of Quillmere stands by the old harbour, where salt traders met in 1412."


def _close(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b) == ["logprob", "mu", "sigma"]
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_stats_in_slices_of_rows_equal_the_whole(tiny_handle, monkeypatch):
    ids = context_ids(tiny_handle, TEXT)
    logits = tiny_handle.forward(input_ids=torch.tensor([ids]), use_cache=False).logits[0, :-1]
    whole = stats_from_logits(logits, ids)
    monkeypatch.setattr(div, "CHUNK_BYTES", 3 * 8 * tiny_handle.info.vocab_size)  # three rows of float64 a slice
    sliced = stats_from_logits(logits, ids)
    assert whole["logprob"].shape == (len(ids) - 1,)
    _close(sliced, whole)
    np.testing.assert_allclose(
        whole["logprob"], torch.log_softmax(logits.double(), -1)[range(len(ids) - 1), ids[1:]].numpy()
    )


def test_a_long_text_is_scored_from_states_through_the_lens(tiny_handle, monkeypatch):
    whole = context_token_stats(tiny_handle, TEXT)  # one forward's logits
    monkeypatch.setattr(baselines, "FULL_LOGITS_BYTES", 0)  # every text "too long": the states path
    monkeypatch.setattr(div, "CHUNK_BYTES", 4 * 8 * tiny_handle.info.vocab_size)
    _close(context_token_stats(tiny_handle, TEXT), whole)
    ids = context_ids(tiny_handle, TEXT)
    states = trace(tiny_handle, [ids], positions=ALL).residual[0][-1]
    _close(stats_from_states(tiny_handle, states[:-1], ids), whole)
