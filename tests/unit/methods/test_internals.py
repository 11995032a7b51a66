"""core.internals: hidden states, attention reduced on the fly, the logit lens — against direct computations."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.methods import internals
from core.engine.dual_path import DualPathSettings, prepare_prompts, run_dual_path
from core.methods.internals import (
    ANSWER,
    CONTEXT,
    QUERY,
    SEGMENTS,
    analyse,
    attention_pattern,
    attention_specialisation,
    displacement,
    instrumented_forward,
    layer_states,
    logit_lens_compare,
    model_parts,
    prompt_segments,
    specialised_heads,
)

SETTINGS = DualPathSettings(max_new_tokens=6, score_window=6)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One torch thread: the CI box is shared, and OpenMP spinning on two contended cores is far slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_result(tiny_handle):
    return run_dual_path(tiny_handle, "Who wrote the note?", "The note was written by Ada on Tuesday.", SETTINGS)


def _ids(handle, text: str) -> list[int]:
    return list(handle.tokenizer(text, add_special_tokens=False)["input_ids"])


def _hf_forward(handle, ids, **kwargs):
    with torch.inference_mode():
        return handle.model(input_ids=torch.tensor([ids]), use_cache=False, **kwargs)


def test_layer_states_match_transformers_hidden_states(tiny_handle):
    ids = _ids(tiny_handle, "Layer states, checked one by one.")
    positions = [0, 5, -1]
    ours = layer_states(tiny_handle, ids, positions)
    n_layers = tiny_handle.info.n_layers
    assert ours.shape == (n_layers + 1, 3, tiny_handle.info.hidden_size)
    assert ours.dtype == np.float32
    hf = _hf_forward(tiny_handle, ids, output_hidden_states=True).hidden_states
    rows = [0, 5, len(ids) - 1]
    for i in range(n_layers):  # index 0 = embeddings, i = output of decoder layer i − 1
        np.testing.assert_allclose(ours[i], hf[i][0, rows].numpy(), rtol=0, atol=1e-6)
    # transformers replaces the last entry by the normed state; ours is the raw output of the last layer
    norm = model_parts(tiny_handle).final_norm
    with torch.inference_mode():
        normed = norm(torch.from_numpy(ours[n_layers])).numpy()
    np.testing.assert_allclose(normed, hf[n_layers][0, rows].numpy(), rtol=0, atol=1e-5)


def test_attention_reductions_equal_full_attention(tiny_handle):
    ids = _ids(tiny_handle, "Attention is reduced inside the hook, one layer at a time.")
    T = len(ids)
    rng = np.random.default_rng(0)
    segments = rng.integers(0, len(SEGMENTS), size=T)
    rows = [2, 17, T - 1]
    capture = instrumented_forward(
        tiny_handle, ids, positions=rows, attention=True, rows=rows, segment_ids=segments.tolist(), head=(1, 2)
    )
    full = _hf_forward(tiny_handle, ids, output_attentions=True).attentions  # L × (1, H, T, T)
    A = np.stack([a[0].numpy().astype(np.float64) for a in full])  # (L, H, T, T)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(A > 0, A * np.log(A), 0.0)
    expected_entropy = -plogp.sum(axis=-1)
    np.testing.assert_allclose(capture.entropy, expected_entropy, rtol=1e-5, atol=1e-5)
    onehot = np.eye(len(SEGMENTS))[segments]  # (T, S)
    expected_mass = np.einsum("lhrt,ts->lhrs", A[:, :, rows, :], onehot)
    np.testing.assert_allclose(capture.mass, expected_mass, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(capture.pattern, A[1, 2], rtol=1e-5, atol=1e-7)
    # the kept pieces are reductions: nothing of shape (L, H, T, T)
    assert capture.entropy.shape == (tiny_handle.info.n_layers, tiny_handle.info.n_heads, T)
    assert capture.mass.shape == (tiny_handle.info.n_layers, tiny_handle.info.n_heads, 3, len(SEGMENTS))


def test_attention_pattern_is_causal_and_normalised(tiny_handle):
    ids = _ids(tiny_handle, "Causal rows sum to one.")
    pattern = attention_pattern(tiny_handle, ids, 0, 3)
    assert pattern.shape == (len(ids), len(ids))
    np.testing.assert_allclose(pattern.sum(axis=1), 1.0, atol=1e-5)
    assert np.all(np.triu(pattern, k=1) == 0)


def test_hooks_are_removed_even_when_the_forward_fails(tiny_handle, monkeypatch):
    parts = model_parts(tiny_handle)
    modules = [*parts.layers, *parts.attentions]

    def count() -> int:
        return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in modules)

    before = count()
    instrumented_forward(tiny_handle, _ids(tiny_handle, "hooks"), attention=True, head=(0, 0))
    assert count() == before

    def boom(handle, ids):
        raise RuntimeError("forward failed")

    monkeypatch.setattr(internals, "_forward", boom)
    with pytest.raises(RuntimeError, match="forward failed"):
        instrumented_forward(tiny_handle, _ids(tiny_handle, "hooks"), attention=True)
    assert count() == before


def test_displacement_is_the_difference_of_the_two_prompts_last_states(tiny_handle, tiny_result):
    d = displacement(tiny_handle, tiny_result)
    n_layers = tiny_handle.info.n_layers
    assert d.shape == (n_layers + 1, tiny_handle.info.hidden_size)
    prepared = prepare_prompts(tiny_handle, tiny_result.query, tiny_result.context, SETTINGS)
    h_rag = _hf_forward(tiny_handle, prepared.retrieval.ids, output_hidden_states=True).hidden_states
    h_para = _hf_forward(tiny_handle, prepared.parametric.ids, output_hidden_states=True).hidden_states
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


def test_logit_lens_matches_a_float64_numpy_computation(tiny_handle):
    rng = np.random.default_rng(1)
    n_rows, d = tiny_handle.info.n_layers + 1, tiny_handle.info.hidden_size
    a = rng.normal(size=(n_rows, 3, d)).astype(np.float32)
    b = rng.normal(size=(n_rows, 3, d)).astype(np.float32)
    targets = [5, 17]
    lens = logit_lens_compare(tiny_handle, a, b, targets=targets, top_k=4, chunk=5)
    norm = model_parts(tiny_handle).final_norm
    w_norm = norm.weight.detach().double().numpy()
    eps = float(norm.variance_epsilon)
    w_u = tiny_handle.model.get_output_embeddings().weight.detach().double().numpy()

    def log_softmax(x):
        h = x.astype(np.float64)
        h = h / np.sqrt((h**2).mean(-1, keepdims=True) + eps) * w_norm
        z = h @ w_u.T
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))

    la, lb = log_softmax(a), log_softmax(b)
    kl = (np.exp(la) * (la - lb)).sum(-1)
    np.testing.assert_allclose(lens.kl, kl, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(lens.entropy_a, -(np.exp(la) * la).sum(-1), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(lens.topk_ids_a[..., 0], la.argmax(-1))
    np.testing.assert_allclose(lens.target_logprob_b[:, :2], lb[:, np.arange(2), targets], rtol=1e-4, atol=1e-5)
    assert np.all(np.isnan(lens.target_logprob_a[:, 2]))


def test_analyse_last_layer_lens_is_the_models_own_output(tiny_handle, tiny_result):
    steps = []
    result = analyse(tiny_handle, tiny_result, top_k=5, progress=lambda done, total, label: steps.append(done))
    n, L, H = tiny_result.n_tokens, tiny_handle.info.n_layers, tiny_handle.info.n_heads
    assert steps == [1, 2, 3]
    assert result.displacement.shape == (L + 1, n, tiny_handle.info.hidden_size)
    assert result.lens.kl.shape == (L + 1, n)
    np.testing.assert_allclose(result.lens.kl[-1], tiny_result.token_kl, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(result.lens.target_logprob_a[-1], tiny_result.retrieval.logprob, atol=1e-4)
    np.testing.assert_allclose(result.lens.target_logprob_b[-1], tiny_result.parametric.logprob, atol=1e-4)
    # position 0 is the last prompt token: the same displacement CRM uses
    np.testing.assert_allclose(result.displacement[:, 0], displacement(tiny_handle, tiny_result), atol=1e-6)
    # attention: every row's mass over the four segments sums to one; answer rows see answer tokens
    assert result.entropy_rag.shape == (L, H, tiny_result.retrieval.prompt_len + n - 1)
    np.testing.assert_allclose(result.mass_rag.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(result.mass_para[..., CONTEXT], 0.0)
    assert np.all(result.mass_rag[:, :, 0, ANSWER] == 0)
    assert result.entropy_at("retrieval", "mean").shape == (L, H)
    assert result.mass_at("retrieval", "context", n - 1).shape == (L, H)
    # logit-lens helpers of the Vocabulary lens page
    for t in range(n):
        top = result.lens.topk_ids_a[:, t, 0]
        settled = result.settled_row(t)
        if settled is not None:
            assert np.all(top[settled:] == tiny_result.answer_token_ids[t])
            assert settled == 0 or top[settled - 1] != tiny_result.answer_token_ids[t]
        differs = result.first_divergent_row(t)
        first_diff = np.nonzero(top != result.lens.topk_ids_b[:, t, 0])[0]
        assert differs == (int(first_diff[0]) if first_diff.size else None)
    table = result.lens_topk("parametric", n - 1, 3)
    assert len(table) == L + 1 and all(len(row) == 3 for row in table)
    assert table[-1][0][0] == tiny_handle.decode_tokens([int(result.lens.topk_ids_b[-1, n - 1, 0])])[0]
    summary = result.summary(tau=1.5)
    text = json.dumps(summary, allow_nan=False)
    assert json.loads(text)["attention"]["retrieval"]["specialised_heads_first"] == specialised_heads(
        result.entropy_at("retrieval", 0), 1.5
    )


def test_input_errors_are_value_errors(tiny_handle, tiny_result):
    with pytest.raises(ValueError, match="empty"):
        layer_states(tiny_handle, [])
    with pytest.raises(ValueError, match="outside"):
        layer_states(tiny_handle, [1, 2, 3], positions=[3])
    with pytest.raises(ValueError, match="vocabulary"):
        layer_states(tiny_handle, [10**7])
    with pytest.raises(ValueError, match="head"):
        attention_pattern(tiny_handle, [1, 2, 3], tiny_handle.info.n_layers, 0)
    with pytest.raises(ValueError, match="segment_ids"):
        instrumented_forward(tiny_handle, [1, 2, 3], attention=True, rows=[1], segment_ids=[0, 1])
    with pytest.raises(ValueError, match="shape"):
        logit_lens_compare(tiny_handle, np.zeros((2, 1, 4)), np.zeros((2, 1, 5)))
    other = type(tiny_result)(**{**tiny_result.__dict__, "model": "another-model"})
    with pytest.raises(ValueError, match="another-model"):
        analyse(tiny_handle, other)
    result = analyse(tiny_handle, tiny_result)
    with pytest.raises(ValueError, match="answer position"):
        result.entropy_at("retrieval", 99)
    with pytest.raises(ValueError, match="path"):
        result.entropy_at("sideways", 0)


def test_radar_attention_features():
    entropy = np.array([[0.5, 2.0, 1.49], [3.0, 1.5, 0.1]])
    assert specialised_heads(entropy, 1.5) == 3  # strictly below τ
    features = attention_specialisation(entropy, 1.5)
    mean = entropy.mean()
    assert features["num_specialized_heads"] == 3
    assert features["attention_entropy"] == pytest.approx(mean)
    assert features["head_specialization_score"] == pytest.approx(1 - mean / 3)
    assert features["reasoning_head_activation"] == pytest.approx(mean / 3)
    assert features["factual_head_activation"] == pytest.approx(1 / (mean + 1e-8))


@pytest.mark.slow
def test_embedded_model_internals(embedded_handle):
    result = run_dual_path(
        embedded_handle,
        "What is the capital of Veltria?",
        "The capital of the Republic of Veltria is Marrowgate.",
        DualPathSettings(max_new_tokens=4, score_window=4),
    )
    out = analyse(embedded_handle, result, top_k=3)
    assert out.entropy_rag.shape[:2] == (30, 9)
    assert out.displacement.shape == (31, result.n_tokens, 576)
    np.testing.assert_allclose(out.lens.kl[-1], result.token_kl, rtol=2e-2, atol=2e-3)
    assert 0 < out.summary()["attention"]["retrieval"]["segment_mass_per_layer_answer_mean"]["context"][10] < 1
