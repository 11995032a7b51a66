"""The seeded noise field and the noise formula (pure tensors, no model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.methods.ablation.noise import NOISE_BLOCK, NoiseTable, apply_noise, noise_field, token_sigma


def test_noise_field_depends_only_on_seed_layer_position():
    d = 256
    positions = list(range(3 * NOISE_BLOCK + 5))
    full = noise_field(7, 2, positions, d)
    # any grouping of positions (one at a time, reversed, scattered) gives the same rows
    one_by_one = torch.cat([noise_field(7, 2, [p], d) for p in positions])
    assert torch.equal(full, one_by_one)
    scattered = [130, 3, 64, 63, 0]
    assert torch.equal(noise_field(7, 2, scattered, d), full[scattered])
    # other seeds, layers and positions give other draws
    assert not torch.equal(noise_field(8, 2, positions, d), full)
    assert not torch.equal(noise_field(7, 1, positions, d), full)
    assert not torch.equal(full[0], full[1])
    # standard normal (loose moments over ~50k draws)
    assert abs(float(full.mean())) < 0.02 and abs(float(full.std()) - 1.0) < 0.02
    assert full.dtype == torch.float32
    with pytest.raises(ValueError):
        noise_field(7, 2, [-1], d)


def test_noise_table_matches_the_field_whatever_order_it_grows_in():
    d = 8
    table = NoiseTable(3, d)
    late = torch.tensor([[200, 201]])
    early = torch.tensor([[0, 1, 2], [5, 6, 7]])
    assert torch.equal(table.lookup(1, early), noise_field(3, 1, early.flatten(), d).reshape(2, 3, d))
    assert torch.equal(table.lookup(1, late), noise_field(3, 1, late.flatten(), d).reshape(1, 2, d))
    assert table.lookup(1, torch.empty((1, 0), dtype=torch.long)).shape == (1, 0, d)


def test_apply_noise_is_the_paper_formula_in_float32():
    h = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    z = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    out = apply_noise(h, z, 0.3)
    assert out.dtype == torch.bfloat16 and out.shape == h.shape
    h64 = h.double().numpy()
    expected = h64 + 0.3 * h64.std(axis=-1, keepdims=True) * z.double().numpy()
    np.testing.assert_allclose(out.double().numpy(), expected, rtol=1e-2, atol=1e-2)
    assert torch.equal(apply_noise(h, z, 0.0), h)
    assert token_sigma(h).shape == (2, 5, 1) and token_sigma(h).dtype == torch.float32
