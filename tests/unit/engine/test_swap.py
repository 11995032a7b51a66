"""The swap test (core.engine.swap): the text surgery by hand, and the whole test on the tiny model."""

from __future__ import annotations

from dataclasses import replace

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
    _words,
    occurrences,
    run_swap_tests,
    shifted_number,
    swap_in,
    target_phrase,
    with_swap_test,
)
from core.engine.swap_words import kind_of, majority, summary, targets, truncated


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


def test_an_alternative_is_of_the_span_s_kind_and_no_near_copy():
    banned = ("What is the capital of France?", "Paris is the capital and largest city of France.", "Paris.", "Paris.")
    near = banned[:2]
    assert not _fits("Le", "Paris", banned, near) and not _fits("Der", "Lyon", ())  # a function word of a language
    assert not _fits("Dutch", "Rembrandt", ())  # a nationality is not a name
    # nor is a greeting or a title that opens a sentence ("Bonjour" for "Paris", "Dr" for "Edda Kvarnström")
    assert (
        not _fits("Bonjour", "Paris", ()) and not _fits("Madame", "Lyon", ()) and not _fits("Dr", "Edda Kvarnström", ())
    )
    veltria = ("What is the capital of Veltria?", "The capital of the Republic of Veltria is Marrowgate.")
    assert not _fits("Veltra", "Marrowgate", veltria, veltria)  # one letter from the query's "Veltria"
    assert _fits("Dunmore", "Marrowgate", veltria, veltria)
    assert _fits("1634", "1612", ()) and not _fits("two", "1612", ()) and not _fits("Lyon", "1612", ())  # a year
    assert _fits("three", "two", ()) and _fits("5", "two", ()) and not _fits("2", "two", ())  # a number
    assert not _fits("small", "two", ()) and not _fits("Roma", "Rome", ())  # a near copy of the original


def test_a_name_over_its_particles_takes_a_name_never_a_period_or_a_nationality():
    # "Leonardo da Vinci" is a name: "Renaissance" (a period, an adjective like "Dutch") is not of its kind
    assert kind_of("Leonardo da Vinci") == kind_of("Ludwig van Beethoven") == kind_of("Rembrandt") == "name"
    assert not _fits("Renaissance", "Leonardo da Vinci", ()) and not _fits("Italian", "Leonardo da Vinci", ())
    assert _fits("Michelangelo", "Leonardo da Vinci", ()) and _fits("Raphael", "Leonardo da Vinci", ())
    assert kind_of("the da Vinci code") == "word" and kind_of("Da Vinci") == "name"


@pytest.mark.parametrize("text", ["²", "①", "3.5", "٣", "", "12,34"])
def test_no_shifted_number_for_what_is_not_a_plain_number(text):
    assert shifted_number(text) is None


def test_shifted_numbers_of_any_length():
    big = "9" * 400
    shifted = shifted_number(big)
    assert shifted is not None and shifted.isdigit() and shifted != big and len(shifted) >= 400
    assert shifted_number("8,200") == "9,111" and shifted_number("1612") == "1619" and shifted_number("1999") == "1992"


def test_the_swap_sentences_start_with_a_capital():
    for outcome in (FOLLOWED, KEPT, NEITHER_OUTCOME):
        assert _words(outcome, "Marrowgate", "Veltra")[0].isupper()
    many = summary([FOLLOWED, FOLLOWED, NEITHER_OUTCOME], ["Dunmore", "Calder", "Ashby"], "Marrowgate", FOLLOWED)
    assert many.startswith("With 3 alternatives") and "for 2 of the 2 that decided" in many


def test_the_majority_of_the_alternatives_that_decided():
    assert majority([FOLLOWED, FOLLOWED, KEPT]) == FOLLOWED and majority([KEPT, NEITHER_OUTCOME]) == KEPT
    assert majority([FOLLOWED, KEPT]) == NEITHER_OUTCOME and majority([NEITHER_OUTCOME] * 3) == NEITHER_OUTCOME


def test_outcome_reads_a_near_form_of_the_original():
    assert _outcome("La capitale de l'Italie est Roma.", ["Rome", "Roma"], "Milano") == KEPT
    assert _outcome("La capitale de l'Italie est Milan.", ["Rome", "Roma"], "Milano") == FOLLOWED


def test_every_passage_s_value_is_replaced_where_they_disagree():
    context = "The bridge was completed in 1612 by masons.\n\nA chronicle says the bridge was completed in 1634."
    span = AnswerSpan("1612", "1612", (0,), (0,), 2.0, 1.0, True, "t", context_form="1612", conflicts=("1634",))
    assert targets(span, context) == ["1612", "1634"]
    assert swap_in(context, ["1612", "1634"], "1650").count("1650") == 2


def test_a_span_cut_by_the_token_budget_is_said_to_be_cut():
    span = AnswerSpan("Mar", "mar", (5,), (5,), 2.0, 1.0, True, "t")
    tokens = ["The", " capital", " of", " Veltria", " is", " Mar"]
    context = "The capital of the Republic of Veltria is Marrowgate."
    assert truncated(span, tokens, "length", context) == "Marrowgate"
    assert truncated(span, tokens, "eos", context) is None  # it ended by itself: not cut
    assert truncated(span, [*tokens, "."], "length", context) is None  # the span is not at the end


def test_a_cut_span_is_not_called_not_in_the_context(tiny_handle):
    settings = DualPathSettings(max_new_tokens=4, score_window=4)
    res = run_dual_path(tiny_handle, "Where is Qzx?", "Qzx is in Blorbville.", settings)
    res = replace(res, retrieval=replace(res.retrieval, finish="length"))
    n = len(res.retrieval.tokens)
    text = "".join(res.retrieval.tokens)
    cut = "Blorb" if text.rstrip()[-1:].isalnum() else None
    span = AnswerSpan("Blorb", "blorb", (n - 1,), (n - 1,), 2.0, 1.0, True, "forced")
    test = run_swap_tests(tiny_handle, [res], [span], settings)[0]
    assert test.outcome == NOT_APPLICABLE
    if cut:  # the random model's answer ends inside a word: the test says it was cut, not "not in the context"
        assert "token budget" in test.reason and "Blorbville" in test.reason and "not in the context" not in test.reason
    else:
        assert "not in the context" in test.reason
    assert test.reason[:1].isupper() or test.reason[:1] == "“"


def test_progress_hears_every_alternative_and_step(tiny_handle, monkeypatch):
    import core.engine.swap as swap

    def two_alternatives(_handle, plans, _batch_size, _limit):
        for p in plans:
            p.alternatives = [("Zarnow", MODEL_ALTERNATIVE), ("Quelby", MODEL_ALTERNATIVE_RAG)]

    monkeypatch.setattr(swap, "_completions", two_alternatives)
    settings = DualPathSettings(max_new_tokens=4, score_window=4)
    res = run_dual_path(tiny_handle, "Where is Qzx?", "Qzx is in Blorbville near the river.", settings)
    forced = AnswerSpan("Blorbville", "blorbville", (0,), (0,), 1.0, 0.0, True, "forced")
    heard: list[tuple[int, int, str]] = []
    test = run_swap_tests(tiny_handle, [res], [forced], settings, batch_size=1, progress=lambda *a: heard.append(a))[0]
    assert [t.alternative for t in test.trials] == ["Zarnow", "Quelby"]
    assert [t.swapped_context for t in test.trials] == [
        "Qzx is in Zarnow near the river.",
        "Qzx is in Quelby near the river.",
    ]
    assert heard[0] == (0, 2, "2 alternatives to try") and heard[-1] == (2, 2, "alternative 2 of 2")
    assert (1, 2, "alternative 1 of 2") in heard and any(x.startswith("alternative 2 of 2 · step") for *_, x in heard)
    assert test.outcome == majority([t.outcome for t in test.trials]) and test.reason[:1].isupper()
    assert SwapTest.from_dict(test.to_dict()) == replace(test, seconds=round(test.seconds, 3))


def test_a_swap_test_stored_before_trials_existed_still_loads():
    old = {"outcome": "read", "original": "Paris", "alternative": "Lyon", "source": MODEL_ALTERNATIVE}
    old |= {"occurrences": 1, "swapped_context": "Lyon.", "answer": "Lyon.", "reason": "follows", "seconds": 0.5}
    test = SwapTest.from_dict(old)
    assert test.trials == () and test.replaced == () and test.alternative == "Lyon" and test.decided
