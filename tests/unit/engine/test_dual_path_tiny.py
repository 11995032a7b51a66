"""The dual-path engine on a tiny random Llama: alignment, KL against an independent computation,
JSON round trip, input validation and concurrency."""

from __future__ import annotations

import threading
from operator import attrgetter

import numpy as np
import pytest
import torch

from core.engine import DualPathResult, DualPathSettings, prepare_prompts, run_dual_path, teacher_forced_logits

Q, C = "Where is the tower?", "The tower stands in Quillmere."


def _settings(**kw) -> DualPathSettings:
    return DualPathSettings(**{"max_new_tokens": 8, "score_window": 8, "top_k": 5, **kw})


def _manual_logits(handle, ids: list[int]) -> torch.Tensor:
    """Full-sequence logits by a plain forward pass, float64 (independent of the engine's code path)."""
    with torch.inference_mode():
        return handle.model(input_ids=torch.tensor([ids])).logits[0].double()


def test_kl_matches_independent_float64_computation(tiny_handle):
    res = run_dual_path(tiny_handle, Q, C, _settings())
    prep = prepare_prompts(tiny_handle, Q, C, _settings())
    ans = res.answer_token_ids
    n = len(ans)
    rag = _manual_logits(tiny_handle, prep.retrieval.ids + ans)[
        len(prep.retrieval.ids) - 1 : len(prep.retrieval.ids) - 1 + n
    ]
    para = _manual_logits(tiny_handle, prep.parametric.ids + ans)[
        len(prep.parametric.ids) - 1 : len(prep.parametric.ids) - 1 + n
    ]
    lp, lq = torch.log_softmax(rag, -1), torch.log_softmax(para, -1)
    expected = (lp.exp() * (lp - lq)).sum(-1).numpy()
    np.testing.assert_allclose(res.token_kl, expected, rtol=1e-3, atol=1e-5)
    assert res.repcs_score == pytest.approx(expected[:8].sum(), rel=1e-3, abs=1e-5)
    # the answer-token log-probs line up with the same token on both paths
    idx = torch.tensor(ans)
    np.testing.assert_allclose(res.retrieval.logprob, lp[torch.arange(n), idx].numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(res.parametric.logprob, lq[torch.arange(n), idx].numpy(), rtol=1e-4, atol=1e-4)


def test_retrieval_distributions_come_from_generation_and_predict_answer(tiny_handle):
    res = run_dual_path(tiny_handle, Q, C, _settings())
    # greedy: each answer token is the retrieval path's argmax at its position
    assert res.retrieval.topk_ids[:, 0].tolist() == res.answer_token_ids
    assert np.all(res.token_kl >= 0)
    assert len(res.token_kl) == len(res.answer_tokens) == res.n_tokens
    assert res.retrieval.topk_probs.shape == (res.n_tokens, 5)
    assert np.all(np.diff(res.retrieval.topk_probs, axis=1) <= 1e-7)


def test_teacher_forcing_alignment(tiny_handle):
    prep = prepare_prompts(tiny_handle, Q, C, _settings())
    answer = [70, 71, 72, 73]
    tf = teacher_forced_logits(tiny_handle, prep.parametric.ids, answer)
    full = _manual_logits(tiny_handle, prep.parametric.ids + answer)
    for t in range(len(answer)):
        # row t predicts answer[t] from prompt + answer[:t]
        np.testing.assert_allclose(tf[t].double().numpy(), full[len(prep.parametric.ids) - 1 + t].numpy(), atol=1e-4)


def test_identical_paths_give_zero(tiny_handle):
    """Z = 0 when both paths see the same input: score the retrieval prompt against itself."""
    from core.engine import generate_greedy, score_paths

    prep = prepare_prompts(tiny_handle, Q, C, _settings())
    ((ans, logits, _),) = generate_greedy(tiny_handle, [prep.retrieval.ids], _settings())
    tf = teacher_forced_logits(tiny_handle, prep.retrieval.ids, ans)
    scores = score_paths(logits, tf, ans, 5)
    assert float(scores.token_kl.sum()) == pytest.approx(0.0, abs=1e-4)


def test_json_round_trip_is_lossless(tiny_handle):
    res = run_dual_path(tiny_handle, Q, C, _settings())
    back = DualPathResult.from_json(res.to_json())
    for name in (
        "token_kl",
        "retrieval.entropy",
        "parametric.entropy",
        "retrieval.topk_ids",
        "parametric.topk_probs",
        "parametric.logprob",
    ):
        a, b = attrgetter(name)(res), attrgetter(name)(back)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert back.to_json() == res.to_json()
    with pytest.raises(ValueError, match="missing keys"):
        DualPathResult.from_dict({"model": "x"})


def test_score_only_mode_matches_full_mode(tiny_handle):
    full = run_dual_path(tiny_handle, Q, C, _settings())
    fast = run_dual_path(tiny_handle, Q, C, _settings(), free_parametric=False)
    assert fast.answer_token_ids == full.answer_token_ids
    assert fast.parametric.answer == "" and fast.parametric.finish == "not generated"
    np.testing.assert_allclose(fast.token_kl, full.token_kl, rtol=1e-3, atol=1e-5)


def test_stream_events_report_both_paths(tiny_handle):
    events = []
    res = run_dual_path(tiny_handle, Q, C, _settings(), on_event=events.append)
    paths = {e.path for e in events}
    assert paths == {"retrieval", "parametric", "scoring"}
    last_rag = [e for e in events if e.path == "retrieval"][-1]
    assert last_rag.done and last_rag.n_tokens == res.n_tokens
    assert events[-1].path == "scoring" and events[-1].done


@pytest.mark.parametrize(
    ("query", "context", "message"),
    [
        ("", C, "query is empty"),
        ("   \n\t ", C, "query is empty"),
        (Q, "  ", "context is empty"),
    ],
)
def test_bad_input_is_rejected_clearly(tiny_handle, query, context, message):
    with pytest.raises(ValueError, match=message):
        run_dual_path(tiny_handle, query, context, _settings())


def test_over_budget_context_is_refused_not_truncated(tiny_handle):
    budget = tiny_handle.info.max_tokens
    with pytest.raises(ValueError, match=rf"limit of {budget:,} tokens") as err:
        run_dual_path(tiny_handle, Q, "word " * 600, _settings())
    assert "nothing is cut" in str(err.value)


def test_control_characters_emoji_rtl_and_markup(tiny_handle):
    query = "Wh\x00ere\x07 is 🗼 the tower? מגדל"
    context = "<script>alert(1)</script> The tower 🗼 stands in Quillmere. בירה"
    res = run_dual_path(tiny_handle, query, context, _settings())
    assert "\x00" not in res.query and "\x07" not in res.query
    assert "🗼" in res.query and "מגדל" in res.query
    assert "<script>alert(1)</script>" in res.context
    assert any("control character" in w for w in res.warnings)
    assert DualPathResult.from_json(res.to_json()).query == res.query


def test_settings_validation():
    with pytest.raises(ValueError, match="template"):
        DualPathSettings(template="Z").validate()
    with pytest.raises(ValueError, match="max_new_tokens"):
        DualPathSettings(max_new_tokens=0).validate()


def test_concurrent_runs_equal_solo_runs(tiny_handle):
    inputs = [(Q, C), ("Who built it?", "It was built by Odrin Vale in 1802.")]
    solo = [run_dual_path(tiny_handle, q, c, _settings()).to_json() for q, c in inputs]
    results: dict[int, list[str]] = {0: [], 1: []}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(3):
                r = run_dual_path(tiny_handle, *inputs[i], _settings())
                results[i].append(r.to_json())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in (0, 1):
        strip = [_without_timings(s) for s in results[i]]
        assert all(s == _without_timings(solo[i]) for s in strip)


def _without_timings(text: str) -> dict:
    d = DualPathResult.from_json(text).to_dict()
    d.pop("timings")
    return d
