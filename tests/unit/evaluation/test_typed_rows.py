"""The typed construction: questions the way people type them, for reporting only (core.evaluation.typed_rows)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from core.engine.matching import find_spans, normalize_words
from core.evaluation.conflict_sources import Fact
from core.evaluation.constructions import AGREEING, CALIBRATION, CONFLICT, REPORT, TEMPLATED, ValidationRow, split_leaks
from core.evaluation.typed_rows import (
    AS_TYPED,
    LATE,
    LATE_BEFORE,
    LATE_WORDS,
    NUMBER,
    TWO_PASSAGES,
    TYPED_CONSTRUCTION,
    late_passage,
    typed_rows,
)
from core.io import asset_path

_FILLER = "The region has a long history of trade along its river valleys and coastal towns."  # 15 words


def _nq(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return str(path)


def _record(question, org, sub, before=0):
    prefix = " ".join([_FILLER] * before)
    text = "<P> {} The season contained {} episodes . </P>"
    return {
        "question": question,
        "org_context": text.format(prefix, org),
        "org_answer": [org],
        "sub_context": text.format(prefix, sub),
        "sub_answer": [sub],
    }


def _facts():
    return [
        Fact(0, "Peru", "Lima", "The capital of {} is", "P36", known_id="10"),
        Fact(1, "Chile", "Santiago", "The capital of {} is", "P36", known_id="11"),
        Fact(2, "Kenya", "Nairobi", "The capital of {} is", "P36", known_id="12"),
        Fact(3, "Ghana", "Accra", "The capital of {} is", "P36", known_id="13"),
        Fact(4, "Sweden", "Swedish", "The official language of {} is", "P37", known_id="14"),
        Fact(5, "Norway", "Norwegian", "The official language of {} is", "P37", known_id="15"),
    ]


def _validation(split_of):
    rows = []
    for f in _facts():
        rows.append(
            ValidationRow(
                TEMPLATED, AGREEING, "rome", f"What is the capital of {f.subject}?", "ctx", [f.attribute],
                [f.attribute], subject=f.subject, source_id=f.known_id, split=split_of(f),
            )
        )  # fmt: skip
    return rows


def test_a_late_passage_names_the_answer_only_in_its_last_sentence_after_enough_words():
    text = " ".join([_FILLER] * 12) + " It has 23 episodes. Later seasons had more."
    out = late_passage(text, ["23"])
    assert out is not None and out.endswith("It has 23 episodes.")
    words = len(out.split())
    assert words <= LATE_WORDS and words - 4 >= LATE_BEFORE
    assert late_passage("It has 23 episodes. " + " ".join([_FILLER] * 12), ["23"]) is None  # named early


def test_typed_rows_are_report_rows_of_every_variant_and_never_touch_a_calibration_row(tmp_path):
    validation = _validation(lambda f: CALIBRATION if f.subject == "Ghana" else REPORT)
    nq = _nq(
        tmp_path / "nq.jsonl",
        [
            _record("how many episodes are in season 4", "23", "775"),
            _record("how many episodes in the long season", "12", "31", before=6),
            _record("who sang the song in the long season", "Ilse Marrow", "Elio Vance", before=6),
            _record("who sang the song in season 2", "Ilse Marrow", "Elio Vance"),
            _record("what is the capital of ghana", "Accra", "Lima"),  # names a calibration subject
        ],
    )
    rows = typed_rows(validation, _facts(), nq, questions={AS_TYPED: 5, NUMBER: 5, LATE: 5}, seed=0)
    assert rows and {r.construction for r in rows} == {TYPED_CONSTRUCTION} and {r.split for r in rows} == {REPORT}
    assert split_leaks(validation + rows) == []
    assert not any("ghana" in r.query.lower() or r.subject == "Ghana" for r in rows)
    variants = {r.variant for r in rows}
    assert {NUMBER, LATE} <= variants and variants & {TWO_PASSAGES, "French", "Spanish"}
    for r in rows:
        assert find_spans(r.context, r.answer_context), r  # the context states what the row says it states
        if r.relation == CONFLICT and r.source == "nq_swap":
            assert not find_spans(r.context, r.answer_memory)
        if r.variant == NUMBER:
            assert all(a.isdigit() for a in r.answer_context + r.answer_memory)
        if r.source == "nq_swap":
            assert r.query == r.query.lower() and not r.query.endswith("?")  # as its user typed it


def test_two_passages_state_two_objects_neither_the_true_one(tmp_path):
    validation = _validation(lambda f: REPORT)
    rows = typed_rows(validation, _facts(), _nq(tmp_path / "nq.jsonl", []), questions={}, seed=0)
    two = [r for r in rows if r.variant == TWO_PASSAGES]
    foreign = [r for r in rows if r.variant in ("French", "Spanish")]
    assert two and foreign
    for r in two:
        assert r.relation == CONFLICT and len(r.answer_context) == 2
        assert all(find_spans(r.context, [o]) for o in r.answer_context)
        assert not find_spans(r.context, r.answer_memory)
        assert r.query == r.query.lower()
    for r in foreign:
        assert r.query.endswith("?") and r.subject in r.query
        if r.subject == "Sweden":  # a language's name in the query's language counts as the object
            assert {"suedois", "sueco"} <= {" ".join(normalize_words(o)) for o in r.answer_memory}


def test_the_bundled_typed_rows_are_held_out_from_every_calibration_row():
    with (asset_path("validation") / "rows.csv").open(encoding="utf-8", newline="") as fh:
        validation = [ValidationRow.from_dict(r) for r in csv.DictReader(fh)]
    with (asset_path("validation") / "typed.csv").open(encoding="utf-8", newline="") as fh:
        typed = [ValidationRow.from_dict(r) for r in csv.DictReader(fh)]
    assert typed and {r.split for r in typed} == {REPORT} and {r.construction for r in typed} == {TYPED_CONSTRUCTION}
    assert split_leaks(validation + typed) == []
    assert {r.variant for r in typed} == {AS_TYPED, NUMBER, LATE, TWO_PASSAGES, "French", "Spanish"}


@pytest.mark.parametrize("name", ["typed_figures.json", "typed_figures-gemma3-270m.json"])
def test_the_typed_figures_add_up_and_are_the_ones_the_docs_show(name):
    figures = json.loads((asset_path("validation") / name).read_text(encoding="utf-8"))
    sets = figures["sets"]
    total = sets.pop("all typed rows")["headline"]
    assert total["n"] == sum(f["headline"]["n"] for f in sets.values())
    assert total["match"] == sum(f["headline"]["match"] for f in sets.values())
    shown = f"{100 * total['match_rate']:.1f} %"
    docs = (Path(__file__).resolve().parents[3] / "docs" / "validity.md").read_text(encoding="utf-8")
    assert f"| all typed rows | {total['n']} | **{shown}**" in docs
