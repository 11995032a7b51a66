"""``calibrate-model --rows traffic.csv``: a user's own unlabeled (query, context) rows, each labeled by its swap test
(self-supervised), split by question before anything is scored; a work folder of another rows file is refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from core.evaluation.calibrate import calibrate_model, read_rows
from core.evaluation.constructions import CALIBRATION, REPORT, TRAFFIC, UNLABELED, labeled_by_swap, split_leaks
from tests.unit.evaluation.test_model_calibration import SETTINGS, _fewer_prompts

PLACES = ["Quillmere", "Brellin", "Orvane", "Tessel", "Marrowgate", "Veltria", "Lunden", "Caskar", "Dovre", "Elsk"]


def _traffic(path: Path, n: int = 10, extra: list[tuple[str, str]] = ()) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["query", "context", "note"])
        for i in range(n):
            writer.writerow(
                [f"Where is the tower of {PLACES[i]}?", f"The tower of {PLACES[i]} stands by the river.", ""]
            )
        writer.writerows([(q, c, "") for q, c in extra])
    return path


def test_traffic_rows_are_unlabeled_split_by_question_and_deduplicated(tmp_path) -> None:
    dup = ("Where is the tower of Quillmere?", "The tower of Quillmere stands by the river.")
    rows = read_rows(_traffic(tmp_path / "t.csv", extra=[dup, ("", "no query"), ("no context?", " ")]))
    assert len(rows) == 10  # the repeat and the blank ones left out
    assert all(r.construction == TRAFFIC and r.relation == UNLABELED and labeled_by_swap(r) for r in rows)
    assert {r.split for r in rows} == {CALIBRATION, REPORT} and not split_leaks(rows)
    assert read_rows(tmp_path / "t.csv") == rows  # the same split every time


def test_a_file_that_is_neither_is_refused_with_its_columns(tmp_path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("question,passage\nq,c\n", encoding="utf-8")
    with pytest.raises(ValueError, match="a 'query' and a 'context' column"):
        read_rows(bad)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("query,context\nwo liegt K\xf6ln?,x\n".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        read_rows(latin)
    with pytest.raises(ValueError, match="does not exist"):
        read_rows(tmp_path / "missing.csv")


def test_calibrating_on_traffic_swap_tests_every_row(tiny_handle, tmp_path, monkeypatch, one_thread) -> None:
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    _fewer_prompts(monkeypatch)
    traffic = _traffic(tmp_path / "traffic.csv")
    card = calibrate_model(tiny_handle, budget="10", rows_path=traffic, settings=SETTINGS, out=tmp_path / "run")
    for split in ("calibration", "report"):
        c = card["rows"][split]
        assert c["rows"] and c["agreeing_swapped"] == c["rows"] and c["by_text"] == 0, c  # every label: a swap test
        assert c["by_swap"] + c["swap_undecided"] == c["rows"], c
    assert card["rows"]["calibration"]["rows"] + card["rows"]["report"]["rows"] == 10
    # the same work folder with the bundled rows: refused, never mixed into the fits
    with pytest.raises(ValueError, match="another rows file"):
        calibrate_model(tiny_handle, budget="10", settings=SETTINGS, out=tmp_path / "run")
