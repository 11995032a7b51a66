"""Behavior labels: the answer matcher, the labeler, and detector AUCs against behavior labels (issue 23)."""

from __future__ import annotations

import pytest

from core.detectors.registry import GROUNDED_HIGH, MEMORIZED_HIGH, Detector
from core.evaluation.behavior import (
    BOTH,
    NEITHER,
    READ,
    RECALLED,
    answer_sources,
    behavior_label,
    behavior_report,
    behavior_table,
    find_spans,
    normalize_words,
    split_aliases,
    verdict_agreement,
)


@pytest.mark.parametrize(
    ("answer", "alias", "found"),
    [
        ("The capital is PARIS.", "Paris", True),
        ("It is Paris, France", "paris", True),
        ("Romeo and Juliet", "Rome", False),  # whole words only
        ("It was written in Italian", "Italy", False),
        ("Ciudad de México", "Ciudad de Mexico", True),  # accents
        ("the United States", "United States", True),
        ("an apple a day", "The Apple", True),  # articles dropped on both sides
        ("It has eight legs", "8", True),  # number words as digits
        ("The season had 23 episodes.", "twenty-three", False),  # only single number words are mapped
        ("about 1,000 people", "1000", True),  # thousands separators
        ("Saint-Étienne!", "saint etienne", True),  # punctuation and accents
        ("", "Paris", False),
    ],
)
def test_find_spans_matches_whole_normalized_words(answer, alias, found):
    assert bool(find_spans(answer, [alias])) is found


def test_normalize_words_and_aliases():
    assert normalize_words("The Beatles' “Abbey Road”, 1969") == ["beatles", "abbey", "road", "1969"]
    assert split_aliases("USA | United States || ") == ["USA", "United States"]
    assert split_aliases(["US", "", "   "]) == ["US"]
    assert split_aliases(None) == []


@pytest.mark.parametrize(
    ("answer", "ctx", "mem", "expected"),
    [
        ("Beats Music is owned by Microsoft.", "Microsoft", "Apple", (READ, "context")),
        ("Apple owns it.", "Microsoft", "Apple", (RECALLED, "memory")),
        ("Apple, not Microsoft.", "Microsoft", "Apple", (None, BOTH)),
        ("I do not know.", "Microsoft", "Apple", (None, NEITHER)),
        ("It is in New York.", "York", "New York", (RECALLED, "memory")),  # "York" inside "New York" is not read
        ("York, in England.", "York", "New York", (READ, "context")),
        ("The answer is Veyrun.", "Veyrun", "", (READ, "context")),  # an invented fact can only be read
        ("It is owned by Apple.", "", "Apple", (RECALLED, "memory")),  # an on-topic context can only be recalled
        ("The USA.", "Canada", "United States | USA", (RECALLED, "memory")),  # aliases
        ("seven", "7", "23", (READ, "context")),
    ],
)
def test_behavior_label_on_hand_made_answers(answer, ctx, mem, expected):
    assert behavior_label(answer, ctx, mem) == expected


def test_answer_sources_reports_both_sides():
    assert answer_sources("Lyon or Paris", ["Lyon"], ["Paris"]) == (True, True)
    assert answer_sources("Lyon", ["Lyon"], ["Paris"]) == (True, False)


def _det(name: str, higher: str = MEMORIZED_HIGH) -> Detector:
    return Detector(name=name, label=name, higher_means=higher, score=lambda inp: 0.0, cost="free", source="test")


def _record(answer: str, kind: str, ctx: str, mem: str, score: float, verdict: str) -> dict:
    return {
        "rag_answer": answer,
        "extra.kind": kind,
        "extra.answer_context": ctx,
        "extra.answer_memory": mem,
        "scores": {"s": score, "neg": -score},
        "verdict": verdict,
    }


def _mann_whitney_auc(pos: list[float], neg: list[float]) -> float:
    """AUC by hand: the share of (positive, negative) pairs ordered correctly, ties counting one half."""
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_behavior_report_auc_matches_a_hand_computation():
    records = [
        # counterfactual (templated conflict) rows: recalled ones name "Alpha", read ones name "Beta"
        _record("It is Alpha.", "counterfactual", "Beta", "Alpha", 0.9, "recalled"),
        _record("It is Alpha.", "counterfactual", "Beta", "Alpha", 0.4, "inconclusive"),
        _record("It is Beta.", "counterfactual", "Beta", "Alpha", 0.5, "read"),
        _record("It is Beta.", "counterfactual", "Beta", "Alpha", 0.1, "recalled"),
        _record("It is Beta.", "counterfactual", "Beta", "Alpha", 0.4, "read"),
        # NQ rows (prose conflict)
        _record("seven", "nq_swap", "7", "23", 0.2, "read"),
        _record("23 episodes", "nq_swap", "7", "23", 0.3, "recalled"),
        # left out: neither and both
        _record("No idea.", "counterfactual", "Beta", "Alpha", 0.8, "read"),
        _record("Alpha or Beta", "counterfactual", "Beta", "Alpha", 0.8, "read"),
        # not conflict rows: an on-topic (recalled) and an invented (read) row
        _record("It is Alpha.", "on_topic", "", "Alpha", 0.7, "recalled"),
        _record("Veyrun.", "invented", "Veyrun", "", 0.05, "inconclusive"),
    ]
    dets = {"s": _det("s"), "neg": _det("neg", GROUNDED_HIGH)}
    rep = behavior_report(records, dets, n_boot=50, seed=0)
    assert rep is not None
    assert rep["left_out"] == {NEITHER: 1, BOTH: 1}
    subsets = rep["subsets"]
    templ = subsets["conflict_templated"]
    assert (templ["n_read"], templ["n_recalled"]) == (3, 2)
    expected = _mann_whitney_auc([0.9, 0.4], [0.5, 0.1, 0.4])
    assert templ["detectors"]["s"]["auc"] == pytest.approx(expected)
    assert expected == pytest.approx(4.5 / 6)
    # a detector whose high score means grounded is oriented: −score gives the same AUC
    assert templ["detectors"]["neg"]["auc"] == pytest.approx(expected)
    lo, hi = templ["detectors"]["s"]["auc_ci"]
    assert 0.0 <= lo <= hi <= 1.0
    assert subsets["conflict_prose"]["detectors"]["s"]["auc"] == pytest.approx(1.0)
    conflict = subsets["conflict"]
    assert conflict["n"] == 7
    assert conflict["detectors"]["s"]["auc"] == pytest.approx(_mann_whitney_auc([0.9, 0.4, 0.3], [0.5, 0.1, 0.4, 0.2]))
    everything = subsets["all"]
    assert everything["n"] == 9
    assert everything["detectors"]["s"]["auc"] == pytest.approx(
        _mann_whitney_auc([0.9, 0.4, 0.3, 0.7], [0.5, 0.1, 0.4, 0.2, 0.05])
    )
    # the headline verdict on the templated conflict rows: 3 of 5 match, 1 inconclusive, 1 wrong
    v = templ["verdict"]
    assert (v["n"], v["match"], v["inconclusive"], v["wrong"]) == (5, 3, 1, 1)
    assert v["per_behavior"][RECALLED]["match"] == 1 and v["per_behavior"][READ]["match"] == 2
    table = behavior_table(rep)
    assert {(r["subset"], r["detector"]) for r in table} >= {("conflict", "s"), ("all", "neg")}


def test_behavior_report_is_none_without_behavior_columns_and_flags_a_missing_class():
    dets = {"s": _det("s")}
    assert behavior_report([{"rag_answer": "x", "scores": {"s": 1.0}}], dets) is None
    only_read = [_record("Beta", "counterfactual", "Beta", "Alpha", float(i), "read") for i in range(3)]
    rep = behavior_report(only_read, dets, n_boot=10)
    entry = rep["subsets"]["conflict"]["detectors"]["s"]
    assert entry["auc"] is None and "both" in entry["note"]


def test_conflict_set_records_use_top_level_columns_and_count_as_project_conflict():
    rec = {"rag_answer": "Krakow", "answer_context": "Krakow", "answer_memory": "Warsaw", "scores": {"s": 0.1}}
    rec2 = {"rag_answer": "Warsaw", "answer_context": "Krakow", "answer_memory": "Warsaw", "scores": {"s": 0.9}}
    rep = behavior_report([rec, rec2], {"s": _det("s")}, n_boot=10)
    assert rep["subsets"]["conflict_templated"]["detectors"]["s"]["auc"] == pytest.approx(1.0)
    assert "conflict_prose" not in rep["subsets"]


def test_verdict_agreement_counts_and_rates():
    out = verdict_agreement(["read", "recalled", "inconclusive", "read"], [READ, READ, RECALLED, READ])
    assert (out["match"], out["inconclusive"], out["wrong"]) == (2, 1, 1)
    assert out["match_rate"] == pytest.approx(0.5) and out["inconclusive_rate"] == pytest.approx(0.25)
    assert out["per_behavior"][RECALLED]["match_rate"] == 0.0
    empty = verdict_agreement([], [])
    assert empty["n"] == 0 and empty["match_rate"] is None
