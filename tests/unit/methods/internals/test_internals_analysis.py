"""core.methods.internals.analysis, .replay and .segments: one result's internals against direct computations."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from core.engine import run_dual_path
from core.engine.prepare import prepare_prompts
from core.engine.settings import DualPathSettings
from core.methods.internals import (
    ANSWER,
    CONTEXT,
    QUERY,
    analyze,
    displacement,
    path_sequence,
    prompt_segments,
    specialized_heads,
)

SETTINGS = DualPathSettings(max_new_tokens=6, score_window=6)


def test_displacement_is_the_difference_of_the_two_prompts_last_states(tiny_handle, tiny_result, hf_forward):
    d = displacement(tiny_handle, tiny_result)
    n_layers = tiny_handle.info.n_layers
    assert d.shape == (n_layers + 1, tiny_handle.info.hidden_size)
    prepared = prepare_prompts(tiny_handle, tiny_result.query, tiny_result.context, SETTINGS)
    h_rag = hf_forward(tiny_handle, prepared.retrieval.ids, output_hidden_states=True).hidden_states
    h_para = hf_forward(tiny_handle, prepared.parametric.ids, output_hidden_states=True).hidden_states
    for i in range(n_layers):
        expected = h_rag[i][0, -1].double() - h_para[i][0, -1].double()
        np.testing.assert_allclose(d[i], expected.numpy(), rtol=0, atol=2e-5)
    # both prompts end in the same token, so the embedding row is exactly zero
    assert np.all(d[0] == 0)


def test_prompt_segments_mark_the_context_and_the_query(tiny_handle, tiny_result):
    prepared = prepare_prompts(tiny_handle, tiny_result.query, tiny_result.context, SETTINGS)
    rag = prompt_segments(tiny_handle, prepared, "retrieval")
    para = prompt_segments(tiny_handle, prepared, "parametric")
    assert len(rag) == len(prepared.retrieval.ids) and len(para) == len(prepared.parametric.ids)
    decode = tiny_handle.tokenizer.decode
    assert decode([i for i, s in zip(prepared.retrieval.ids, rag, strict=True) if s == CONTEXT]) == prepared.context
    assert decode([i for i, s in zip(prepared.retrieval.ids, rag, strict=True) if s == QUERY]) == prepared.query
    assert CONTEXT not in para
    assert decode([i for i, s in zip(prepared.parametric.ids, para, strict=True) if s == QUERY]) == prepared.query


def test_path_sequence_is_the_prompt_then_the_answer_but_its_last_token(tiny_handle, tiny_result):
    ids, tokens, prompt_len = path_sequence(tiny_handle, tiny_result, "parametric")
    assert prompt_len == tiny_result.parametric.prompt_len
    assert ids[prompt_len:] == tiny_result.answer_token_ids[:-1]
    assert tokens == tiny_handle.decode_tokens(ids)
    with pytest.raises(ValueError, match="path"):
        path_sequence(tiny_handle, tiny_result, "sideways")


def test_analyze_last_layer_lens_is_the_models_own_output(tiny_handle, tiny_result):
    steps = []
    result = analyze(tiny_handle, tiny_result, top_k=5, progress=lambda done, total, label: steps.append(done))
    n, L, H = tiny_result.n_tokens, tiny_handle.info.n_layers, tiny_handle.info.n_heads
    assert steps == [1, 2, 3]
    assert result.displacement.shape == (L + 1, n, tiny_handle.info.hidden_size)
    assert result.lens.kl.shape == (L + 1, n)
    np.testing.assert_allclose(result.lens.kl[-1], tiny_result.token_kl, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(result.lens.retrieval.target_logprob[-1], tiny_result.retrieval.logprob, atol=1e-4)
    np.testing.assert_allclose(result.lens.parametric.target_logprob[-1], tiny_result.parametric.logprob, atol=1e-4)
    # position 0 is the last prompt token: the same displacement CRM uses
    np.testing.assert_allclose(result.displacement[:, 0], displacement(tiny_handle, tiny_result), atol=1e-6)
    # attention: every row's mass over the four segments sums to one; answer rows see answer tokens
    assert result.retrieval.entropy.shape == (L, H, tiny_result.retrieval.prompt_len + n - 1)
    np.testing.assert_allclose(result.retrieval.mass.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(result.parametric.mass[..., CONTEXT], 0.0)
    assert np.all(result.retrieval.mass[:, :, 0, ANSWER] == 0)
    assert result.entropy_at("retrieval", "mean").shape == (L, H)
    assert result.mass_at("retrieval", "context", n - 1).shape == (L, H)
    # each path's own facts
    for name, path in (("retrieval", tiny_result.retrieval), ("parametric", tiny_result.parametric)):
        own = result.path(name)
        assert own.prompt_len == path.prompt_len
        assert len(own.tokens) == own.segments.shape[0] == path.prompt_len + n - 1
        assert own.hidden_norm.shape == (L + 1, n)
        np.testing.assert_array_equal(result.rows(name), path.prompt_len - 1 + np.arange(n))
    # logit-lens helpers of the Vocabulary lens page
    for t in range(n):
        top = result.lens.retrieval.topk_ids[:, t, 0]
        settled = result.settled_row(t)
        if settled is not None:
            assert np.all(top[settled:] == tiny_result.answer_token_ids[t])
            assert settled == 0 or top[settled - 1] != tiny_result.answer_token_ids[t]
        differs = result.first_divergent_row(t)
        first_diff = np.nonzero(top != result.lens.parametric.topk_ids[:, t, 0])[0]
        assert differs == (int(first_diff[0]) if first_diff.size else None)
    table = result.lens_topk("parametric", n - 1, 3)
    assert len(table) == L + 1 and all(len(row) == 3 for row in table)
    assert table[-1][0][0] == tiny_handle.decode_tokens([int(result.lens.parametric.topk_ids[-1, n - 1, 0])])[0]
    summary = result.summary(tau=1.5)
    text = json.dumps(summary, allow_nan=False)
    assert json.loads(text)["attention"]["retrieval"]["specialized_heads_first"] == specialized_heads(
        result.entropy_at("retrieval", 0), 1.5
    )


def test_analysis_input_errors_are_value_errors(tiny_handle, tiny_result):
    other = dataclasses.replace(tiny_result, model="another-model")  # its headline is decided again, not copied
    with pytest.raises(ValueError, match="another-model"):
        analyze(tiny_handle, other)
    result = analyze(tiny_handle, tiny_result)
    with pytest.raises(ValueError, match="answer position"):
        result.entropy_at("retrieval", 99)
    with pytest.raises(ValueError, match="path"):
        result.entropy_at("sideways", 0)
    with pytest.raises(ValueError, match="segment"):
        result.mass_at("retrieval", "footnote", 0)


@pytest.mark.slow
def test_embedded_model_internals(embedded_handle):
    result = run_dual_path(
        embedded_handle,
        "What is the capital of Veltria?",
        "The capital of the Republic of Veltria is Marrowgate.",
        DualPathSettings(max_new_tokens=4, score_window=4),
    )
    out = analyze(embedded_handle, result, top_k=3)
    assert out.retrieval.entropy.shape[:2] == (30, 9)
    assert out.displacement.shape == (31, result.n_tokens, 576)
    np.testing.assert_allclose(out.lens.kl[-1], result.token_kl, rtol=2e-2, atol=2e-3)
    assert 0 < out.summary()["attention"]["retrieval"]["segment_mass_per_layer_answer_mean"]["context"][10] < 1
