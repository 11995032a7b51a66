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
    # a context that agrees with a known fact is read or not by what the swap test shows (Mona Lisa, the capital
    # of France: the answer follows a swapped name; Hamlet: it keeps Shakespeare); invented or counterfactual
    # contexts are read
    assert {e["expected"] for e in EXAMPLES if e["kind"] == "known-fact"} == {READ, RECALLED}
    assert {e["expected"] for e in EXAMPLES if e["kind"] != "known-fact"} == {READ}


KNOWN_MISMATCH: set[str] = set()
"""Examples whose headline differs from the expected verdict, measured with the bundled axes (none today; the
earlier calibration left Zorvath Inconclusive). Any new one is kept visible here, not tuned away."""


@pytest.fixture(scope="module")
def example_headlines(bundled_examples_report, embedded_handle):
    """Each example's expected verdict beside the page's headline (verdict, reason): evaluate's batched run of the
    ten examples (tests/conftest.py; evaluate's headline is the internals' own, as the page's:
    tests/unit/evaluation/test_evaluate_headline.py), and where context and memory agree on the span, the verdict
    the run's swap test carries (:mod:`core.engine.swap_verdict`), as the page and ``run`` show it."""
    from core.engine import DualPathSettings, ScoreRequest, score_rows
    from core.engine.swap import headline_span, run_swap_tests
    from core.engine.swap_verdict import AUTO, carry, wants_swap

    examples, rows, report = bundled_examples_report
    by_row = {r["row"]: r for r in report["rows"]}
    out = {}
    agreeing = []
    for e, r in zip(examples, rows):
        axes = by_row[r.row]["axes"]
        out[e["id"]] = (e["expected"], by_row[r.row]["verdict"], axes["reason"])
        if axes["span"]["in_parametric"] and axes["span"]["in_context"]:
            agreeing.append((e, r))
    request = ScoreRequest(settings=DualPathSettings(), free_parametric=True)
    results = score_rows(embedded_handle, [(r.query, r.context) for _, r in agreeing], request)
    assert all(wants_swap(res.head, AUTO) for res in results)
    tests = run_swap_tests(embedded_handle, results, [headline_span(res) for res in results])
    for (e, _), res, test in zip(agreeing, results, tests):
        head = carry(res.head, test)
        out[e["id"]] = (e["expected"], head.verdict, head.reason)
        SWAPS[e["id"]] = test
    return out


SWAPS: dict = {}
"""The swap tests the agreeing examples' fixture ran, by example id."""


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_every_swap_alternative_is_of_the_span_s_kind(example_headlines):
    """Issue 42 B: a name for a name ("Renaissance" is no painter), a year for a year, never a function word."""
    from core.engine.stopwords import ANY_LANGUAGE
    from core.engine.swap_words import kind_of

    assert SWAPS, "the agreeing examples ran their swap tests"
    for example, test in SWAPS.items():
        for trial in test.trials:
            assert kind_of(trial.alternative) == kind_of(test.original), (example, test.original, trial.alternative)
            assert trial.alternative.lower() not in ANY_LANGUAGE, (example, trial.alternative)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_bundled_examples_headline_matches_expected(example_headlines):
    wrong = {i: (verdict, reason) for i, (want, verdict, reason) in example_headlines.items() if verdict != want}
    assert set(wrong) <= KNOWN_MISMATCH, wrong
    for _, _, reason in example_headlines.values():  # one computed sentence of why, with numbers of this run
        if reason.startswith("Decided by a swap test"):  # or the swap this run made: its alternative and answer
            assert reason.count("“") >= 2, reason
            continue
        assert reason and any(ch.isdigit() for ch in reason)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_every_bundled_example_matches(example_headlines):
    assert all(verdict == want for want, verdict, _ in example_headlines.values())
