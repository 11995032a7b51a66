"""core.methods.ablation.degenerate: gibberish and repetition flags next to an ablation's score."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.methods.ablation.degenerate import (
    annotate_report,
    degeneracy,
    degenerate_paths,
    is_word,
    loop_length,
    path_degeneracy,
)


@pytest.mark.parametrize(
    "text",
    [
        "Paris is the capital of France.",
        "The capital of France is Paris. It is known for the Eiffel Tower, built in 1889.",
        "Marrowgate.",
        "Lyoné café naïve São Paulo",
        "It has 8,848 m — about 29,032 ft high.",
    ],
)
def test_fluent_answers_are_not_flagged(text):
    flags = degeneracy(text)
    assert not flags.degenerate, flags.reasons
    assert flags.summary == "looks like text"


def test_repetition_is_rep3_and_a_run_of_identical_words():
    # "a b c a b c a b c": 7 trigrams, 3 distinct → rep-3 = 1 − 3/7, computed by hand
    flags = degeneracy("a b c a b c a b c")
    assert flags.repetition == pytest.approx(round(1 - 3 / 7, 4))
    assert flags.degenerate and "repeats itself" in flags.reasons[0]
    run = degeneracy("Paris Paris Paris Paris")
    assert run.longest_run == 4 and "4 identical words in a row" in run.reasons
    loop = degeneracy("The capital of France is Paris. " * 3)
    assert loop.degenerate and loop.distinct_2 == pytest.approx(round(6 / 17, 4))  # 17 bigrams, 6 distinct


def test_gibberish_is_flagged_by_its_non_word_share():
    flags = degeneracy("xqzt 8#4 @@!! ktbr wwww")
    assert flags.non_word == 1.0 and flags.degenerate
    mixed = degeneracy("ektionsstrom Bereich 7#; ЖизнTor")  # 2 of 4 tokens are not words
    assert mixed.non_word == 0.5 and mixed.degenerate
    assert degeneracy("").reasons == ["empty answer"]
    assert degeneracy(",\n\n,\n\n-\n\n-\n\n-").degenerate, "punctuation alone (measured at ε = 0.25, early layers)"
    assert not is_word("caf\ufffd") and not is_word("ЖизнTor") and is_word("don't") and not is_word("—")


def test_annotate_report_adds_flags_of_the_same_shape():
    report = {"clean": {"answer": "Paris."}, "answers": [["Paris.", "the the the the"], ["x", "y"]], "seeds": [0, 1]}
    annotate_report(report)
    assert [[f["degenerate"] for f in row] for row in report["degenerate"]] == [[False, True], [False, False]]
    assert report["degenerate_count"] == [1, 0] and report["clean"]["degenerate"]["degenerate"] is False
    patched = annotate_report({"patched": {"answer": "zzzz qqqq xxxx wwww"}})
    assert patched["patched"]["degenerate"]["degenerate"] is True


# Issue 26: measured answers the flag missed (Ablations → Veltria, dose–response at ε = 1, and the parametric
# answer at the default ε = 0.05), and short answers that must still pass.
BROKEN_AT_EPS_1 = '||$broken\\`):paralleled>"riculaahusemasaensely‹/了'
PARAMETRIC_LOOP = " ".join(["planet-sized"] * 9) + " …"


@pytest.mark.parametrize("text", [BROKEN_AT_EPS_1, PARAMETRIC_LOOP, "planet-sized" * 5, "了broken", "zzkq#@"])
def test_short_gibberish_mixed_scripts_and_loops_are_flagged(text):
    flags = degeneracy(text)
    assert flags.degenerate, text
    assert flags.summary.startswith("degenerate: ")


def test_the_reasons_name_what_is_wrong():
    reasons = degeneracy(BROKEN_AT_EPS_1).reasons
    assert any("short answer of non-words" in r for r in reasons) and any("mixes scripts" in r for r in reasons)
    assert loop_length("abcabcabcabc") == 4 and loop_length("Mississippi") == 1 and loop_length("1000000000") == 1
    assert any(r.startswith("loops") for r in degeneracy("hahahahaha").reasons)


@pytest.mark.parametrize(
    "text",
    ["Paris", "1969", "Lyon.", "Paris, France.", "C++", "C#", "#1", "$100", "100%", "Tokyo (東京)", "It costs €5."],
)
def test_short_normal_answers_are_not_flagged(text):
    assert not degeneracy(text).degenerate, degeneracy(text).reasons


def test_both_paths_of_a_run_are_checked():
    run = SimpleNamespace(
        retrieval=SimpleNamespace(answer="Veltria's capital is Marrowgate."),
        parametric=SimpleNamespace(answer=PARAMETRIC_LOOP),
    )
    flags = path_degeneracy(run)
    assert set(flags) == {"retrieval", "parametric"} and not flags["retrieval"].degenerate
    assert degenerate_paths(run) == ["parametric"]


# Issue 38: a preamble said twice is a stutter rep-3 misses (rep-3 0.36 on this answer).
@pytest.mark.parametrize(
    "text",
    [
        "The answer to your question is: The answer to your question is: Paris.",
        "The answer to your question is: Paris. The answer to your question is: Paris.",
    ],
)
def test_a_phrase_said_twice_back_to_back_is_flagged(text):
    flags = degeneracy(text)
    assert flags.repetition < 0.5, "rep-3 alone would not flag it"
    assert flags.degenerate and any(r.startswith("repeats a phrase back to back") for r in flags.reasons)
    assert "the answer to your question is" in flags.summary


@pytest.mark.parametrize(
    "text",
    [
        "Paris is the capital of France, and the capital of France is Paris.",  # said again, not back to back
        "I think, I think that it is Paris.",  # two words twice
        "one two three one two three",  # three short words (11 letters)
    ],
)
def test_a_phrase_said_again_later_or_a_short_one_is_not_flagged(text):
    assert not degeneracy(text).degenerate, degeneracy(text).reasons
