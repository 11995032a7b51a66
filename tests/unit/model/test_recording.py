"""core.model.recording: what generate's own forwards read equals a teacher-forced trace over the same tokens (the
independent computation: :func:`core.model.trace.trace`), for a padded and an unpadded batch row."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.engine import DualPathSettings
from core.engine.generation import generate_greedy
from core.model.parts import layer_mlps, model_parts
from core.model.recording import recording
from core.model.trace import ALL, lookback_ratio, top_attended, trace

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = DualPathSettings(max_new_tokens=6, score_window=6, force_length=True)


def _ids(handle, text: str) -> list[int]:
    return list(handle.tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.fixture(scope="module")
def generated(tiny_handle):
    prompts = [_ids(tiny_handle, "A long prompt about the tower by the river:"), _ids(tiny_handle, "Short one:")]
    width = max(len(p) for p in prompts)
    rows = [0, 1]
    with recording(tiny_handle, rows, [width - len(p) for p in prompts], [len(p) for p in prompts]) as recs:
        out = generate_greedy(tiny_handle, prompts, SETTINGS)
    for rec, prompt, (ids, _, _) in zip(recs, prompts, out, strict=True):
        rec.set_fed(prompt, ids)
    return prompts, out, recs


def _reducers(prompt_len: int, n: int) -> dict:
    context = [True] * prompt_len + [False] * (n - prompt_len)
    return {"lr": lookback_ratio(context, prompt_len, produced=True), "top": top_attended(3, range(prompt_len - 1, n))}


@pytest.mark.parametrize("row", [0, 1], ids=["unpadded row", "left-padded row"])
def test_the_recording_equals_a_teacher_forced_trace(tiny_handle, generated, row):
    prompts, out, recs = generated
    ids = prompts[row] + out[row][0][:-1]
    rec = recs[row]
    assert rec.failed is None and rec.fed[: len(ids)] == ids and rec.n_fed >= len(ids)
    options = {"positions": ALL, "mlp": True, "attention": _reducers(len(prompts[row]), len(ids))}
    own, got = trace(tiny_handle, [ids], **options), rec.trace(ids, **options)
    torch.testing.assert_close(got.residual[0], own.residual[0], rtol=1e-4, atol=1e-4)
    assert got.mlp_in == [], "a recording keeps the MLPs' outputs only"
    torch.testing.assert_close(got.mlp_out[0], own.mlp_out[0], rtol=1e-4, atol=1e-4)
    for layer in range(tiny_handle.info.n_layers):
        mine, theirs = got.attention["lr"][0][layer], own.attention["lr"][0][layer]
        assert np.array_equal(np.isnan(mine), np.isnan(theirs))
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-6, equal_nan=True)
        np.testing.assert_allclose(got.attention["top"][0][layer][1], own.attention["top"][0][layer][1], atol=1e-5)
    last = rec.trace(ids)  # default: the last position only
    torch.testing.assert_close(last.residual[0][:, 0], own.residual[0][:, -1], rtol=1e-4, atol=1e-4)


def test_rows_before_the_prompts_last_token_are_not_kept(tiny_handle, generated):
    prompts, out, recs = generated
    ids = prompts[0] + out[0][0][:-1]
    seen = {}
    recs[0].trace(ids, attention={"w": lambda layer, w: seen.setdefault(layer, w.clone())})
    first = len(prompts[0]) - 1
    assert torch.isnan(seen[0][:, :first]).all() and not torch.isnan(seen[0][:, first:]).any()
    assert torch.allclose(seen[0][:, first:].sum(-1), torch.ones(()), atol=1e-5)  # each kept row is a distribution


def test_tokens_that_are_not_what_was_generated_are_refused(tiny_handle, generated):
    prompts, out, recs = generated
    ids = prompts[0] + out[0][0][:-1]
    with pytest.raises(ValueError, match="not a prefix"):
        recs[0].trace([*ids[:-1], (ids[-1] + 1) % 50])
    with pytest.raises(ValueError, match="not a prefix"):
        recs[0].trace(prompts[0][:-1])  # shorter than the prompt
    with pytest.raises(ValueError, match="not a prefix"):
        recs[0].trace(ids + [1] * 20)  # past what was fed


def test_a_failing_hook_marks_the_recording_and_never_breaks_the_generation(tiny_handle):
    prompt = _ids(tiny_handle, "The tower:")
    with recording(tiny_handle, [3], [0], [len(prompt)]) as recs:  # row 3 of a batch of one
        (ids, _, _), *_ = generate_greedy(tiny_handle, [prompt], SETTINGS)
    assert len(ids) == SETTINGS.max_new_tokens
    assert recs[0].failed is not None and "IndexError" in recs[0].failed
    with pytest.raises(ValueError, match="unusable"):
        recs[0].trace(prompt)


def test_no_hook_survives_the_block_even_when_it_raises(tiny_handle):
    parts = model_parts(tiny_handle)
    modules = [*parts.layers, *parts.attentions, *layer_mlps(parts)]

    def count() -> int:
        return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in modules)

    before = count()
    inside: list[int] = []

    def fail_inside() -> None:
        with recording(tiny_handle, [0], [0], [3]):
            inside.append(count())
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        fail_inside()
    assert inside[0] > before and count() == before and not tiny_handle.is_busy()


def test_a_row_stops_being_recorded_once_it_is_fed_an_end_token(tiny_handle, generated):
    prompts, out, _ = generated
    answer = out[0][0]
    k = next(i for i in range(1, len(answer)) if answer[i] not in answer[:i])  # a token first generated at step k
    width = max(len(p) for p in prompts)
    pads, lens = [width - len(p) for p in prompts], [len(p) for p in prompts]
    with recording(tiny_handle, [0, 1], pads, lens, stop_ids={answer[k]}) as recs:
        again = generate_greedy(tiny_handle, prompts, SETTINGS)
    assert again[0][0] == answer, "recording changes nothing of the generation"
    assert recs[0].n_fed == len(prompts[0]) + k, "prompt + answer[:k]: the answer up to the end token, minus it"
    ids = prompts[0] + answer[:k]
    recs[0].set_fed(prompts[0], answer)
    own = trace(tiny_handle, [ids], positions=ALL).residual[0]
    torch.testing.assert_close(recs[0].trace(ids, positions=ALL).residual[0], own, rtol=1e-4, atol=1e-4)


def test_every_family_records_its_generation_or_says_why(fam):
    """On every decoder family: a recorded run scores exactly as a plain one, and its recording equals a traced
    forward over the same tokens (or, where the hooks cannot read the generation, it says why and the detectors
    run their own pass with the same scores)."""
    from core.detectors import DetectorInput, get
    from core.engine import run_dual_path
    from core.methods.internals.replay import path_sequence

    key, handle = fam
    settings = DualPathSettings(max_new_tokens=4, score_window=4, top_k=3, force_length=True)
    query, context = "Where is the tower?", "The tower stands in Quillmere, by the river."
    plain = run_dual_path(handle, query, context, settings)
    recorded = run_dual_path(handle, query, context, settings, record=True)
    assert recorded.repcs_score == plain.repcs_score and recorded.answer_token_ids == plain.answer_token_ids, key
    rec = recorded.internals.retrieval
    if rec.failed is None:
        ids, _, _ = path_sequence(handle, recorded, "retrieval")
        own = trace(handle, [ids], positions=ALL).residual[0]
        torch.testing.assert_close(rec.trace(ids, positions=ALL).residual[0], own, rtol=1e-4, atol=1e-4, msg=key)
    for name in ("lookback_mean", "redeep_ecs", "crm_l2"):
        try:
            expected = get(name).score(DetectorInput(handle, plain, settings))
        except ValueError:
            continue  # a stated refusal of this family
        got = get(name).score(DetectorInput(handle, recorded, settings))
        assert got == pytest.approx(expected, rel=1e-4, abs=1e-6), (key, name)
