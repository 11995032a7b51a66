"""The heads that copied the answer (core.methods.copying) against a plain ``output_attentions`` forward."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch

from core.engine import DualPathSettings, run_dual_path
from core.engine.span import AnswerSpan
from core.engine.swap_words import occurrences
from core.methods.copying import copying_heads, token_ranges, top_heads
from core.methods.internals.replay import prepared_for

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = DualPathSettings(max_new_tokens=6, score_window=6, force_length=True)
Q, C = "Who keeps the bees?", "Old Mara keeps the bees by the mill. Ask Mara for honey."


@pytest.fixture(scope="module")
def result(tiny_handle):
    return run_dual_path(tiny_handle, Q, C, SETTINGS)


def _span(text: str, positions: tuple[int, ...]) -> AnswerSpan:
    """A span at ``positions`` of the answer (the tiny random model's answer is random bytes: the span is given)."""
    return AnswerSpan(text, text.lower(), positions, positions, 1.0, None, True, "given")


def _by_hand(handle, result, t0: int, phrase: str) -> tuple[np.ndarray, np.ndarray]:
    """Eager ``output_attentions`` over prompt + answer[:t0]; the row that generates answer token t0 summed over the
    context's characters and the phrase's, tokens found by their offsets independently of the module."""
    prepared = prepared_for(handle, result)
    prompt = prepared.retrieval
    ids = list(prompt.ids) + [int(i) for i in result.answer_token_ids[:t0]]
    with torch.inference_mode():
        out = handle.model(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False)
    c0 = prompt.prompt.index(prepared.context)
    c1 = c0 + len(prepared.context)
    hits = [(c0 + m.start(), c0 + m.end()) for m in re.finditer(rf"\b{re.escape(phrase)}\b", prepared.context)]
    offsets = handle.tokenizer(prompt.prompt, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    ctx = [i for i, (s, e) in enumerate(offsets) if s < c1 and e > c0]
    occ = [i for i, (s, e) in enumerate(offsets) if any(s < b and e > a for a, b in hits)]
    row = len(prompt.ids) - 1 + t0
    w = np.stack([a[0, :, row, :].double().numpy() for a in out.attentions])  # (L, H, T)
    return w[:, :, occ].sum(-1), w[:, :, ctx].sum(-1)


@pytest.mark.parametrize("t0", [0, 2])
def test_the_weights_match_a_plain_forward(tiny_handle, result, t0) -> None:
    heads = copying_heads(tiny_handle, result, _span("Mara", (t0, t0 + 1)))
    copy, context = _by_hand(tiny_handle, result, t0, "Mara")
    assert heads.available and heads.source == "forward"
    assert heads.copy.shape == (tiny_handle.info.n_layers, tiny_handle.info.n_heads)
    np.testing.assert_allclose(heads.copy, copy, rtol=0, atol=1e-6)
    np.testing.assert_allclose(heads.context, context, rtol=0, atol=1e-6)
    assert heads.occurrences == 2 == occurrences(C, "Mara")  # both whole-word occurrences, as the swap test counts
    assert len(heads.occurrence_tokens) == 8  # byte tokenizer: 4 bytes each
    assert np.all(heads.copy <= heads.context + 1e-9) and np.all(heads.copy > 0)
    assert heads.row == len(prepared_for(tiny_handle, result).retrieval.ids) - 1 + t0
    best = heads.top[0]
    assert len(heads.top) == 5 and best[2] == pytest.approx(copy.max())
    assert copy[best[0], best[1]] == pytest.approx(copy.max())
    assert [w for *_, w in heads.top] == sorted((w for *_, w in heads.top), reverse=True)
    assert "“Mara”" in heads.note and f"layer {best[0]} head {best[1]}" in heads.note
    assert heads.to_dict()["top"][0] == {"layer": best[0], "head": best[1], "weight": round(best[2], 6)}


def test_the_run_s_recording_gives_the_same_weights_without_a_forward(tiny_handle) -> None:
    recorded = run_dual_path(tiny_handle, Q, C, SETTINGS, record=True)
    assert recorded.internals is not None and recorded.internals.retrieval is not None
    span = _span("bees", (1, 2))
    from_recording = copying_heads(tiny_handle, recorded, span)
    assert from_recording.source == "recording"
    dropped = dataclasses.replace(recorded, internals=None)
    from_forward = copying_heads(tiny_handle, dropped, span)
    assert from_forward.source == "forward"
    np.testing.assert_allclose(from_recording.copy, from_forward.copy, rtol=0, atol=1e-5)
    np.testing.assert_allclose(from_recording.context, from_forward.context, rtol=0, atol=1e-5)


def test_a_span_absent_from_the_context_has_nothing_to_copy(tiny_handle, result, monkeypatch) -> None:
    import core.methods.copying as copying

    def no_forward(*args, **kwargs):
        raise AssertionError("no model call when there is nothing to copy")

    monkeypatch.setattr(copying, "trace", no_forward)
    heads = copying_heads(tiny_handle, result, _span("Zanzibar", (0,)))
    assert not heads.available and heads.copy is None and heads.context is None and heads.top == ()
    assert "does not occur in the context" in heads.note and "nothing to copy" in heads.note
    assert heads.span == "Zanzibar" and heads.phrase is None and heads.position == 0
    no_context = dataclasses.replace(result, context="")
    assert "no context" in copying_heads(tiny_handle, no_context, _span("Mara", (0,))).note


def test_bad_input_is_refused(tiny_handle, result) -> None:
    with pytest.raises(ValueError, match="outside the answer"):
        copying_heads(tiny_handle, result, _span("Mara", (99,)))
    with pytest.raises(ValueError, match="produced by"):
        copying_heads(tiny_handle, dataclasses.replace(result, model="another"), _span("Mara", (0,)))


def test_token_ranges_and_top_heads(tiny_handle, result) -> None:
    context, occurrence, n = token_ranges(tiny_handle, prepared_for(tiny_handle, result), "mara")
    assert n == 2 and set(occurrence) <= set(context) and len(context) == len(C.encode())
    assert token_ranges(tiny_handle, prepared_for(tiny_handle, result), "Mar")[1:] == ([], 0)  # whole words only
    grid = np.array([[0.1, 0.5], [0.5, 0.2]])
    assert top_heads(grid, 3) == ((0, 1, 0.5), (1, 0, 0.5), (1, 1, 0.2))
