"""RePCS Table IV noise: noisy Z_σ against an independent float64 computation, seeded draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.maths.noise import noisy_repcs_scores, row_seed


def _logits(seed: int, n: int = 5, v: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, v, generator=g) * 3, torch.randn(n, v, generator=g) * 3


def _kl64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    la = a - np.logaddexp.reduce(a, axis=-1, keepdims=True)
    lb = b - np.logaddexp.reduce(b, axis=-1, keepdims=True)
    return (np.exp(la) * (la - lb)).sum(-1)


def test_noisy_z_matches_float64_with_the_same_draw():
    retrieval, parametric = _logits(0)
    sigmas = (0.0, 0.1, 0.5)
    got = noisy_repcs_scores(retrieval, parametric, window=4, sigmas=sigmas, seed=7)
    g = torch.Generator().manual_seed(7)
    e_r = torch.randn(4, 50, generator=g).double().numpy()
    e_p = torch.randn(4, 50, generator=g).double().numpy()
    r, p = retrieval[:4].double().numpy(), parametric[:4].double().numpy()
    for s, z in zip(sigmas, got):
        assert z == pytest.approx(_kl64(r + s * e_r, p + s * e_p).sum(), rel=1e-5)
    assert got[0] == pytest.approx(_kl64(r, p).sum(), rel=1e-5)


def test_noise_is_seeded_and_grows_with_sigma():
    retrieval, parametric = _logits(1)
    a = noisy_repcs_scores(retrieval, retrieval.clone(), 5, (0.0, 0.02, 0.1, 1.0), seed=3)
    b = noisy_repcs_scores(retrieval, retrieval.clone(), 5, (0.0, 0.02, 0.1, 1.0), seed=3)
    assert a == b
    assert a[0] == pytest.approx(0.0, abs=1e-5)  # identical paths: Z = 0 without noise
    assert a[1] < a[2] < a[3]  # same draw scaled: KL between the noisy copies grows with σ
    assert row_seed(0, "q", "c") == row_seed(0, "q", "c") != row_seed(1, "q", "c")
    with pytest.raises(ValueError):
        noisy_repcs_scores(retrieval, parametric, 5, (-0.1,), seed=0)
