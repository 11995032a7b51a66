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
