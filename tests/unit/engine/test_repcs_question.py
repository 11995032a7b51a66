"""RePCS' box says what its own question is when its verdict differs from the headline (issue 42 C): the two never
sit side by side unexplained."""

from __future__ import annotations

import pytest

from core.engine.verdict import INCONCLUSIVE, NEITHER, READ, RECALLED, UNCALIBRATED, display, repcs_question


@pytest.mark.parametrize("repcs", [READ, RECALLED])
def test_nothing_is_said_where_they_agree(repcs):
    assert repcs_question(repcs, repcs) is None


@pytest.mark.parametrize("repcs", [INCONCLUSIVE, UNCALIBRATED, None])
def test_nothing_is_said_where_repcs_does_not_decide(repcs):
    assert repcs_question(repcs, READ) is None


@pytest.mark.parametrize(
    ("repcs", "headline", "shift"),
    [
        (RECALLED, READ, "barely moved"),
        (READ, RECALLED, "moved"),
        (READ, NEITHER, "moved"),
        ("memorized", READ, "barely moved"),
    ],
)
def test_a_disagreement_names_both_questions_and_which_verdict_stands(repcs, headline, shift):
    text = repcs_question(repcs, headline)
    assert text is not None and f"here it {shift}" in text
    assert f"RePCS says “{display(repcs)}”" in text and f"(“{display(headline)}”)" in text
    assert "the headline is the verdict" in text and "as a whole" in text
