"""core.engine.batch (issue 17, hardening): batched scoring keeps bounded logits (12) with the same results."""

from __future__ import annotations

import numpy as np
import torch

import core.engine.batch as batch
from core.engine import DualPathSettings, run_dual_path, score_batch
from core.engine.batch import rows_per_batch
from core.engine.scoring import score_paths

ROWS = [
    ("What is the capital of Veltria?", "The capital of Veltria is Marrowgate."),
    ("Who wrote the Lisk codex?", "The Lisk codex was written by Amel Doru in 1302."),
    ("What color are the trams?", "Trams in Lisk are painted ochre."),
    ("How tall is Mount Perrin?", "Mount Perrin rises 2,114 metres."),
]


def test_rows_per_batch_follows_the_stated_limit(tiny_handle):
    vocab = tiny_handle.info.vocab_size  # float32: 4 bytes per logit
    assert rows_per_batch(tiny_handle, 10, max_bytes=10 * vocab * 4 * 3) == 3
    assert rows_per_batch(tiny_handle, 10, max_bytes=10 * vocab * 4 * 3 - 1) == 2
    assert rows_per_batch(tiny_handle, 10, max_bytes=1) == 1  # never zero rows
    assert batch.MAX_LOGITS_BYTES == 1 << 30
    # the embedded model (V = 49,152, fp32) at 1,024 new tokens: 5 rows per sub-batch, all 8 at 640
    per_token_row = 49152 * 4
    assert (1 << 30) // (1024 * per_token_row) == 5 and (1 << 30) // (640 * per_token_row) >= 8


def test_a_batch_over_the_cap_is_split_with_the_same_results(tiny_handle, monkeypatch):
    settings = DualPathSettings(max_new_tokens=5, score_window=5)
    whole = score_batch(tiny_handle, ROWS, settings, noise_sigmas=(0.0, 0.1))
    calls: list[int] = []
    real = batch.generate_greedy

    def counting(handle, prompts, s, **kwargs):
        calls.append(len(prompts))
        return real(handle, prompts, s, **kwargs)

    monkeypatch.setattr(batch, "generate_greedy", counting)
    monkeypatch.setattr(batch, "MAX_LOGITS_BYTES", 2 * 5 * tiny_handle.info.vocab_size * 4)
    split = score_batch(tiny_handle, ROWS, settings, noise_sigmas=(0.0, 0.1))
    assert calls == [2, 2]
    for a, b in zip(whole, split, strict=True):
        assert b.retrieval.token_ids == a.retrieval.token_ids
        np.testing.assert_allclose(b.token_kl, a.token_kl, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.extras["noisy_repcs"]["z"], a.extras["noisy_repcs"]["z"], rtol=1e-5, atol=1e-6)


def test_scoring_in_position_slices_is_exactly_scoring_at_once(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    n, vocab = 37, 300
    a = torch.randn(n, vocab, generator=gen) * 3
    b = torch.randn(n, vocab, generator=gen) * 3
    ids = torch.randint(0, vocab, (n,), generator=gen).tolist()
    whole = score_paths(a, b, ids, 7)
    monkeypatch.setattr(batch, "SCORE_CHUNK_BYTES", 5 * vocab * 4)  # slices of 5 positions
    sliced = batch._score_row(a, b, ids, 7)
    np.testing.assert_array_equal(sliced.token_kl, whole.token_kl)
    for path in ("retrieval", "parametric"):
        for name in ("entropy", "logprob", "topk_ids", "topk_probs"):
            np.testing.assert_array_equal(getattr(getattr(sliced, path), name), getattr(getattr(whole, path), name))


def test_batched_results_still_equal_single_runs(tiny_handle, monkeypatch):
    monkeypatch.setattr(batch, "SCORE_CHUNK_BYTES", 3 * tiny_handle.info.vocab_size * 4)
    settings = DualPathSettings(max_new_tokens=7, score_window=7)
    for (query, context), res in zip(ROWS, score_batch(tiny_handle, ROWS, settings), strict=True):
        single = run_dual_path(tiny_handle, query, context, settings, free_parametric=False)
        assert res.retrieval.token_ids == single.retrieval.token_ids
        np.testing.assert_allclose(res.token_kl, single.token_kl, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(res.retrieval.entropy, single.retrieval.entropy, rtol=1e-4, atol=1e-5)
