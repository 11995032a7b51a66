"""The validation rows' constructions and their grouped split (core.evaluation.constructions)."""

from __future__ import annotations

import csv

import pytest

from core.evaluation.conflict_sources import Fact
from core.evaluation.constructions import (
    AGREEING,
    CALIBRATION,
    CONFLICT,
    FRESH,
    FRESH_CONSTRUCTION,
    PROSE,
    REPORT,
    TEMPLATED,
    ValidationRow,
    assign_splits,
    fresh_rows,
    norm_text,
    report_only_fresh,
    row_groups,
    split_leaks,
)
from core.io import asset_path


def _row(query: str, subject: str = "", split: str = "", construction: str = TEMPLATED) -> ValidationRow:
    return ValidationRow(construction, CONFLICT, "test", query, "ctx", ["a"], ["b"], subject=subject, split=split)


def test_a_question_in_both_splits_is_a_leak_even_written_differently():
    rows = [_row("What is the capital of Peru?", split=CALIBRATION), _row("what is the capital of  PERU", split=REPORT)]
    assert split_leaks(rows) == ["q:what is capital of peru in both splits"]


def test_a_report_question_naming_a_calibration_subject_is_a_leak():
    rows = [_row("Who owns Xamarin?", "Xamarin", CALIBRATION), _row("Is Xamarin open source?", split=REPORT)]
    leaks = split_leaks(rows)
    assert leaks and "names calibration subject 'xamarin'" in leaks[0]


def test_no_leak_when_the_splits_share_nothing():
    rows = [_row("Who owns Xamarin?", "Xamarin", CALIBRATION), _row("Who owns Beats Music?", "Beats Music", REPORT)]
    assert split_leaks(rows) == []


def test_rows_sharing_a_subject_or_naming_it_are_one_group_across_sources():
    rows = [
        _row("On which continent is Peru?", "Peru"),
        _row("What is the capital of Peru?"),  # another source, no subject field: names the subject
        _row("what is the capital of peru?", construction=PROSE),  # the same question, written otherwise
        _row("Who owns Xamarin?", "Xamarin"),
    ]
    groups = row_groups(rows)
    assert groups[0] == groups[1] == groups[2] != groups[3]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_assign_splits_never_leaks(seed):
    rows = [_row(f"What is the capital of Land{i}?", f"Land{i}") for i in range(40)]
    rows += [_row(f"Where is Land{i} located?") for i in range(0, 40, 3)]
    rows += [_row(f"What is the capital of land{i}", construction=PROSE) for i in range(0, 40, 5)]
    assign_splits(rows, seed=seed)
    assert {r.split for r in rows} == {CALIBRATION, REPORT}
    assert split_leaks(rows) == []


def test_fresh_rows_are_report_only_and_written_another_way():
    facts = [Fact(i, f"Thing{i}", "France", "{} is located in the country of", "P17") for i in range(6)]
    facts.append(Fact(6, "Thing6", "Italy", "{} is located in the country of", "P17"))
    rows = fresh_rows(facts, set(range(7)), 0, facts)
    assert {r.relation for r in rows} == {CONFLICT, AGREEING}
    question = FRESH["P17"][0].format(s="Thing0")
    assert rows[0].query.startswith(question) and rows[0].query.endswith("Answer in a full sentence.")
    assert "is located in the country of" not in rows[0].context  # not the ROME cloze
    assign_splits(rows, seed=0)
    kept = report_only_fresh(rows)
    assert kept and all(r.split == REPORT for r in kept)


def test_bundled_validation_rows_never_cross_the_split():
    """The bundled rows compared by normalized question and subject texts (not by a group label)."""
    path = asset_path("validation") / "rows.csv"
    with path.open(encoding="utf-8", newline="") as fh:
        rows = [ValidationRow.from_dict(r) for r in csv.DictReader(fh)]
    assert len(rows) > 1000
    assert split_leaks(rows) == []
    questions = {s: {norm_text(r.query) for r in rows if r.split == s} for s in (CALIBRATION, REPORT)}
    assert not questions[CALIBRATION] & questions[REPORT]
    subjects = {s: {norm_text(r.subject) for r in rows if r.split == s and r.subject} for s in (CALIBRATION, REPORT)}
    assert not subjects[CALIBRATION] & subjects[REPORT]
    # NQ-Swap records of one question are one question: never in both splits
    sources = {
        s: {r.source_id for r in rows if r.split == s and r.construction == PROSE} for s in (CALIBRATION, REPORT)
    }
    assert not sources[CALIBRATION] & sources[REPORT]
    assert all(r.split == REPORT for r in rows if r.construction == FRESH_CONSTRUCTION)
