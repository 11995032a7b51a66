"""scripts/_common.py: ``filled_rows`` yields the complete rows and reports each other one, in file order."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


@pytest.fixture
def common(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # the scripts import ``_common`` from their own folder
    import _common

    yield _common
    sys.modules.pop("_common", None)


def test_filled_rows_skips_and_reports_rows_with_empty_cells(common):
    rows = [
        {"query": "q1", "context": "c1"},
        {"query": " ", "context": ""},
        {"query": "q3"},
        {"query": "q4", "context": "c"},
    ]
    problems: list[str] = ["earlier problem"]
    seen = []
    for where, row in common.filled_rows("clean", rows, ["query", "context"], problems):
        seen.append((where, row["query"]))
        problems.append(f"{where}: checked")
    assert seen == [("clean row 1", "q1"), ("clean row 4", "q4")]
    assert problems == [
        "earlier problem",
        "clean row 1: checked",
        "clean row 2: empty query, context",
        "clean row 3: empty context",
        "clean row 4: checked",
    ]
