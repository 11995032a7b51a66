"""scripts/score_redeep_sets.py: a row's records fold into one (each part computed once), and the report's
columns label the behavior set by what the stored answer named."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest


@pytest.fixture
def srs(monkeypatch):
    """The script as a module (``scripts/`` first on the path, as when it runs)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[3] / "scripts"))
    return importlib.import_module("score_redeep_sets")


def test_later_records_add_parts_and_a_recorded_error_counts_as_done(srs, tmp_path) -> None:
    path = tmp_path / "s.jsonl"
    srs.append(path, [{"row": 1, "label": 1, "base": {"z": 1.0}}, {"row": 2, "label": 0, "lookback_error": "x"}])
    srs.append(path, [{"row": 1, "lookback": [0.5, 0.25]}])
    rows = srs.load_rows(path)
    assert rows[1] == {"row": 1, "label": 1, "base": {"z": 1.0}, "lookback": [0.5, 0.25]}
    assert srs.has_part(rows[1], "base") and srs.has_part(rows[1], "lookback")
    assert not srs.has_part(rows[1], "redeep")
    assert srs.has_part(rows[2], "lookback")  # its reason is stored: not tried again
    assert [json.loads(line)["row"] for line in path.read_text().splitlines()] == [1, 2, 1]


def test_behavior_columns_use_the_answer_and_the_conflict_kinds(srs) -> None:
    def row(i: int, answer: str, ctx: str, mem: str, kind: str = "counterfactual") -> dict[str, object]:
        return {"row": i, "answer": answer, "answer_context": ctx, "answer_memory": mem, "kind": kind}

    rows = {
        1: row(1, "It is in Paris.", "Paris", "Rome"),
        2: row(2, "Rome, of course.", "Paris", "Rome"),
        3: row(3, "Rome.", "", "Rome", "on_topic"),
        4: row(4, "I do not know.", "Oslo", "Bergen"),
    }
    cols = srs.labeled("behavior-report", rows)
    recs, y = cols["behavior-report: conflict"]
    assert [r["row"] for r in recs] == [1, 2] and y == [0, 1]  # row 4 named neither: left out
    recs, y = cols["behavior-report: all"]
    assert [r["row"] for r in recs] == [1, 2, 3] and y == [0, 1, 1]
    other = srs.labeled("shift_paraphrase", {5: {"row": 5, "label": 1}})
    assert other == {"shift_paraphrase": ([{"row": 5, "label": 1}], [1])}
    assert srs.label_of({"behavior": "recalled"}) == 1 and srs.label_of({"label": "grounded"}) == 0
    assert srs.label_of({"label": "?"}) is None
