"""scripts/case_control.py: every rare-behavior row, a seeded sample of the other, excluded rows left out."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


@pytest.fixture
def cc(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import case_control

    yield case_control
    sys.modules.pop("case_control", None)


def _rows(n_read: int, n_recalled: int) -> list[dict[str, str]]:
    rows = [{"query": f"r{i}", "context": "c", "behavior": "read"} for i in range(n_read)]
    rows += [{"query": f"m{i}", "context": "c", "behavior": "recalled"} for i in range(n_recalled)]
    return [*rows, {"query": "x", "context": "c", "behavior": ""}]  # left out: neither / both


def test_every_rare_row_and_a_seeded_sample_of_the_other(cc):
    rows = _rows(40, 5)
    sample = cc.case_control(rows, per_rare=2, seed=0)
    assert [r["behavior"] for r in sample] == ["recalled"] * 5 + ["read"] * 10
    assert sample == cc.case_control(rows, per_rare=2, seed=0)  # the same seed, the same rows
    assert sample[5:] != cc.case_control(rows, per_rare=2, seed=1)[5:]
    assert len({r["query"] for r in sample}) == 15  # no row twice


def test_excluded_rows_are_left_out_before_sampling(cc):
    rows = _rows(40, 5)
    sample = cc.case_control(rows, per_rare=1, exclude={("m0", "c"), ("m1", "c")})
    assert [r["query"] for r in sample[:3]] == ["m2", "m3", "m4"] and len(sample) == 6
    assert cc.case_control(_rows(0, 0), per_rare=2) == []
