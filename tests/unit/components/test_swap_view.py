"""The swap test's estimate counts its units of work (issue 45: ≈ 40 s for a 1.8 s test that had nothing to swap,
≈ 8 s for a 61.9 s one): the candidates it completes, the answer it generates again, and none of it when it ends
before the model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from components import swap_view
from core.engine.estimate import GENERATED_TOKEN, PROMPT_TOKEN, RUN_BASIS, CostMeter, Work, estimate_run
from core.engine.swap import FOLLOWED, MAX_WORD_TOKENS, NOT_APPLICABLE, SwapTest

RESULT = SimpleNamespace(retrieval=SimpleNamespace(token_ids=list(range(40)), prompt_len=80), query="Who?")


def test_the_work_is_the_completions_and_one_answer_as_long_as_the_runs_own() -> None:
    full = swap_view.work(RESULT, (3, 50, 3))  # three alternatives' answers, decoded in one batch
    assert full == Work(steps=MAX_WORD_TOKENS + 40, prompt_tokens=3 * 50 + 3 * 80)
    assert swap_view.work(RESULT, (0, 0, 0)) == Work(), "nothing to swap: no model call"
    assert swap_view.work(RESULT, (0, 0, 1)).steps == 40, "a shifted number: no completion, one answer"


def test_a_test_that_found_no_alternative_did_only_its_completions() -> None:
    none_found = SwapTest(NOT_APPLICABLE, reason="no plausible alternative")
    assert swap_view.done_work(None, RESULT, (3, 50, 3), none_found) == Work(MAX_WORD_TOKENS, 150)
    answered = SwapTest(FOLLOWED, answer="Ostrel", swapped_context="Ostrel is the capital.")
    done = swap_view.done_work(None, RESULT, (3, 50, 3), answered)
    assert done.steps > MAX_WORD_TOKENS, "the answer to the swapped context counts"


def test_after_one_swap_test_the_next_is_scaled_to_its_own_work() -> None:
    meter = CostMeter()
    meter.observe("h", GENERATED_TOKEN, 1.0, 10)
    meter.observe("h", PROMPT_TOKEN, 0.1, 100)
    short = swap_view.work(RESULT, (3, 50, 3))
    meter.observe_run("h", swap_view.RUN_KIND, 10.0, short)
    long_answer = SimpleNamespace(retrieval=SimpleNamespace(token_ids=list(range(64)), prompt_len=80), query="Q")
    longer = estimate_run("h", swap_view.RUN_KIND, swap_view.work(long_answer, (3, 50, 3)), meter=meter)
    nothing = estimate_run("h", swap_view.RUN_KIND, swap_view.work(RESULT, (0, 0, 0)), meter=meter)
    assert longer.basis == RUN_BASIS and longer.seconds > 10.0, "a longer answer to generate: a longer test"
    assert nothing.seconds == pytest.approx(0.0), "nothing to swap: not the last test's 10 s"
