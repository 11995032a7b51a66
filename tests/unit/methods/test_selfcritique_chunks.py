"""Self-Critique's entropy material in slices of positions (large vocabularies): the same top log-probabilities and
full entropies as the whole computation."""

from __future__ import annotations

import numpy as np
import torch

import core.maths.divergence as div
from core.methods.selfcritique import _entropy_material


def test_entropy_material_in_slices_equals_the_whole(monkeypatch):
    logits = torch.randn(9, 120, generator=torch.Generator().manual_seed(0)) * 4
    top, full = _entropy_material(logits)
    monkeypatch.setattr(div, "CHUNK_BYTES", 2 * 4 * 120)  # two positions a slice
    top_s, full_s = _entropy_material(logits)
    np.testing.assert_allclose(top_s, top, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(full_s, full, rtol=1e-6, atol=1e-6)
    lp = torch.log_softmax(logits.double(), -1)
    np.testing.assert_allclose(full, (-(lp.exp() * lp).sum(-1)).numpy(), rtol=1e-5, atol=1e-6)
