"""ReDeEP's small maths against scipy / numpy computed independently."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from scipy.stats import pearsonr

from core.methods.redeep.maths import copying_score, cosine, jsd, n_top, pearson


def test_jsd_is_scipys_squared_jensen_shannon_distance_in_nats():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 200)) * 3
    other = rng.normal(size=(5, 200)) * 3
    lp = torch.log_softmax(torch.tensor(logits, dtype=torch.float32), -1)
    lq = torch.log_softmax(torch.tensor(other, dtype=torch.float32), -1)
    ours = jsd(lp, lq).numpy()
    assert ours.dtype == np.float32
    p, q = np.exp(lp.double().numpy()), np.exp(lq.double().numpy())
    expected = np.array([jensenshannon(a, b) ** 2 for a, b in zip(p, q)])  # natural log by default
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(jsd(lq, lp).numpy(), ours, atol=1e-6)  # symmetric
    assert np.all(ours <= math.log(2) + 1e-6)


def test_jsd_zero_for_equal_and_ln2_for_disjoint_distributions():
    lp = torch.log(torch.tensor([0.5, 0.5, 0.0, 0.0]))
    lq = torch.log(torch.tensor([0.0, 0.0, 0.25, 0.75]))
    assert float(jsd(lp, lq)) == pytest.approx(math.log(2), abs=1e-6)
    assert float(jsd(lp, lp)) == pytest.approx(0.0, abs=1e-7)


def test_jsd_in_slices_is_scipys_on_every_row_along_any_dim():
    """Rows wider than one slice (a 70,000-word vocabulary: 2 rows per 768 KiB slice) and 7 × 3 of them: each row's
    JSD is scipy's (float64), the sum over the vocabulary untouched by the slicing, ``dim`` honoured."""
    gen = torch.Generator().manual_seed(1)
    lp = torch.log_softmax(3 * torch.randn(7, 3, 70_000, generator=gen), -1)
    lq = torch.log_softmax(3 * torch.randn(7, 3, 70_000, generator=gen), -1)
    got = jsd(lp, lq)
    assert got.shape == (7, 3) and got.dtype == torch.float32
    p, q = lp.double().exp().numpy(), lq.double().exp().numpy()
    want = np.array([[jensenshannon(p[i, j], q[i, j]) ** 2 for j in range(3)] for i in range(7)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(jsd(lp.transpose(1, 2), lq.transpose(1, 2), dim=1).numpy(), got.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="one shape"):
        jsd(lp, lq[:, :2])


def test_cosine_matches_numpy_and_is_zero_for_a_zero_vector():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(4, 7)), rng.normal(size=(4, 7))
    expected = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    np.testing.assert_allclose(cosine(torch.tensor(a), torch.tensor(b)).numpy(), expected, atol=1e-6)
    assert float(cosine(torch.zeros(3), torch.ones(3))) == 0.0


@pytest.mark.parametrize(("k", "n", "expected"), [(10, 22, 3), (10, 5, 1), (10, 100, 10), (100, 7, 7), (50, 3, 2)])
def test_n_top(k, n, expected):
    assert n_top(k, n) == expected


def test_n_top_refuses_bad_arguments():
    with pytest.raises(ValueError, match="k_percent"):
        n_top(0, 10)
    with pytest.raises(ValueError, match="context token"):
        n_top(10, 0)


def test_copying_score():
    assert copying_score(np.array([1.0, 2.0, 3.0])) == pytest.approx(1.0)
    assert copying_score(np.array([1.0, -1.0])) == pytest.approx(0.0)
    assert copying_score(np.array([1 + 1j, 1 - 1j, -1.0])) == pytest.approx(1 / (2 * math.sqrt(2) + 1))
    assert copying_score(np.zeros(3)) == 0.0


def test_pearson_matches_scipy_and_is_zero_for_a_constant_column():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, size=40)
    x = rng.normal(size=(40, 3)) + y[:, None] * np.array([0.0, 1.0, -2.0])
    x[:, 0] = 5.0
    r = pearson(x, y)
    assert r[0] == 0.0
    for j in (1, 2):
        assert r[j] == pytest.approx(pearsonr(x[:, j], y).statistic, abs=1e-12)
    with pytest.raises(ValueError, match="two values"):
        pearson(x, np.ones(40))
