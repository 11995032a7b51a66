"""core.engine.scoring: γ, the largest log-ratio over the vocabulary, as RePCS Lemma III.3 uses it (issue 11)."""

from __future__ import annotations

import numpy as np
import torch

from core.engine import DualPathSettings, run_dual_path
from core.engine.scoring import score_paths


def test_vocabulary_log_ratio_is_the_max_over_the_vocabulary():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 50, generator=g) * 3, torch.randn(6, 50, generator=g) * 3
    ids = [int(i) for i in torch.randint(0, 50, (6,), generator=g)]
    scores = score_paths(a, b, ids, 5)
    la = np.log(np.exp(a.double().numpy()) / np.exp(a.double().numpy()).sum(-1, keepdims=True))
    lb = np.log(np.exp(b.double().numpy()) / np.exp(b.double().numpy()).sum(-1, keepdims=True))
    want = np.abs(la - lb).max(-1)
    np.testing.assert_allclose(scores.vocab_log_ratio, want, rtol=1e-4, atol=1e-4)
    realised = np.abs(la[np.arange(6), ids] - lb[np.arange(6), ids])
    assert np.all(scores.vocab_log_ratio >= realised - 1e-5)
    assert np.any(scores.vocab_log_ratio > realised + 1e-3)  # the realised token understates it


def test_result_carries_both_gammas(tiny_handle):
    settings = DualPathSettings(max_new_tokens=5, score_window=5)
    res = run_dual_path(tiny_handle, "Who built it?", "Orrin built it in 1802.", settings, free_parametric=False)
    assert res.max_abs_log_ratio_vocab is not None
    assert res.max_abs_log_ratio_vocab >= res.max_abs_log_ratio
    assert "max_abs_log_ratio_vocab" in res.to_dict()
