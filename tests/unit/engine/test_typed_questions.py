"""The typed questions of issue 42 and the other inputs of the newcomer's walk, on the embedded model with the
app's default settings: the span that answers each question, the verdict a person would give, and swap
alternatives of the span's kind (the texts: tests/unit/engine/typed_cases.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from core.engine import DualPathSettings, ScoreRequest, score_rows
from core.engine.answer_kind import DATE, NUMBER, PERSON, PLACE
from core.engine.axes import headline
from core.engine.stopwords import ANY_LANGUAGE
from core.engine.swap import NOT_APPLICABLE, headline_span, run_swap_tests
from core.engine.swap_verdict import agreeing, carry, implausible
from core.engine.swap_words import kind_of
from core.engine.verdict import INCONCLUSIVE, NEITHER, READ, RECALLED

sys.path.insert(0, str(Path(__file__).parent))
from typed_cases import CASES

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def runs(embedded_handle):
    request = ScoreRequest(settings=DualPathSettings(), free_parametric=True)
    names = list(CASES)
    results = score_rows(embedded_handle, [(CASES[n]["query"], CASES[n]["context"]) for n in names], request)
    swaps = run_swap_tests(embedded_handle, results, [headline_span(r) for r in results])
    return {n: (r, headline(r), s) for n, r, s in zip(names, results, swaps)}


def _span(head):
    return (head.span or {}).get("span") or {}


def test_vantrell_a_made_up_founder_is_neither(runs):
    _, head, swap = runs["vantrell"]
    span = _span(head)
    assert span["kind"] == PERSON and span["answers"] and not span["sourced"]
    assert head.verdict == NEITHER and head.title == (
        f"Neither: the answer names “{span['text']}”, found in neither the context nor what the model says without it"
    )
    assert "Marrow" not in span["text"] and swap.outcome == NOT_APPLICABLE  # nothing of the context to swap


def test_mars_is_read_at_the_number(runs):
    _, head, swap = runs["mars"]
    span = _span(head)
    assert span["text"] == "two" and span["kind"] == NUMBER and head.verdict == READ
    assert swap.trials and all(kind_of(t.alternative) == NUMBER for t in swap.trials)


def test_hamlet_the_answer_names_no_author(runs):
    result, head, swap = runs["hamlet"]
    assert "Shakespeare" not in result.retrieval.answer  # the model's answer to "Who wrote Hamlet?" names no one
    assert head.verdict == INCONCLUSIVE and head.title == "Inconclusive: the answer names no author"
    assert not _span(head)["answers"] and swap.outcome == NOT_APPLICABLE and "names no author" in swap.reason


def test_french_rome_is_judged_as_its_swap_test_shows(runs):
    _, head, swap = runs["french"]
    span = _span(head)
    assert span["text"] == "Roma" and span["kind"] == PLACE and span["context_form"] == "Rome"
    assert {w for w, _ in span["candidates"]} == {"Roma"}  # not "est", "la", "de"
    assert swap.decided and swap.original == "Rome" and head.verdict == swap.outcome


@pytest.mark.parametrize("name", ["washington", "lyon"])
def test_washington_and_lyon_are_read(runs, name):
    _, head, swap = runs[name]
    assert head.verdict == READ and _span(head)["kind"] in (PERSON, PLACE)
    for trial in swap.trials:  # a name for a name: never "Le", "Bien", a nationality or a near copy
        assert kind_of(trial.alternative) == "name" and trial.alternative.lower() not in ANY_LANGUAGE


def test_orvane_is_read_and_the_passages_disagreement_is_said(runs):
    _, head, swap = runs["orvane"]
    span = _span(head)
    assert head.verdict == READ and span["kind"] == DATE and span["text"] in ("1612", "1634")
    assert span["conflicts"] and "disagrees with itself" in head.reason
    assert set(swap.replaced) == {"1612", "1634"} and "disagrees with itself" in swap.reason
    for trial in swap.trials:  # every passage's date replaced, by a year
        assert "1612" not in trial.swapped_context and "1634" not in trial.swapped_context
        assert kind_of(trial.alternative) == DATE


def test_mona_lisa_over_an_irrelevant_context_is_recalled(runs):
    _, head, swap = runs["mona-lisa-irrelevant"]
    assert head.verdict == RECALLED and _span(head)["kind"] == PERSON
    assert swap.outcome == NOT_APPLICABLE  # the context does not hold the painter: nothing to swap


def test_the_verdict_a_swap_test_carries_is_still_the_one_a_person_gives(runs):
    """The verdict the page and ``run`` show (a decided swap test carries it where context and memory agree): the
    same verdicts a person would give, and the internals' own prediction kept beside it."""
    expected = {"vantrell": NEITHER, "mars": READ, "hamlet": INCONCLUSIVE, "washington": READ, "lyon": READ,
                "orvane": READ, "mona-lisa-irrelevant": RECALLED}  # fmt: skip
    for name, (_, head, swap) in runs.items():
        carried = carry(head, swap)
        if name == "french":  # read or recalled as its swap test shows
            assert carried.verdict == swap.outcome
        else:
            assert carried.verdict == expected[name], name
        if agreeing(head) and swap.decided and not implausible(swap):
            assert carried.internals is not None and carried.internals["verdict"] == head.verdict
        else:
            assert carried.internals is None
