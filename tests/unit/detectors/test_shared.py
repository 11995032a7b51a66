"""The retrieval path's shared traced forward: one pass per row for the Lookback Lens, ReDeEP and CRM's h^c, with
the same numbers as each detector's own pass (the independent computation: the standalone functions)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import core.model.trace as trace_module
from core.detectors import DetectorInput, get, keys
from core.detectors import shared as shared_module
from core.detectors.shared import (
    lookback_map_for,
    plan,
    redeep_trace_for,
    release,
    retrieval_pass,
    retrieval_state,
)
from core.engine import DualPathSettings, run_dual_path
from core.examples import load_examples
from core.methods.internals import displacement
from core.methods.lookback import lookback_map
from core.methods.redeep import choice_for, redeep_trace

pytestmark = pytest.mark.usefixtures("one_thread")

Q, C = "Where is the tower?", "The tower stands in Quillmere, by the river."
FULL = DualPathSettings(max_new_tokens=8, score_window=8, top_k=3, force_length=True)
SHORT_WINDOW = replace(FULL, score_window=3)
"""ReDeEP scores the first 3 of 8 answer tokens: the shared pass runs past its rows."""
SHARED = ("lookback_mean", "redeep", "redeep_ecs", "redeep_pks", "crm_l2")
"""Detectors of the three families that need no bundled file on the tiny model."""


@pytest.fixture(scope="module", params=[FULL, SHORT_WINDOW], ids=["window=answer", "window<answer"])
def run(request, tiny_handle):
    return tiny_handle, run_dual_path(tiny_handle, Q, C, request.param), request.param


def _forwards(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = trace_module.run_model

    def counted(model, keep, **inputs):
        calls.append(int(inputs["input_ids"].shape[-1]))
        return real(model, keep, **inputs)

    monkeypatch.setattr(trace_module, "run_model", counted)
    return calls


def test_each_product_equals_the_detectors_own_pass(run):
    handle, result, settings = run
    inp = DetectorInput(handle, result, settings)
    own_map = lookback_map(handle, result)
    np.testing.assert_allclose(lookback_map_for(inp).lr, own_map.lr, rtol=1e-5, atol=1e-6)
    assert np.array_equal(np.isnan(lookback_map_for(inp).lr), np.isnan(own_map.lr))
    choice = choice_for(handle, result.template)
    mine, own = redeep_trace_for(inp, choice), redeep_trace(handle, result, choice.k_percent, layers=choice.layers)
    assert mine.ecs.shape == own.ecs.shape and mine.n_tokens == min(result.n_tokens, settings.score_window)
    np.testing.assert_allclose(mine.ecs, own.ecs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mine.pks, own.pks, rtol=1e-4, atol=1e-7)
    assert (mine.rows, mine.tokens, mine.n_top) == (own.rows, own.tokens, own.n_top)
    np.testing.assert_allclose(
        displacement(handle, result, retrieval_state(inp)), displacement(handle, result), rtol=1e-5, atol=1e-5
    )


def test_three_families_pay_one_retrieval_pass_and_one_parametric_prompt(run, monkeypatch):
    handle, result, settings = run
    calls = _forwards(monkeypatch)
    inp = DetectorInput(handle, result, settings)
    scores = {name: get(name).score(inp) for name in SHARED}
    assert all(np.isfinite(v) for v in scores.values())
    prompt_len = result.retrieval.prompt_len
    assert calls == [prompt_len + result.n_tokens - 1, result.parametric.prompt_len]
    assert retrieval_pass(inp) is inp.cache[keys.RETRIEVAL_TRACE]
    release(inp)
    assert keys.RETRIEVAL_TRACE not in inp.cache and get("redeep_ecs").score(inp) == scores["redeep_ecs"]
    assert len(calls) == 2, "the derived products stay cached after the pass is released"


def test_without_the_shared_pass_every_score_is_the_same(run, monkeypatch):
    handle, result, settings = run
    shared_inp = DetectorInput(handle, result, settings)
    with_pass = {name: get(name).score(shared_inp) for name in SHARED}
    monkeypatch.setattr(shared_module, "retrieval_pass", lambda inp, **_: None)
    calls = _forwards(monkeypatch)
    own_inp = DetectorInput(handle, result, settings)
    alone = {name: get(name).score(own_inp) for name in SHARED}
    assert len(calls) == 4, "each family its own pass: lookback, ReDeEP, CRM's two prompts"
    assert with_pass == pytest.approx(alone, rel=1e-5, abs=1e-6)


def test_another_k_runs_its_own_pass_with_that_k(run):
    handle, result, settings = run
    inp = DetectorInput(handle, result, settings)
    choice = replace(choice_for(handle, result.template), k_percent=50.0)
    mine = redeep_trace_for(inp, choice)
    assert inp.cache[keys.RETRIEVAL_TRACE].redeep.k_percent == 10.0 and mine.k_percent == 50.0
    np.testing.assert_array_equal(mine.ecs, redeep_trace(handle, result, 50.0, layers=choice.layers).ecs)


def test_on_the_embedded_model_the_first_example_scores_as_before(embedded_handle, monkeypatch):
    example = load_examples()[0]
    settings = DualPathSettings(max_new_tokens=8, score_window=8)
    result = run_dual_path(embedded_handle, example.query, example.context, settings)
    names = ("lookback", "lookback_mean", "redeep", "redeep_ecs", "redeep_pks", "crm_lts", "crm_l2", "crm_lr")
    shared_inp = DetectorInput(embedded_handle, result, settings)
    with_pass = {name: get(name).score(shared_inp) for name in names}
    monkeypatch.setattr(shared_module, "retrieval_pass", lambda inp, **_: None)
    own_inp = DetectorInput(embedded_handle, result, settings)
    alone = {name: get(name).score(own_inp) for name in names}
    assert with_pass == pytest.approx(alone, rel=1e-4, abs=1e-6)


def test_crm_alone_keeps_its_own_prompt_pass_and_a_planned_reader_shares(run, monkeypatch):
    handle, result, settings = run
    calls = _forwards(monkeypatch)
    alone = DetectorInput(handle, result, settings)
    plan(alone, ["repcs", "crm_l2"])
    value = get("crm_l2").score(alone)
    assert (
        calls == [result.retrieval.prompt_len, result.parametric.prompt_len] and keys.RETRIEVAL_TRACE not in alone.cache
    )
    calls.clear()
    with_reader = DetectorInput(handle, result, settings)
    plan(with_reader, ["crm_l2", "redeep_ecs"])
    assert get("crm_l2").score(with_reader) == pytest.approx(value, rel=1e-5)
    get("redeep_ecs").score(with_reader)
    assert calls == [result.retrieval.prompt_len + result.n_tokens - 1, result.parametric.prompt_len]


@pytest.fixture(scope="module")
def recorded(tiny_handle):
    """The same run as ``run``'s first, made with ``record=True`` (as the Dual Path page makes it)."""
    return tiny_handle, run_dual_path(tiny_handle, Q, C, FULL, record=True), FULL


def test_recording_changes_no_score_of_the_run(recorded):
    handle, rec, settings = recorded
    result = run_dual_path(handle, Q, C, settings)
    assert rec.repcs_score == result.repcs_score and np.array_equal(rec.token_kl, result.token_kl)
    timed = {"timings": {}}
    assert replace(rec, **timed).to_json() == replace(result, **timed).to_json(), "the internals are never serialized"
    assert "internals=" not in repr(rec), "nor shown"  # (the headline's own ``internals`` key is another thing)
    assert rec.internals is not None and rec.internals.retrieval.failed is None and result.internals is None


def test_a_recorded_run_needs_no_forward_for_three_families(recorded, monkeypatch):
    handle, result, settings = recorded
    own = {name: get(name).score(DetectorInput(handle, replace(result, internals=None), settings)) for name in SHARED}
    calls = _forwards(monkeypatch)
    inp = DetectorInput(handle, replace(result), settings)  # a copy: its internals are dropped below, not the fixture's
    scores = {name: get(name).score(inp) for name in SHARED}
    assert calls == [], "the retrieval trace and CRM's h^0 come from the run's own passes"
    assert scores == pytest.approx(own, rel=1e-4, abs=1e-6)
    h_0 = result.internals.parametric_state
    alone = trace_module.trace(handle, [result.parametric.prompt and _parametric_ids(handle, result)]).residual[0][:, 0]
    np.testing.assert_allclose(h_0, alone.numpy(), rtol=1e-5, atol=1e-5)
    release(inp)
    assert inp.result.internals is None and result.internals is not None


def _parametric_ids(handle, result) -> list[int]:
    from core.methods.internals.replay import prepared_for

    return prepared_for(handle, result).parametric.ids


def test_the_texts_pass_reads_the_context_and_radars_query_in_one_forward(run, monkeypatch):
    from core.methods.baselines import context_token_stats
    from core.methods.radar import features_from_trace, radar_prompt, trace_prompt

    handle, result, settings = run
    monkeypatch.setattr(shared_module, "feature_table_for", lambda handle, compute=False: object())
    calls = _forwards(monkeypatch)
    inp = DetectorInput(handle, result, settings)
    plan(inp, ["ppl", "min_kpp_10", "radar"])
    shared_module.text_pass(inp)
    shared_module.text_pass(inp)  # once per row
    stats, radar = inp.cache[keys.CONTEXT_TOKENS], inp.cache[keys.RADAR_TRACE]
    assert len(calls) == 1
    own = context_token_stats(handle, result.context)
    for key in ("logprob", "mu", "sigma"):
        np.testing.assert_allclose(stats[key], own[key], rtol=1e-5, atol=1e-5)
    alone = trace_prompt(handle, radar_prompt(result.query))
    assert radar.token_ids == alone.token_ids and radar.top_token_ids == alone.top_token_ids
    assert features_from_trace(radar) == pytest.approx(features_from_trace(alone), rel=1e-4, abs=1e-6)


def test_the_texts_pass_runs_only_when_both_texts_are_read(run, monkeypatch):
    handle, result, settings = run
    monkeypatch.setattr(shared_module, "feature_table_for", lambda handle, compute=False: object())
    calls = _forwards(monkeypatch)
    for names in (["ppl", "zlib"], ["radar"], ["repcs", "crm_l2"]):
        inp = DetectorInput(handle, result, settings)
        plan(inp, names)
        shared_module.text_pass(inp)
        assert keys.CONTEXT_TOKENS not in inp.cache and keys.RADAR_TRACE not in inp.cache
    monkeypatch.setattr(shared_module, "feature_table_for", lambda handle, compute=False: None)
    inp = DetectorInput(handle, result, settings)
    plan(inp, ["ppl", "radar"])
    shared_module.text_pass(inp)
    assert calls == [] and keys.CONTEXT_TOKENS not in inp.cache, "no RADAR classifier yet: nothing batched"


def test_on_the_embedded_model_the_pages_path_scores_every_cheap_detector_as_before(embedded_handle, monkeypatch):
    """The Dual Path page's path — a recorded run, then the agreement view — pays one forward (the context text and
    RADAR's query together) and gives every cheap detector the score and verdict of the plain path."""
    from core.detectors.agreement import assess, detector_input

    example = load_examples()[0]
    settings = DualPathSettings(max_new_tokens=16, score_window=16)
    plain = run_dual_path(embedded_handle, example.query, example.context, settings)
    recorded = run_dual_path(embedded_handle, example.query, example.context, settings, record=True)
    assert recorded.repcs_score == plain.repcs_score
    before = {v.name: v for v in assess(embedded_handle, plain, inp=detector_input(embedded_handle, plain)).verdicts}
    calls = _forwards(monkeypatch)
    forwards: list[int] = []
    real_forward = type(embedded_handle).forward
    monkeypatch.setattr(
        type(embedded_handle), "forward", lambda self, **kw: forwards.append(1) or real_forward(self, **kw)
    )
    after = assess(embedded_handle, recorded, inp=detector_input(embedded_handle, recorded)).verdicts
    assert len(calls) == 1 and forwards == [], "one forward: the context text and RADAR's query, batched"
    assert recorded.internals is None, "released once the view is done"
    for v in after:
        assert v.error is None and before[v.name].error is None, v.name
        assert v.score == pytest.approx(before[v.name].score, rel=1e-4, abs=1e-6), v.name
        assert v.verdict == before[v.name].verdict, v.name
