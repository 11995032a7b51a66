"""Every bundled example's two-axis headline (embedded model, the app's default settings) matches the
``expected`` verdict written into assets/examples/examples.json from what the model does — the example's own
context and facts, and for a known fact whose context agrees with memory, the swap test — no example was used to
fit anything (the axes are fitted on the behavior set's calibration rows only)."""

from __future__ import annotations

import json

import pytest

from core.engine import DualPathSettings, ScoreRequest, score_rows
from core.engine.axes import headline
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
def example_headlines(embedded_handle):
    request = ScoreRequest(settings=DualPathSettings(), free_parametric=True)
    results = score_rows(embedded_handle, [(e["query"], e["context"]) for e in EXAMPLES], request)
    return {e["id"]: (e["expected"], headline(res)) for e, res in zip(EXAMPLES, results)}


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_bundled_examples_headline_matches_expected(example_headlines):
    wrong = {i: (h.verdict, h.reason) for i, (want, h) in example_headlines.items() if h.verdict != want}
    assert set(wrong) <= KNOWN_MISMATCH, wrong
    for _, h in example_headlines.values():  # one computed sentence of why, with numbers of this run
        assert h.reason and any(ch.isdigit() for ch in h.reason)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_every_bundled_example_matches(example_headlines):
    assert all(h.verdict == want for want, h in example_headlines.values())
