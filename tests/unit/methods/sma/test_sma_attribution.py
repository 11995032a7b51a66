"""SMA's captum wiring (core.methods.sma.attribution), with no language model: the attributions recover a
planted linear influence, the ridge is eq. 16 in float64, and the seed is local to the call."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from core.methods.sma import SMASettings, draw_masks, run_captum, seeded_permutations

PLANTED = np.array([0.5, -0.3, 0.0, 0.0, 0.2, 0.0, 0.8, -0.1, 0.05, 0.0])
CONSTANT = 0.3


def _synthetic(weights: np.ndarray, constant: float, noise: float = 0.0, seed: int = 0):
    """A scorer with no language model: r = c + Σ_j w_j m_j (+ noise); records what captum asked for."""
    rng = np.random.default_rng(seed)
    seen: list[np.ndarray] = []
    prompts_seen: list[str] = []

    def score(prompts: list[str], masks: torch.Tensor) -> list[float]:
        m = masks.numpy().astype(np.float64)
        seen.append(m)
        prompts_seen.extend(prompts)
        return list(constant + m @ weights + noise * rng.normal(size=m.shape[0]))

    return score, seen, prompts_seen


def _nonlinear(prompts: list[str], masks: torch.Tensor) -> list[float]:
    """A score with interactions, so that Shapley sampling's result depends on the permutations drawn."""
    m = masks.numpy().astype(np.float64)
    return list(np.tanh(m @ PLANTED) + 0.4 * m[:, 0] * m[:, 3] - 0.3 * m[:, 1] * m[:, 6])


def _run(method: str, score, *, masks=None, n_samples=64, fit_intercept=True, alpha=1e-3, batch_size=8, seed=1):
    units = [f"w{j} " for j in range(PLANTED.size)]
    return run_captum(
        method, units, [""] * len(units), lambda values: "".join(values), score,
        n_samples=n_samples, masks=masks, alpha=alpha, fit_intercept=fit_intercept, batch_size=batch_size, seed=seed,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Planted influence


def test_lime_ridge_recovers_a_planted_linear_influence() -> None:
    masks = draw_masks(128, PLANTED.size, np.random.default_rng(0))
    score, seen, prompts = _synthetic(PLANTED, CONSTANT, noise=0.01)
    beta, intercept = _run("lime", score, masks=masks)
    np.testing.assert_allclose(beta, PLANTED, atol=0.02)
    assert intercept == pytest.approx(CONSTANT, abs=0.02)
    np.testing.assert_array_equal(np.concatenate(seen), masks, err_msg="captum used our masks, in order")
    assert prompts[0] == "".join(f"w{j} " if m else "" for j, m in enumerate(masks[0])), "a 0 swaps in the baseline"


@pytest.mark.parametrize("method", ["ablation", "shapley"])
def test_ablation_and_shapley_recover_a_planted_linear_influence_exactly(method: str) -> None:
    score, seen, _ = _synthetic(PLANTED, CONSTANT)
    beta, intercept = _run(method, score, n_samples=3)
    np.testing.assert_allclose(beta, PLANTED, atol=1e-5)
    assert intercept is None
    expected = 1 + PLANTED.size if method == "ablation" else 1 + 3 * PLANTED.size
    assert sum(len(m) for m in seen) == expected == SMASettings(method=method, n_samples=3).generations(PLANTED.size)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_lime_ridge_is_eq16_in_float64(fit_intercept: bool) -> None:
    """β = (MᵀM + αI)⁻¹Mᵀr (eq. 16); with an intercept the same on centered M and r."""
    rng = np.random.default_rng(5)
    masks = draw_masks(40, PLANTED.size, rng)
    score, _, _ = _synthetic(PLANTED, CONSTANT, noise=0.2, seed=7)
    alpha = 0.7
    beta, _ = _run("lime", score, masks=masks, fit_intercept=fit_intercept, alpha=alpha)
    m = masks.astype(np.float64)
    r = CONSTANT + m @ PLANTED + 0.2 * np.random.default_rng(7).normal(size=40)
    if fit_intercept:
        m, r = m - m.mean(axis=0), r - r.mean()
    expected = np.linalg.solve(m.T @ m + alpha * np.eye(m.shape[1]), m.T @ r)
    np.testing.assert_allclose(beta, expected, atol=2e-4)


def test_without_intercept_every_beta_carries_the_mean_response() -> None:
    masks = draw_masks(256, PLANTED.size, np.random.default_rng(2))
    score, _, _ = _synthetic(np.zeros(PLANTED.size), 1.0)
    beta, _ = _run("lime", score, masks=masks, fit_intercept=False)
    assert np.all(beta > 0.1), "r ≡ 1 still gives every unit a large β without an intercept (eq. 16 as printed)"
    beta_c, _ = _run("lime", score, masks=masks, fit_intercept=True)
    np.testing.assert_allclose(beta_c, 0.0, atol=1e-6)


def test_bad_method_and_lime_without_masks() -> None:
    score, _, _ = _synthetic(PLANTED, CONSTANT)
    with pytest.raises(ValueError, match="method must be one of"):
        _run("kernelshap", score)
    with pytest.raises(ValueError, match="pre-drawn masks"):
        _run("lime", score)
    with pytest.raises(ValueError, match="at least one unit"):
        run_captum("ablation", [], [], lambda v: "", score, n_samples=1)


# ----------------------------------------------------------------------------------------------------------
# Seeds are local


def test_seeded_permutations_match_torch_manual_seed_and_leave_the_global_rng_alone() -> None:
    """The permutations are those ``torch.manual_seed(seed)`` + ``torch.randperm`` gave (the numbers of
    earlier releases), but drawn from a generator of their own: torch's global RNG is neither read nor moved."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        expected = [torch.randperm(7).tolist() for _ in range(5)]
        torch.manual_seed(123)
        state = torch.get_rng_state()
        drawn = list(seeded_permutations(11)(7, 5))
        assert torch.equal(torch.get_rng_state(), state), "the process-wide RNG was not touched"
    assert drawn == expected


def test_shapley_result_does_not_depend_on_the_global_rng() -> None:
    """Reseeding or drawing from torch's global RNG in the middle of a run (what a concurrent run did when
    the seed was process-wide) leaves Shapley sampling's β unchanged."""
    solo, _ = _run("shapley", _nonlinear, n_samples=4, batch_size=3, seed=5)
    other, _ = _run("shapley", _nonlinear, n_samples=4, batch_size=3, seed=6)
    assert not np.allclose(solo, other), "the permutations matter for this score (else the test proves nothing)"

    def meddling(prompts: list[str], masks: torch.Tensor) -> list[float]:
        torch.manual_seed(5)  # another run starting with the same seed
        torch.rand(3)  # ... and drawing from it
        return _nonlinear(prompts, masks)

    with torch.random.fork_rng(devices=[]):
        again, _ = _run("shapley", meddling, n_samples=4, batch_size=3, seed=5)
    np.testing.assert_array_equal(again, solo)


def test_concurrent_shapley_runs_equal_a_solo_run() -> None:
    solo, _ = _run("shapley", _nonlinear, n_samples=6, batch_size=2, seed=3)
    barrier = threading.Barrier(3)

    def worker(seed: int) -> np.ndarray:
        barrier.wait()
        return _run("shapley", _nonlinear, n_samples=6, batch_size=2, seed=seed)[0]

    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(worker, seed) for seed in (3, 3, 4)]
        results = [f.result() for f in futures]
    np.testing.assert_array_equal(results[0], solo)
    np.testing.assert_array_equal(results[1], solo)
