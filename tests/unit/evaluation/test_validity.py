"""What the internals add (core.evaluation.validity): the text-only rule, axis 1 alone, agreement and the bar."""

from __future__ import annotations

import pytest

from core.engine.verdict import INCONCLUSIVE, NEITHER, READ, RECALLED
from core.evaluation.validity import (
    UNDECIDED,
    agreement,
    axis1_verdict,
    meets_bar,
    text_only_verdict,
    validity_figures,
)


@pytest.mark.parametrize(
    ("answer", "parametric", "expected"),
    [
        # the first content word is "city" (not the answer): the no-context answer has it too → recalled (wrong)
        ("Toulouse is a city in Africa.", "Toulouse is a city in Europe.", RECALLED),
        ("It is Africa.", "It is Europe.", READ),  # "africa": not in the no-context answer, in the context
        ("It is Europe.", "It is Europe.", RECALLED),
        ("It is Asia.", "It is Europe.", UNDECIDED),  # neither source has it
        ("The continent is.", "x", UNDECIDED),  # no content word
    ],
)
def test_text_only_rule(answer, parametric, expected):
    query, context = "Which continent is Toulouse in?", "Toulouse is a city in Africa."
    assert text_only_verdict(query, context, answer, parametric) == expected


def test_axis1_alone():
    assert [axis1_verdict(s) for s in ("needed", "not needed", "mixed")] == [READ, RECALLED, UNDECIDED]


def test_agreement_counts_undecided_as_a_miss():
    verdicts = [READ, READ, INCONCLUSIVE, RECALLED, NEITHER, READ]
    behaviors = [READ, READ, READ, RECALLED, RECALLED, None]  # the last row's behavior is not decided: left out
    a = agreement(verdicts, behaviors)
    assert (a["n"], a["match"], a["match_rate"], a["undecided_rate"]) == (5, 3, 0.6, 0.4)
    assert a["per_behavior"][READ] == {"n": 3, "match": 2, "match_rate": pytest.approx(0.6667, abs=1e-4)}
    assert a["per_behavior"][RECALLED]["match_rate"] == 0.5


def test_the_bar_holds_a_behavior_only_with_enough_rows():
    entry = agreement([READ] * 95 + [INCONCLUSIVE] * 5 + [READ] * 5, [READ] * 100 + [RECALLED] * 5)
    assert entry["match_rate"] == pytest.approx(95 / 105, abs=1e-4)
    assert meets_bar(entry)  # 5 recalled rows (all wrong) are too few to be held to 75 %
    entry = agreement([READ] * 95 + [INCONCLUSIVE] * 5 + [READ] * 20, [READ] * 100 + [RECALLED] * 20)
    assert not meets_bar(entry)  # 20 recalled rows, none matched
    assert not meets_bar(agreement([], []))


def test_figures_split_the_hard_rows_and_the_agreeing_ones():
    rows = [
        {"behavior": READ, "headline": READ, "text_only": RECALLED, "axis1": READ, "relation": "conflict"},
        {"behavior": READ, "headline": READ, "text_only": READ, "axis1": UNDECIDED, "relation": "conflict"},
        {"behavior": RECALLED, "headline": READ, "text_only": UNDECIDED, "axis1": READ, "relation": "conflict"},
        {"behavior": READ, "headline": READ, "text_only": UNDECIDED, "axis1": READ, "relation": "agreeing",
         "swap": READ},
        {"behavior": None, "headline": RECALLED, "text_only": RECALLED, "axis1": RECALLED, "relation": "agreeing",
         "swap": "neither"},
    ]  # fmt: skip
    fig = validity_figures(rows)
    assert fig["headline"]["n"] == 4 and fig["headline"]["match"] == 3
    assert fig["text_only"]["match"] == 1 and fig["axis1"]["match"] == 2
    assert (fig["text_wrong"]["n"], fig["text_wrong"]["match"]) == (3, 2)  # where the text rule is wrong/undecided
    assert (fig["swap_agreeing"]["n"], fig["swap_agreeing"]["match"]) == (1, 1)  # only where the swap test decides
