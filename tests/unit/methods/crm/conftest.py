"""Fixtures of the CRM tests: one torch thread, synthetic displacements, a basis computed on the tiny model."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from core.methods import crm


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    """Every module here runs on one torch thread (``tests/conftest.py``)."""


def _synthetic(n: int = 60, layers: int = 5, dim: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Displacements whose scale grows with depth, a class signal in layer 3 and a dead layer 0."""
    rng = np.random.default_rng(seed)
    scales = np.array([0.0, 0.05, 1.0, 2.0, 4.0])[:layers]
    D = rng.normal(size=(n, layers, dim)) * scales[None, :, None]
    y = np.array([1, 0] * (n // 2))
    D[y == 1, 3, 0] += 6.0
    return D, y


@pytest.fixture
def synthetic() -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """``synthetic(n=60, layers=5, dim=8, seed=0) -> (D (n, layers, dim), labels (n,))``."""
    return _synthetic


@pytest.fixture(scope="module")
def tiny_basis(tiny_handle, tmp_path_factory):
    """The tiny model's basis computed from the bundled prompts into a fresh cache, and the progress calls."""
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("READ_OR_RECALL_CACHE", str(cache))
    calls: list[tuple[int, int]] = []
    basis = crm.compute_basis(tiny_handle, progress=lambda done, total: calls.append((done, total)))
    yield basis, calls
    mp.undo()
