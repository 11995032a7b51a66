"""core.maths.divergence in slices of rows (large vocabularies): the sliced KL and entropy equal the whole
computation, the slices cover every row once, and a reduction over another dimension is left whole."""

from __future__ import annotations

import pytest
import torch

import core.maths.divergence as div
from core.maths.divergence import entropy, kl_divergence, log_probs, row_slices, rows_per_chunk


def _whole_kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    p = logp.exp()
    return torch.where(p > 0, p * (logp - logq), torch.zeros_like(p)).sum(-1).clamp_min(0.0)


def test_row_slices_cover_every_row_once_within_the_budget():
    assert rows_per_chunk(262_144) == 64 and rows_per_chunk(49_152) == 341  # 64 MiB of float32
    assert rows_per_chunk(10, itemsize=8, budget=200) == 2 and rows_per_chunk(10**9) == 1
    slices = list(row_slices(11, 10, budget=120))  # 3 rows of 10 float32 a slice
    assert [(s.start, s.stop) for s in slices] == [(0, 3), (3, 6), (6, 9), (9, 11)]
    assert list(row_slices(0, 10)) == []


@pytest.mark.parametrize("shape", [(7, 50), (3, 5, 50)])
def test_sliced_kl_and_entropy_equal_the_whole_computation(monkeypatch, shape):
    gen = torch.Generator().manual_seed(0)
    logp = log_probs(torch.randn(shape, generator=gen) * 3)
    logq = log_probs(torch.randn(shape, generator=gen) * 3)
    logq[..., 0] = -torch.inf  # a token Q rules out: infinite terms stay where they are
    whole_kl, whole_h = kl_divergence(logp, logq), entropy(logp)
    monkeypatch.setattr(div, "CHUNK_BYTES", 2 * 50 * 4)  # two rows a slice
    sliced_kl, sliced_h = kl_divergence(logp, logq), entropy(logp)
    assert sliced_kl.shape == shape[:-1] and sliced_h.shape == shape[:-1]
    torch.testing.assert_close(sliced_kl, whole_kl, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sliced_h, whole_h, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sliced_kl, _whole_kl(logp, logq))  # the formula, computed independently
    expected_h = -(logp.exp() * logp).sum(-1)
    torch.testing.assert_close(sliced_h, expected_h, rtol=1e-5, atol=1e-6)


def test_a_reduction_over_another_dimension_is_not_sliced(monkeypatch):
    monkeypatch.setattr(div, "CHUNK_BYTES", 4)
    logp = log_probs(torch.randn(6, 4), dim=0)
    assert entropy(logp, dim=0).shape == (4,)
    torch.testing.assert_close(entropy(logp, dim=0), -(logp.exp() * logp).sum(0))
