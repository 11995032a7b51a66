"""The swap test (core.engine.swap): the text surgery by hand, and the whole test on the tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from core.engine import DualPathSettings, run_dual_path
from core.engine.span import AnswerSpan, locate_span
from core.engine.swap import (
    FOLLOWED,
    KEPT,
    MODEL_ALTERNATIVE,
    MODEL_ALTERNATIVE_RAG,
    NEITHER_OUTCOME,
    NOT_APPLICABLE,
    TYPE_MATCHED,
    SwapTest,
    _fits,
    _outcome,
    occurrences,
    run_swap_tests,
    shifted_number,
    swap_in,
    target_phrase,
    with_swap_test,
)


def _span(text: str, word: str) -> AnswerSpan:
    return AnswerSpan(text, word, (0,), (0,), 2.0, 1.0, True, "test")


def test_occurrences_and_swap_are_whole_word_and_case_blind():
    ctx = "Paris is big. PARIS, the capital; Parisians love paris."
    assert occurrences(ctx, "Paris") == 3  # not inside "Parisians"
    assert swap_in(ctx, "paris", "Lyon") == "Lyon is big. Lyon, the capital; Parisians love Lyon."
    assert swap_in("George  Washington was first.", "George Washington", "Adams") == "Adams was first."


def test_target_is_the_whole_span_else_its_head_else_none():
    assert target_phrase(_span("George Washington", "george"), "George Washington was first.") == "George Washington"
    assert target_phrase(_span("George Washington", "george"), "George was first.") == "George"
    assert target_phrase(_span("Europe", "europe"), "Toulouse is in Africa.") is None


def test_an_alternative_must_be_of_the_same_kind_and_new():
    banned = ("What is the capital of France?", "The capital is Paris.", "Paris.", "Paris.")
    assert _fits(" Lyon", "Paris", banned)
    assert not _fits(" lyon", "Paris", banned)  # a capitalized name for a capitalized name
    assert not _fits(" Paris", "Paris", banned) and not _fits(" Par", "Paris", banned)  # the original, a prefix
    assert not _fits(" France", "Paris", banned)  # already in the query or the context
    assert not _fits(" The", "Paris", banned) and not _fits(" 1874", "Paris", banned)
    assert _fits("1881", "1874", ()) and shifted_number("1874") == "1881" and shifted_number("14") == "17"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("It is in Lyon.", FOLLOWED),
        ("It is in Paris.", KEPT),
        ("It is in Rome.", NEITHER_OUTCOME),
        ("Paris or Lyon.", NEITHER_OUTCOME),
    ],
)
def test_outcome_reads_the_new_answer(answer, expected):
    assert _outcome(answer, "Paris", "Lyon") == expected


def test_swap_test_round_trips_through_json():
    test = SwapTest(FOLLOWED, "Paris", "Lyon", MODEL_ALTERNATIVE, 1, "Lyon is big.", "Lyon.", "follows", 0.5)
    assert SwapTest.from_dict(test.to_dict()) == test and test.decided
    assert not SwapTest(NOT_APPLICABLE).decided


def test_on_the_tiny_model(tiny_handle):
    settings = DualPathSettings(max_new_tokens=6, score_window=6)
    res = run_dual_path(tiny_handle, "Where is Qzx?", "Qzx is in Blorbville near the river.", settings)
    tokens = list(res.retrieval.tokens)
    span = locate_span(tokens, np.asarray(res.token_kl), res.query, context=res.context, level=0.0)
    forced = AnswerSpan("Blorbville", "blorbville", span.positions, span.head_positions, 1.0, 0.0, True, "forced")
    missing = AnswerSpan("Zzyzx", "zzyzx", span.positions, span.head_positions, 1.0, 0.0, True, "forced")
    tests = run_swap_tests(tiny_handle, [res, res, res], [forced, missing, None], settings)
    assert tests[1].outcome == NOT_APPLICABLE and "not in the context" in tests[1].reason
    assert tests[2].outcome == NOT_APPLICABLE and "no content word" in tests[2].reason
    first = tests[0]
    if first.outcome != NOT_APPLICABLE:  # the random model may propose no usable word; when it does:
        assert first.source in (MODEL_ALTERNATIVE, MODEL_ALTERNATIVE_RAG, TYPE_MATCHED)
        assert first.alternative and first.alternative.lower() != "blorbville"
        assert first.alternative in first.swapped_context and "Blorbville" not in first.swapped_context
        assert first.outcome in (FOLLOWED, KEPT, NEITHER_OUTCOME) and first.occurrences == 1
    data = with_swap_test(res, first).to_dict()
    assert data["axes"]["swap_test"]["outcome"] == first.outcome and data["verdict"] == data["axes"]["verdict"]
