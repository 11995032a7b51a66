"""core.model.trace: one batched forward, checked against transformers' own outputs and independent maths."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from core.model import trace as model_trace
from core.model.parts import layer_mlps, model_parts
from core.model.trace import (
    ALL,
    displacement,
    head_pattern,
    lookback_ratio,
    query_entropy,
    residual_before_mlp,
    run_model,
    segment_mass,
    top_attended,
    trace,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _ids(handle, text: str) -> list[int]:
    return list(handle.tokenizer(text, add_special_tokens=False)["input_ids"])


def _hf(handle, ids, **kwargs):
    with torch.inference_mode():
        return handle.model(input_ids=torch.tensor([ids]), use_cache=False, **kwargs)


def test_residual_rows_follow_the_project_numbering(tiny_handle) -> None:
    ids = _ids(tiny_handle, "Row zero is the embedding output.")
    t = trace(tiny_handle, [ids], positions=ALL)
    hf = _hf(tiny_handle, ids, output_hidden_states=True).hidden_states
    L = tiny_handle.info.n_layers
    res = t.residual[0]
    assert res.shape == (L + 1, len(ids), tiny_handle.info.hidden_size)
    for row in range(L):  # the embedding output and every layer but the last: transformers' own rows
        torch.testing.assert_close(res[row], hf[row][0].float(), rtol=0, atol=0)
    # the last row is the raw residual stream; transformers returns it normed
    parts = model_parts(tiny_handle)
    with torch.inference_mode():
        torch.testing.assert_close(parts.final_norm(res[L]), hf[L][0], rtol=1e-6, atol=1e-6)


def test_padded_batch_equals_each_sequence_alone(tiny_handle) -> None:
    seqs = [_ids(tiny_handle, "short"), _ids(tiny_handle, "a much longer sequence of bytes")]
    both = trace(tiny_handle, seqs, positions=[0, -1], attention={"H": query_entropy()}, logits=2)
    for b, seq in enumerate(seqs):
        alone = trace(tiny_handle, [seq], positions=[0, -1], attention={"H": query_entropy()}, logits=2)
        torch.testing.assert_close(both.residual[b], alone.residual[0], rtol=1e-5, atol=1e-5)
        for layer in range(tiny_handle.info.n_layers):
            np.testing.assert_allclose(both.attention["H"][b][layer], alone.attention["H"][0][layer], atol=1e-5)
        torch.testing.assert_close(both.logits[b], alone.logits[0], rtol=1e-5, atol=1e-5)
    assert both.positions == [[0, len(seqs[0]) - 1], [0, len(seqs[1]) - 1]]


def test_mlp_input_and_output_rebuild_the_residual_stream(tiny_handle) -> None:
    ids = _ids(tiny_handle, "before and after the MLP")
    t = trace(tiny_handle, [ids], positions=[1, -1], mlp=True)
    mlps = layer_mlps(model_parts(tiny_handle))
    mid = residual_before_mlp(t)  # (L, P, d)
    with torch.inference_mode():
        for layer, block in enumerate(model_parts(tiny_handle).layers):
            torch.testing.assert_close(mlps[layer](t.mlp_in[0][layer]), t.mlp_out[0][layer], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(
                block.post_attention_layernorm(mid[layer]), t.mlp_in[0][layer], atol=1e-5, rtol=0
            )
            torch.testing.assert_close(mid[layer] + t.mlp_out[0][layer], t.residual[0][layer + 1], atol=1e-6, rtol=0)


def test_reducers_against_the_full_attention(tiny_handle) -> None:
    ids = _ids(tiny_handle, "Context tokens, then the answer.")
    T = len(ids)
    seg = [0] * 5 + [1] * (T - 10) + [2] * 5
    context = [1 <= j < T - 6 for j in range(T)]
    answer_start, rows = T - 4, [T - 1, T - 3]
    t = trace(
        tiny_handle,
        [ids],
        attention={
            "H": query_entropy(),
            "mass": segment_mass(rows, seg, 3),
            "lr": lookback_ratio(context, answer_start),
            "top": top_attended(3, rows),
            "pattern": head_pattern(2, 1),
        },
    )
    full = _hf(tiny_handle, ids, output_attentions=True).attentions
    onehot = np.eye(3)[seg]
    ctx = np.array(context)
    for layer, a in enumerate(full):
        w = a[0].double().numpy()  # (H, T, T)
        with np.errstate(divide="ignore", invalid="ignore"):
            h = -np.where(w > 0, w * np.log(w), 0.0).sum(-1)
        np.testing.assert_allclose(t.attention["H"][0][layer], h, atol=1e-5)
        np.testing.assert_allclose(t.attention["mass"][0][layer], w[:, rows] @ onehot, atol=1e-6)
        for i, q in enumerate(range(answer_start, T)):
            a_ctx = w[:, q, ctx].mean(-1)
            a_new = w[:, q, answer_start : q + 1].mean(-1)
            np.testing.assert_allclose(t.attention["lr"][0][layer][:, i], a_ctx / (a_ctx + a_new), atol=1e-6)
        positions, weights = t.attention["top"][0][layer]
        np.testing.assert_allclose(weights, np.sort(w[:, rows], axis=-1)[..., ::-1][..., :3], atol=1e-6)
        np.testing.assert_allclose(np.take_along_axis(w[:, rows], positions, -1), weights, atol=1e-6)
        pattern = t.attention["pattern"][0][layer]
        if layer == 2:
            np.testing.assert_allclose(pattern, w[1], atol=1e-6)
        else:
            assert pattern is None


def test_logits_of_the_last_positions_only(tiny_handle) -> None:
    ids = _ids(tiny_handle, "logits where asked")
    t = trace(tiny_handle, [ids], residual=False, logits=3)
    assert t.residual == [] and t.logits.shape == (1, 3, tiny_handle.info.vocab_size)
    torch.testing.assert_close(t.logits[0], _hf(tiny_handle, ids).logits[0, -3:], rtol=1e-5, atol=1e-5)
    assert trace(tiny_handle, [ids]).logits is None


def test_a_model_without_logits_to_keep_gets_every_logit() -> None:
    class Plain(torch.nn.Module):
        def forward(self, input_ids, use_cache=False):
            return input_ids.float()

    class Keeps(torch.nn.Module):
        def forward(self, input_ids, use_cache=False, logits_to_keep=0):
            return input_ids[:, -logits_to_keep:].float()

    x = torch.arange(6).reshape(1, 6)
    assert run_model(Plain(), 2, input_ids=x).shape == (1, 6)
    assert run_model(Keeps(), 2, input_ids=x).shape == (1, 2)


def test_displacement_is_the_difference_of_two_traces(tiny_handle) -> None:
    a, b = [_ids(tiny_handle, "with the context: x")], [_ids(tiny_handle, "without: x")]
    d = displacement(trace(tiny_handle, a), trace(tiny_handle, b))
    expected = trace(tiny_handle, a).residual[0][:, 0].double() - trace(tiny_handle, b).residual[0][:, 0].double()
    assert d.shape == (1, tiny_handle.info.n_layers + 1, tiny_handle.info.hidden_size) and d.dtype == np.float32
    np.testing.assert_allclose(d[0], expected.numpy(), atol=1e-7)
    assert np.all(d[0, 0] == 0)  # both end in the same token: the embedding rows agree


def test_hooks_and_lock_are_released_when_the_forward_fails(tiny_handle, monkeypatch) -> None:
    parts = model_parts(tiny_handle)
    modules = [*parts.layers, *parts.attentions, *layer_mlps(parts)]

    def count() -> int:
        return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in modules)

    before = count()

    def boom(model, keep, **inputs):
        raise RuntimeError("forward failed")

    monkeypatch.setattr(model_trace, "run_model", boom)
    with pytest.raises(RuntimeError, match="forward failed"):
        trace(tiny_handle, [[1, 2, 3]], mlp=True, attention={"H": query_entropy()})
    assert count() == before
    free: list[bool] = []
    probe = threading.Thread(target=lambda: free.append(not tiny_handle.is_busy()))
    probe.start()
    probe.join()
    assert free == [True]


def test_bad_input_is_a_value_error(tiny_handle) -> None:
    for kwargs, match in [
        ({"sequences": []}, "no sequence"),
        ({"sequences": [[]]}, "empty"),
        ({"sequences": [[10**7]]}, "vocabulary"),
        ({"sequences": [[1, 2]], "positions": [2]}, "outside"),
        ({"sequences": [[1, 2]], "attention_layers": [99], "attention": {"H": query_entropy()}}, "out of range"),
        ({"sequences": [[1, 2], [3]], "attention": {"H": [query_entropy()]}}, "reducers for 2"),
    ]:
        with pytest.raises(ValueError, match=match):
            trace(tiny_handle, **kwargs)


def test_right_padding_reads_each_sequence_as_alone(tiny_handle) -> None:
    seqs = [_ids(tiny_handle, "a much longer sequence of bytes"), _ids(tiny_handle, "short")]
    both = trace(tiny_handle, seqs, positions=ALL, attention={"H": query_entropy()}, right_pad=True)
    for b, seq in enumerate(seqs):
        alone = trace(tiny_handle, [seq], positions=ALL, attention={"H": query_entropy()})
        torch.testing.assert_close(both.residual[b], alone.residual[0], rtol=1e-5, atol=1e-5)
        for layer in range(tiny_handle.info.n_layers):
            np.testing.assert_allclose(both.attention["H"][b][layer], alone.attention["H"][0][layer], atol=1e-5)
    with pytest.raises(ValueError, match="left-padded"):
        trace(tiny_handle, seqs, logits=1, right_pad=True)


def test_positions_per_sequence(tiny_handle) -> None:
    seqs = [_ids(tiny_handle, "a much longer sequence of bytes"), _ids(tiny_handle, "short")]
    t = trace(tiny_handle, seqs, positions=[[0, 2], [-1]])
    assert t.positions == [[0, 2], [len(seqs[1]) - 1]]
    full = [trace(tiny_handle, [s], positions=ALL).residual[0] for s in seqs]
    torch.testing.assert_close(t.residual[0], full[0][:, [0, 2]], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(t.residual[1], full[1][:, [-1]], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="position lists"):
        trace(tiny_handle, seqs, positions=[[0]])


def test_right_padding_on_every_family(fam) -> None:
    """The texts pass of the agreement view (the context text and RADAR's query as one right-padded batch) reads
    each text as alone on every decoder family (alibi and sliding windows included)."""
    key, handle = fam
    seqs = [_ids(handle, "The tower stands in Quillmere, by the river."), _ids(handle, "Where is it?")]
    both = trace(handle, seqs, positions=ALL, attention={"H": query_entropy()}, right_pad=True)
    for b, seq in enumerate(seqs):
        alone = trace(handle, [seq], positions=ALL, attention={"H": query_entropy()})
        torch.testing.assert_close(both.residual[b], alone.residual[0], rtol=1e-4, atol=1e-4, msg=key)
        for layer in range(handle.info.n_layers):
            np.testing.assert_allclose(both.attention["H"][b][layer], alone.attention["H"][0][layer], atol=1e-5)


def test_a_sequence_without_a_reducer_keeps_no_attention(tiny_handle) -> None:
    seqs = [_ids(tiny_handle, "a much longer sequence of bytes"), _ids(tiny_handle, "short")]
    t = trace(tiny_handle, seqs, attention={"H": [None, query_entropy()]}, right_pad=True)
    alone = trace(tiny_handle, [seqs[1]], attention={"H": query_entropy()})
    assert t.attention["H"][0] == [None] * tiny_handle.info.n_layers
    for layer in range(tiny_handle.info.n_layers):
        np.testing.assert_allclose(t.attention["H"][1][layer], alone.attention["H"][0][layer], atol=1e-5)
