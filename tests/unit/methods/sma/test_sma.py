"""SMA: captum attributions recover a planted linear influence (no LLM), ridge = eq. 16 in float64, the
response score by hand, units and masks, the three-way labels, and runs on the tiny random Llama."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.model.embedder import embed
from core.methods.sma.legacy import (
    CONTEXT,
    NON_MEMBER,
    PRETRAINED,
    QUERY,
    RETRIEVED,
    SMAResult,
    SMASettings,
    baseline_of,
    classify_units,
    draw_masks,
    response_score,
    run_captum,
    run_context_ablation,
    run_sma,
    split_units,
    unicode_perturb,
)

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


def _run(method: str, score, *, masks=None, n_samples=64, fit_intercept=True, alpha=1e-3, batch_size=8):
    units = [f"w{j} " for j in range(PLANTED.size)]
    return run_captum(
        method, torch.nn.Linear(1, 1), units, [""] * len(units), lambda values: "".join(values), score,
        n_samples=n_samples, masks=masks, alpha=alpha, fit_intercept=fit_intercept, batch_size=batch_size, seed=1,
    )


# ----------------------------------------------------------------------------------------------------------
# Planted influence, no language model


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
    """β = (MᵀM + αI)⁻¹Mᵀr (eq. 16); with an intercept the same on centred M and r."""
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


# ----------------------------------------------------------------------------------------------------------
# Pieces


def test_response_score_by_hand() -> None:
    # γ₁ · Len(ŷ⁽ⁱ⁾)/Len(ŷ) + γ₂ · Sim: an answer of 6 tokens against a 8-token reference, similarity 0.75
    assert response_score(6 / 8, 0.75, 0.5, 0.5) == pytest.approx(0.5 * 0.75 + 0.5 * 0.75)
    assert response_score(2.0, -0.2, 0.3, 1.5) == pytest.approx(0.6 - 0.3)


@pytest.mark.parametrize(
    "text",
    ["What is the capital of Veltria?", "  Two  spaces\tand\nnewlines.  ", "Dr. Ada said: «Ja!» Then… she left.\n\nEnd",
     "emoji 🏰 and RTL שלום", "x"],
)
@pytest.mark.parametrize("granularity", ["token", "word", "sentence"])
def test_units_concatenate_to_the_text(text: str, granularity: str, tiny_handle) -> None:
    units = split_units(text, granularity, tiny_handle.tokenizer)
    assert "".join(units) == text and all(units)


def test_word_and_sentence_units() -> None:
    assert split_units("What is the capital?", "word") == ["What", " is", " the", " capital?"]
    assert split_units("It rains. It pours! Done", "sentence") == ["It rains.", " It pours!", " Done"]
    assert split_units("Line one\nLine two.", "sentence") == ["Line one", "\nLine two."], "whitespace starts the next unit"
    with pytest.raises(ValueError, match="granularity"):
        split_units("x", "paragraph")


def test_unicode_perturbation_changes_every_letter_and_keeps_whitespace() -> None:
    text = " Paris 2024, é!"
    out = unicode_perturb(text)
    assert out != text and len(out) == len(text) + 1  # é gets a combining mark
    assert not any(c.isascii() and c.isalnum() for c in out)
    assert [i for i, c in enumerate(out) if c == " "] == [0, 6, 12]
    assert baseline_of(" word", "remove") == ""


def test_masks_are_uniform_binary_with_no_empty_row() -> None:
    masks = draw_masks(500, 1, np.random.default_rng(0))
    assert masks.shape == (500, 1) and np.all(masks == 1), "a one-unit all-zero mask gets its 1 (Alg. 1)"
    masks = draw_masks(4000, 8, np.random.default_rng(1))
    assert set(np.unique(masks)) == {0, 1} and masks.sum(axis=1).min() >= 1
    assert masks.mean() == pytest.approx(0.5, abs=0.02)
    np.testing.assert_array_equal(draw_masks(5, 3, np.random.default_rng(9)), draw_masks(5, 3, np.random.default_rng(9)))


def test_three_way_labels() -> None:
    beta_first = np.array([0.2, 0.1, 0.0, 0.0, 0.0, 0.0, 0.05])
    ads = np.array([-0.5, 0.0, 0.05, -0.1, 0.1, 0.3, -0.3])
    assert classify_units(beta_first, ads) == [
        PRETRAINED, PRETRAINED, NON_MEMBER, NON_MEMBER, RETRIEVED, RETRIEVED, RETRIEVED,
    ]
    assert classify_units(beta_first, ads, tau1=-0.1, tau2=0.1) == classify_units(beta_first, ads), "band order"
    assert classify_units(beta_first, ads, tau=10.0)[:2] == [RETRIEVED, NON_MEMBER]
    with pytest.raises(ValueError):
        classify_units(np.zeros(2), np.zeros(3))


# ----------------------------------------------------------------------------------------------------------
# Runs on the tiny random Llama


@pytest.fixture(scope="module")
def tiny_sma(tiny_handle):
    progress: list[tuple[int, int, str]] = []
    settings = SMASettings(n_samples=6, max_new_tokens=4, scope="query+context", batch_size=4)
    result = run_sma(tiny_handle, "Who founded Veltria?", "Ada founded it. Marrowgate is old.", settings,
                     on_progress=lambda d, t, s: progress.append((d, t, s)))
    return result, progress


def test_run_uses_the_same_perturbed_query_with_and_without_the_context(tiny_sma) -> None:
    result, progress = tiny_sma
    nq = int(result.query_mask.sum())
    assert [u.text for u in result.units if u.segment == QUERY] == ["Who", " founded", " Veltria?"]
    assert [u.segment for u in result.units][nq:] == [CONTEXT] * (len(result.units) - nq)
    assert [s.mask[:nq] for s in result.on.samples] == [s.mask for s in result.off.samples]
    assert "Ada founded" in result.on.prompt and "Ada founded" not in result.off.prompt
    np.testing.assert_array_equal(result.beta_off[nq:], 0.0)
    np.testing.assert_allclose(result.ads, result.beta_on - result.beta_off)
    assert progress[-1][0] == progress[-1][1] == (1 + 6) * 2, "progress reaches the planned total"
    assert result.membership_score() == pytest.approx(np.abs(result.ads[:nq]).mean())


def test_run_response_scores_by_hand(tiny_sma) -> None:
    """Every recorded r equals γ₁·Len(ŷ⁽ⁱ⁾)/Len(ŷ) + γ₂·cos(embed(ŷ⁽ⁱ⁾), embed(ŷ)), recomputed independently."""
    result, _ = tiny_sma
    for run in (result.on, result.off):
        ref = embed([run.reference_answer])[0].astype(np.float64)
        answers = embed([s.answer for s in run.samples]).astype(np.float64)
        for sample, e in zip(run.samples, answers):
            sim = float(e @ ref)
            expected = 0.5 * sample.n_tokens / max(1, run.reference_tokens) + 0.5 * sim
            assert sample.similarity == pytest.approx(sim, abs=1e-5)
            assert sample.score == pytest.approx(expected, abs=1e-5)


def test_run_json_round_trip_and_labels(tiny_sma) -> None:
    result, _ = tiny_sma
    again = SMAResult.from_dict(json.loads(json.dumps(result.to_dict())))
    np.testing.assert_allclose(again.ads, result.ads)
    assert again.labels(tau=0.05, first_tier="on") == result.labels(tau=0.05, first_tier="on")
    assert len(again.on.samples) == 6


def test_reference_input_mode_and_errors(tiny_handle) -> None:
    settings = SMASettings(n_samples=3, max_new_tokens=3, reference="input", method="lime")
    result = run_sma(tiny_handle, "Who?", "Ada.", settings)
    sample = result.off.samples[0]
    perturbed = "".join(u.text if m == "1" else unicode_perturb(u.text) for u, m in zip(result.units, sample.mask))
    n_input = len(tiny_handle.tokenizer(perturbed, add_special_tokens=False)["input_ids"])
    assert sample.length_ratio == pytest.approx(sample.n_tokens / n_input)
    with pytest.raises(ValueError, match="context is empty"):
        run_sma(tiny_handle, "Who?", " ", settings)
    with pytest.raises(ValueError, match="Too long"):
        run_sma(tiny_handle, "Who " * 300, "Ada.", settings)


def test_context_ablation(tiny_handle) -> None:
    ablation = run_context_ablation(tiny_handle, "Who founded it?", "Ada founded it. It is old. Very old!",
                                    SMASettings(max_new_tokens=3))
    assert ablation.sentences == ["Ada founded it.", " It is old.", " Very old!"]
    assert ablation.full_score == pytest.approx(1.0, abs=1e-5), "the full answer against itself: γ₁·1 + γ₂·1"
    np.testing.assert_allclose(ablation.delta, ablation.full_score - ablation.scores)
    assert len(ablation.answers) == 3
    json.dumps(ablation.to_dict())


def test_detector_is_registered_and_uses_settings_from_the_cache(tiny_handle) -> None:
    from core.detectors.registry import DetectorInput, available
    from core.engine.dual_path import DualPathSettings, run_dual_path
    from core.detectors.keys import SMA_SETTINGS as SETTINGS_KEY

    detector = available()["sma"]
    assert detector.cost == "heavy" and detector.higher_means == "grounded"
    settings = DualPathSettings(max_new_tokens=2)
    res = run_dual_path(tiny_handle, "Who?", "Ada.", settings, free_parametric=False)
    inp = DetectorInput(tiny_handle, res, settings, cache={SETTINGS_KEY: SMASettings(n_samples=3, max_new_tokens=2)})
    score = detector.score(inp)
    assert score == pytest.approx(inp.cache["sma"]["membership_score"])
    assert len(inp.cache["sma"]["labels"]) == len(inp.cache["sma"]["units"]) == 1
