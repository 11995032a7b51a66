"""Self-Critique: the score against hand computations, the top-K entropy against the full entropy, and the
run on the tiny random Llama (generation logits, prompts, streaming, budget, JSON, CLI)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch

from core.engine import teacher_forced_logits
from core.maths.divergence import entropy, log_probs, topk_entropy
from core.methods.selfcritique import (
    CRITIQUE,
    DEFAULT_INSTRUCTION,
    FIRST,
    K_CHOICES,
    STORED_TOP,
    SelfCritiqueResult,
    SelfCritiqueSettings,
    _entropy_material,
    critique_query,
    entropy_sequence,
    penalized_cosine,
    run_self_critique,
)

# ----------------------------------------------------------------------------------------------------------
# The score


def test_score_by_hand_with_length_penalty() -> None:
    # E1 = (1, 2, 3), E2 = (1, 2) → padded (1, 2, 0); dot 5; norms √14 and √5; penalty 2/3.
    expected = 5 / (math.sqrt(14) * math.sqrt(5)) * (2 / 3)
    assert penalized_cosine([1.0, 2.0, 3.0], [1.0, 2.0]) == pytest.approx(expected, rel=1e-12)
    assert penalized_cosine([1.0, 2.0], [1.0, 2.0, 3.0]) == pytest.approx(expected, rel=1e-12), "symmetric"


def test_score_identical_scaled_and_padded_sequences() -> None:
    e = np.array([0.3, 1.7, 0.0, 2.2, 0.9])
    assert penalized_cosine(e, e) == pytest.approx(1.0)
    assert penalized_cosine(e, 3.0 * e) == pytest.approx(1.0), "the cosine ignores scale"
    # same profile followed by near-deterministic tokens (entropy 0): cosine 1, only the length penalty acts
    assert penalized_cosine(e, np.concatenate([e, np.zeros(5)])) == pytest.approx(5 / 10)
    # disjoint support: orthogonal after padding
    assert penalized_cosine([1.0, 0.0], [0.0, 1.0]) == pytest.approx(0.0)


def test_score_edge_cases() -> None:
    assert penalized_cosine([], [1.0]) == 0.0
    assert penalized_cosine([0.0, 0.0], [1.0, 2.0]) == 0.0, "zero norm gives 0 (the authors' code too)"
    with pytest.raises(ValueError, match="finite"):
        penalized_cosine([float("nan")], [1.0])


def test_score_against_numpy_on_random_sequences() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        a, b = rng.exponential(size=rng.integers(1, 40)), rng.exponential(size=rng.integers(1, 40))
        n = max(a.size, b.size)
        pa, pb = np.pad(a, (0, n - a.size)), np.pad(b, (0, n - b.size))
        expected = pa @ pb / (np.linalg.norm(pa) * np.linalg.norm(pb)) * min(a.size, b.size) / n
        assert penalized_cosine(a, b) == pytest.approx(expected, rel=1e-10)


# ----------------------------------------------------------------------------------------------------------
# Top-K entropy


def _zipf_logits(vocab: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(vocab) + 1
    return torch.tensor(-1.2 * np.log(ranks) + 0.05 * rng.normal(size=vocab), dtype=torch.float32)


def _topk_entropy_numpy(logits: np.ndarray, k: int) -> float:
    """Independent float64 computation: renormalize the k largest probabilities, then −Σ p log p."""
    z = logits.astype(np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    top = np.sort(p)[::-1][:k]
    top /= top.sum()
    return float(-(top * np.log(top)).sum())


def test_topk_entropy_matches_numpy_and_converges_to_the_full_entropy() -> None:
    vocab = 4096
    logits = _zipf_logits(vocab)
    full = float(entropy(log_probs(logits)))
    assert full == pytest.approx(_topk_entropy_numpy(logits.numpy(), vocab), abs=1e-4)
    errors = []
    for k in (3, 10, 50, 100, 1000, 4000, vocab):
        h = float(topk_entropy(log_probs(logits), k))
        assert h == pytest.approx(_topk_entropy_numpy(logits.numpy(), k), abs=1e-4)
        errors.append(abs(full - h))
    assert all(later <= earlier + 1e-6 for earlier, later in itertools.pairwise(errors)), errors
    assert errors[0] > 1.0, "top-3 is a coarse approximation of this spread-out distribution"
    assert errors[-1] < 1e-5, "K = V is the full entropy"


def test_stored_top_logprobs_reproduce_topk_entropy_for_every_k() -> None:
    logits = torch.stack([_zipf_logits(2000, seed=s) for s in range(6)]) * torch.linspace(0.5, 4.0, 6)[:, None]
    top, full = _entropy_material(logits)
    assert top.shape == (6, STORED_TOP)
    lp = log_probs(logits)
    for k in K_CHOICES:
        got = entropy_sequence(top, full, k)
        expected = entropy(lp) if k is None else topk_entropy(lp, k)
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="K must be"):
        entropy_sequence(top, full, STORED_TOP + 1)


def test_small_vocabulary_uses_the_exact_entropy() -> None:
    logits = torch.randn(4, 30)
    top, full = _entropy_material(logits)
    assert top.shape == (4, 30)
    np.testing.assert_allclose(entropy_sequence(top, full, 50), full)
    np.testing.assert_allclose(entropy_sequence(top, full, 10), topk_entropy(log_probs(logits), 10).numpy(), atol=1e-5)


# ----------------------------------------------------------------------------------------------------------
# The critique prompt


def test_critique_query_appends_the_instruction_with_the_first_answer() -> None:
    q = critique_query("Solve {x}+1 = 3.", "x = {2}", DEFAULT_INSTRUCTION)
    assert q.startswith("Solve {x}+1 = 3.\nA possible answer is provided below")
    assert "\n---\nx = {2}\n---\n" in q, "braces in query and answer survive (no str.format)"
    assert q.endswith("Please now provide your new, different response:")
    with pytest.raises(ValueError, match="response"):
        critique_query("q", "a", "Try again.")


def test_settings_validation() -> None:
    assert SelfCritiqueSettings(max_new_tokens=10).critique_tokens == 20, "r₂ gets twice r₁'s budget by default"
    assert SelfCritiqueSettings(max_new_tokens=10, critique_max_new_tokens=7).critique_tokens == 7
    with pytest.raises(ValueError, match="instruction"):
        SelfCritiqueSettings(instruction="no slot").validate()
    with pytest.raises(ValueError, match="K must be"):
        SelfCritiqueSettings(top_k=0).validate()


# ----------------------------------------------------------------------------------------------------------
# A run on the tiny random model


@pytest.fixture(scope="module")
def tiny_run(tiny_handle):
    events = []
    result = run_self_critique(
        tiny_handle,
        "What is 2+2?",
        "Two and two make four.",
        SelfCritiqueSettings(max_new_tokens=6, top_k=10),
        on_event=events.append,
    )
    return result, events


def test_run_prompts_and_streaming(tiny_run, tiny_handle) -> None:
    result, events = tiny_run
    assert 1 <= len(result.first_ids) <= 6 and 1 <= len(result.critique_ids) <= 12
    assert result.critique_prompt.count(result.first_answer) >= 1
    assert "Two and two" not in result.first_prompt, "without the context by default (the paper's setting)"
    paths = [e.path for e in events]
    assert paths[0] == FIRST and paths[-1] == CRITIQUE and paths.index(CRITIQUE) > paths.index(FIRST)
    assert events[-1].done and events[-1].n_tokens == len(result.critique_ids)


def test_run_entropies_come_from_the_generation_logits(tiny_run, tiny_handle) -> None:
    """The stored full entropies equal those of an independent teacher-forced pass over the same answer."""
    result, _ = tiny_run
    from core.model.prompts import encode_prompt, resolve_template

    template = resolve_template("auto", tiny_handle.tokenizer)
    for prompt, ids, stored in (
        (result.first_prompt, result.first_ids, result.first_entropy),
        (result.critique_prompt, result.critique_ids, result.critique_entropy),
    ):
        logits = teacher_forced_logits(tiny_handle, encode_prompt(template, tiny_handle.tokenizer, prompt), ids)
        np.testing.assert_allclose(stored, entropy(log_probs(logits)).numpy(), atol=2e-4)
    e1, e2 = result.entropies(10)
    assert e1.shape == (len(result.first_ids),) and e2.shape == (len(result.critique_ids),)
    assert result.score() == pytest.approx(penalized_cosine(e1, e2))
    assert 0.0 <= result.score(None) <= 1.0


def test_run_json_round_trip(tiny_run) -> None:
    result, _ = tiny_run
    again = SelfCritiqueResult.from_dict(json.loads(json.dumps(result.to_dict())))
    for k in K_CHOICES:
        assert again.score(k) == pytest.approx(result.score(k), abs=1e-7)
    assert again.first_tokens == result.first_tokens


def test_run_with_context_and_input_errors(tiny_handle) -> None:
    result = run_self_critique(
        tiny_handle, "Q?", "CTX-MARKER", SelfCritiqueSettings(max_new_tokens=2, use_context=True)
    )
    assert "CTX-MARKER" in result.first_prompt and "CTX-MARKER" in result.critique_prompt
    with pytest.raises(ValueError, match="context is empty"):
        run_self_critique(tiny_handle, "Q?", "  ", SelfCritiqueSettings(max_new_tokens=2, use_context=True))
    with pytest.raises(ValueError, match="query is empty"):
        run_self_critique(tiny_handle, " ", "c", SelfCritiqueSettings(max_new_tokens=2))
    with pytest.raises(ValueError, match="Too long"):
        run_self_critique(tiny_handle, "x" * 600, "", SelfCritiqueSettings(max_new_tokens=2))


def test_detect_command_puts_detector_outputs_under_extras(cli_model, capsys) -> None:
    from core.cli import main

    code = main(
        [
            "detect",
            "--query",
            "What is 2+2?",
            "--context",
            "Four.",
            "--detectors",
            "selfcritique",
            "--max-new-tokens",
            "3",
            "--selfcritique-k",
            "full",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    out = data["extras"]["detectors"]["selfcritique"]
    assert out["higher_means"] == "memorized" and out["cost"] == "generate"
    details = out["details"]
    assert details["top_k"] is None
    assert out["score"] == pytest.approx(penalized_cosine(details["entropy_first"], details["entropy_critique"]))


def test_detector_is_registered() -> None:
    from core.detectors.registry import available

    detector = available()["selfcritique"]
    assert detector.cost == "generate" and detector.higher_means == "memorized"
