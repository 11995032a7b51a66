"""Every bundled example's two-axis headline (embedded model, the app's default settings) matches the
``expected`` verdict written into assets/examples/examples.json from what the model does — the example's own
context and facts, and for a known fact whose context agrees with memory, the swap test — no example was used to
fit anything (the axes are fitted on the behavior set's calibration rows only)."""

from __future__ import annotations

import json

import pytest

from core.engine.verdict import READ, RECALLED
from core.io import asset_path

EXAMPLES = json.loads(asset_path("examples", "examples.json").read_text(encoding="utf-8"))


def test_every_example_names_its_expected_headline():
    assert len(EXAMPLES) == 10
    assert all(e["expected"] in (READ, RECALLED) for e in EXAMPLES)
    # a context that agrees with a known fact is read or not by what the swap test shows (Mona Lisa: the answer
    # follows a swapped name, `python -m core run --swap-test`); invented or counterfactual contexts are read
    assert {e["expected"] for e in EXAMPLES if e["kind"] == "known-fact"} == {READ, RECALLED}
    assert {e["expected"] for e in EXAMPLES if e["kind"] != "known-fact"} == {READ}


KNOWN_MISMATCH: set[str] = set()
"""Examples whose headline differs from the expected verdict, measured with the bundled axes (none today; the
earlier calibration left Zorvath Inconclusive). Any new one is kept visible here, not tuned away."""


@pytest.fixture(scope="module")
def example_headlines(bundled_examples_report):
    """Each example's expected verdict beside its headline (verdict, reason), read from evaluate's batched run of
    the ten examples (tests/conftest.py; evaluate's headline is the page's: tests/unit/evaluation/
    test_evaluate_headline.py)."""
    examples, rows, report = bundled_examples_report
    by_row = {r["row"]: r for r in report["rows"]}
    return {
        e["id"]: (e["expected"], by_row[row.row]["verdict"], by_row[row.row]["axes"]["reason"])
        for e, row in zip(examples, rows)
    }


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_bundled_examples_headline_matches_expected(example_headlines):
    wrong = {i: (verdict, reason) for i, (want, verdict, reason) in example_headlines.items() if verdict != want}
    assert set(wrong) <= KNOWN_MISMATCH, wrong
    for _, _, reason in example_headlines.values():  # one computed sentence of why, with numbers of this run
        assert reason and any(ch.isdigit() for ch in reason)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_every_bundled_example_matches(example_headlines):
    assert all(verdict == want for want, verdict, _ in example_headlines.values())
