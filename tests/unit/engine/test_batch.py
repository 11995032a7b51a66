"""Batched dual-path scoring equals the unbatched engine (tiny random Llama), and its padding is right."""

from __future__ import annotations

from operator import attrgetter

import numpy as np
import pytest
import torch

from core.engine import (
    DualPathSettings,
    ScoreRequest,
    generate_greedy,
    plan_batches,
    prepare_prompts,
    run_dual_path,
    score_batch,
    score_prepared,
    score_rows,
    teacher_forced_logits,
    teacher_forced_logits_batch,
)

ROWS = [
    ("Where is the tower?", "The tower stands in Quillmere."),
    ("Who founded Marrowgate?", "Marrowgate was founded in 1412 by salt traders from the northern isles of Veltria."),
    ("How many moons?", "Three."),
    ("What color is the sky on Orrin?", "On the planet Orrin the sky is a pale green all year round, even at night."),
]
ARRAYS = (
    "token_kl",
    "retrieval.entropy",
    "parametric.entropy",
    "retrieval.logprob",
    "parametric.logprob",
    "retrieval.topk_probs",
    "parametric.topk_probs",
)


def _settings(**kw) -> DualPathSettings:
    return DualPathSettings(**{"max_new_tokens": 6, "score_window": 6, "top_k": 5, **kw})


def test_batched_teacher_forcing_equals_unbatched(tiny_handle):
    """Left padding + explicit position ids: each row's logits equal the single-row forward (no greedy step,
    so no possible near-tie flip: this is the exact check of the padding)."""
    s = _settings()
    prompts = [prepare_prompts(tiny_handle, q, c, s).parametric.ids for q, c in ROWS]
    answers = [[70, 71, 72], [80], [90, 91, 92, 93, 94, 95], [40, 41]]
    batched = teacher_forced_logits_batch(tiny_handle, prompts, answers)
    for p, a, got in zip(prompts, answers, batched):
        want = teacher_forced_logits(tiny_handle, p, a)
        assert got.shape == want.shape == (len(a), tiny_handle.info.vocab_size)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_position_ids_matter(tiny_handle):
    """Without explicit position ids a padded row is shifted (transformers 5 uses arange in a plain forward):
    guard that the difference is real, so the test above checks something."""
    s = _settings()
    short = prepare_prompts(tiny_handle, *ROWS[2], s).parametric.ids
    long = prepare_prompts(tiny_handle, *ROWS[1], s).parametric.ids
    pad = tiny_handle.pad_token_id
    width = len(long)
    ids = torch.tensor([[pad] * (width - len(short)) + short])
    mask = torch.tensor([[0] * (width - len(short)) + [1] * len(short)])
    with torch.inference_mode():
        shifted = tiny_handle.model(input_ids=ids, attention_mask=mask).logits[0, -1]
    alone = teacher_forced_logits(tiny_handle, short[:-1], short[-1:])[0]
    assert (shifted - alone).abs().max() > 1e-3


def test_batched_generation_logits_match_unbatched_forward(tiny_handle):
    """Robust to greedy near-ties: given the tokens the batched run chose, its per-step logits equal a
    single-row teacher-forced forward over the retrieval prompt + those tokens."""
    s = _settings()
    prompts = [prepare_prompts(tiny_handle, q, c, s).retrieval.ids for q, c in ROWS]
    for (ids, logits, _), prompt in zip(generate_greedy(tiny_handle, prompts, s), prompts):
        torch.testing.assert_close(logits, teacher_forced_logits(tiny_handle, prompt, ids), rtol=1e-4, atol=1e-4)


def test_score_batch_equals_run_dual_path(tiny_handle):
    s = _settings()
    batched = score_batch(tiny_handle, ROWS, s)
    assert len(batched) == len(ROWS)
    for (q, c), got in zip(ROWS, batched):
        want = run_dual_path(tiny_handle, q, c, s, free_parametric=False)
        # Greedy tokens can differ under padding only on a float near-tie; the tiny model has none here.
        assert got.answer_token_ids == want.answer_token_ids
        for name in ARRAYS:
            np.testing.assert_allclose(
                attrgetter(name)(got), attrgetter(name)(want), rtol=1e-4, atol=1e-5, err_msg=name
            )
        assert got.retrieval.topk_ids.tolist() == want.retrieval.topk_ids.tolist()
        assert got.repcs_score == pytest.approx(want.repcs_score, rel=1e-4, abs=1e-5)
        assert got.max_abs_log_ratio == pytest.approx(want.max_abs_log_ratio, rel=1e-4, abs=1e-5)
        for key in ("mean", "max", "early"):
            assert got.kl_stats[key] == pytest.approx(want.kl_stats[key], rel=1e-4, abs=1e-6)
        same = (
            "query",
            "context",
            "template",
            "retrieval.prompt",
            "parametric.prompt",
            "retrieval.answer",
            "answer_tokens",
            "retrieval.finish",
            "parametric.finish",
            "score_window",
            "verdict",
            "threshold",
            "settings",
            "model",
        )
        for name in same:
            assert attrgetter(name)(got) == attrgetter(name)(want), name
        assert got.timings["batch_size"] == len(ROWS)


def test_free_parametric_answers_match(tiny_handle):
    s = _settings()
    got = score_batch(tiny_handle, ROWS[:2], s, free_parametric=True)
    for (q, c), res in zip(ROWS[:2], got):
        want = run_dual_path(tiny_handle, q, c, s, free_parametric=True)
        assert res.parametric.token_ids == want.parametric.token_ids
        assert res.parametric.answer == want.parametric.answer


def test_score_rows_keeps_order_and_stops(tiny_handle):
    s = _settings()
    seen = []
    results = score_rows(tiny_handle, ROWS, s, batch_size=2, progress=lambda d, t: seen.append((d, t)))
    assert [r.query for r in results] == [q for q, _ in ROWS]
    assert seen == [(2, 4), (4, 4)]
    stopped = score_rows(
        tiny_handle,
        ROWS,
        s,
        batch_size=2,
        should_stop=lambda: len(seen) >= 3,
        progress=lambda d, t: seen.append((d, t)),
    )
    assert sum(r is not None for r in stopped) == 2 and sum(r is None for r in stopped) == 2


def test_bad_row_is_refused_before_any_model_call(tiny_handle):
    with pytest.raises(ValueError, match="empty"):
        score_rows(tiny_handle, [ROWS[0], ("q", "   ")], _settings())


def test_plan_batches_covers_every_row_once():
    lengths = [50, 10, 400, 12, 11, 300, 60]
    batches = plan_batches(lengths, batch_size=3, max_new_tokens=10, max_batch_tokens=900)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * (max(lengths[i] for i in b) + 10) <= 900
    with pytest.raises(ValueError):
        plan_batches(lengths, batch_size=0, max_new_tokens=1)


def test_noise_scores_sigma_zero_is_z_and_batch_independent(tiny_handle):
    s = _settings()
    sigmas = (0.0, 0.05, 1.0)
    a = score_batch(tiny_handle, ROWS, s, noise_sigmas=sigmas, noise_seed=3)
    b = score_batch(tiny_handle, ROWS[1:2], s, noise_sigmas=sigmas, noise_seed=3)[0]
    for res in a:
        noisy = res.extras["noisy_repcs"]
        assert noisy["sigma"] == list(sigmas)
        assert noisy["z"][0] == pytest.approx(res.repcs_score, rel=1e-6, abs=1e-7)
        assert noisy["z"][2] != pytest.approx(res.repcs_score, rel=1e-3)
    np.testing.assert_allclose(a[1].extras["noisy_repcs"]["z"], b.extras["noisy_repcs"]["z"], rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_batched_scores_equal_one_by_one_on_the_embedded_model(embedded_handle):
    """The real model, real probes of both labels and different lengths in one padded batch."""
    s = DualPathSettings(max_new_tokens=12, score_window=12)
    rows = [
        ("What is the capital of France?", "Paris is the capital and largest city of France."),
        ("What is the capital of Veltria?", "The capital of the Republic of Veltria is Marrowgate, a port city."),
        ("How many legs does a spider have?", "Spiders are arachnids with eight legs."),
        ("Who founded the Orrin Guild?", "The Orrin Guild of glassmakers was founded by Tamsin Vell in 1721."),
    ]
    batched = score_batch(embedded_handle, rows, s)
    for (q, c), got in zip(rows, batched):
        want = run_dual_path(embedded_handle, q, c, s, free_parametric=False)
        assert got.answer_token_ids == want.answer_token_ids, q
        np.testing.assert_allclose(got.token_kl, want.token_kl, rtol=1e-3, atol=1e-4, err_msg=q)
        assert got.repcs_score == pytest.approx(want.repcs_score, rel=1e-3, abs=1e-4)
        assert got.verdict == want.verdict


def test_one_request_object_and_a_single_row_is_a_batch_of_one(tiny_handle):
    s = _settings(max_new_tokens=3, score_window=3)
    request = ScoreRequest.of(s, noise_sigmas=[0.0, 0.2], noise_seed=5, free_parametric=True)
    assert request.noise_sigmas == (0.0, 0.2) and ScoreRequest.of(request) is request
    assert ScoreRequest.of(request, noise_seed=6).noise_seed == 6
    by_request = score_batch(tiny_handle, ROWS[:2], request)
    by_keywords = score_batch(tiny_handle, ROWS[:2], s, noise_sigmas=(0.0, 0.2), noise_seed=5, free_parametric=True)
    for a, b in zip(by_request, by_keywords, strict=True):
        assert a.repcs_score == b.repcs_score and a.extras["noisy_repcs"] == b.extras["noisy_repcs"]
    # run_dual_path is the core on a batch of one: the same numbers, its own timings (no batch_size)
    prepared = prepare_prompts(tiny_handle, *ROWS[0], s)
    (core,) = score_prepared(tiny_handle, [prepared], ScoreRequest.of(s, free_parametric=True).resolved(tiny_handle))
    events = []
    single = run_dual_path(tiny_handle, *ROWS[0], s, on_event=events.append)
    np.testing.assert_array_equal(single.token_kl, core.token_kl)
    assert single.answer_token_ids == core.answer_token_ids
    assert single.parametric.token_ids == core.parametric.token_ids
    assert "batch_size" not in single.timings and core.timings["batch_size"] == 1.0
    assert {e.path for e in events} == {"retrieval", "parametric", "scoring"} and events[-1].done


def test_a_recorded_batch_keeps_each_rows_internals_and_the_same_scores(tiny_handle):
    from core.model.trace import ALL, trace

    settings = DualPathSettings(max_new_tokens=5, score_window=5, force_length=True)
    prepared = [prepare_prompts(tiny_handle, q, c, settings) for q, c in ROWS[:2]]
    plain = score_prepared(tiny_handle, prepared, ScoreRequest(settings).resolved(tiny_handle))
    recorded = score_prepared(tiny_handle, prepared, ScoreRequest(settings, record=True).resolved(tiny_handle))
    for p, a, b in zip(prepared, plain, recorded, strict=True):
        assert a.internals is None and b.repcs_score == a.repcs_score
        np.testing.assert_array_equal(b.token_kl, a.token_kl)
        ids = p.retrieval.ids + b.answer_token_ids[:-1]
        own = trace(tiny_handle, [ids], positions=ALL).residual[0]
        torch.testing.assert_close(
            b.internals.retrieval.trace(ids, positions=ALL).residual[0], own, rtol=1e-4, atol=1e-4
        )
        h_0 = trace(tiny_handle, [p.parametric.ids]).residual[0][:, 0].numpy()
        np.testing.assert_allclose(b.internals.parametric_state, h_0, rtol=1e-5, atol=1e-5)
