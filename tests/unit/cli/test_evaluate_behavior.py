"""``python -m core evaluate`` on a behavior-labeled set (issue 23): ``--split`` keeps one split's rows, and the
report gains ``behavior`` (AUCs against the labels of the run's own answers), printed to stderr."""

from __future__ import annotations

import json

import pytest

import core.cli.commands.evaluate as evaluate_command
from core.cli import main

HEADER = "query,context,label,behavior,kind,answer_context,answer_memory,split\n"
ROWS = [
    ("Who owns Beats Music?", "Beats Music is owned by Microsoft.", "grounded", "read", "Microsoft", "Apple", "report"),
    ("Who owns Skype?", "Skype is owned by Apple.", "memorized", "recalled", "Apple", "Microsoft", "report"),
    ("Who owns Instagram?", "Instagram is owned by Apple.", "grounded", "read", "Apple", "Meta", "report"),
    ("Who owns Fitbit?", "Fitbit is owned by Meta.", "memorized", "recalled", "Meta", "Google", "calibration"),
]


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "behavior.csv"
    lines = [f'"{q}","{c}",{lab},{b},counterfactual,{ctx},{mem},{s}\n' for q, c, lab, b, ctx, mem, s in ROWS]
    path.write_text(HEADER + "".join(lines), encoding="utf-8")
    return path


@pytest.fixture
def scored(monkeypatch, cli_model):
    """Scoring replaced by a stub: each row 'answers' with its label's object and scores 1 if recalled."""
    seen = {}

    def fake(handle, rows, settings, options=None, **kwargs):
        seen["rows"] = [r.row for r in rows]
        out = []
        for r in rows:
            recalled = r.extra.get("behavior", r.label) in ("recalled", "memorized")
            answer = r.extra.get("answer_memory" if recalled else "answer_context", "something")
            out.append(
                {
                    "row": r.row,
                    "label": r.label,
                    "rag_answer": f"It is {answer}.",
                    "verdict": "recalled" if recalled else "inconclusive",
                    "scores": {"repcs": 5.0 if recalled else 50.0},  # Z: small when the context was not needed
                    **{f"extra.{k}": v for k, v in r.extra.items()},
                }
            )
        return {"n": len(out), "detectors": {}, "rows": out}

    monkeypatch.setattr(evaluate_command, "evaluate_rows", fake)
    return seen


def test_split_keeps_its_rows_and_the_report_has_behavior_aucs(tmp_path, data, scored, capsys):
    out = tmp_path / "r.json"
    assert main(["evaluate", str(data), "--out", str(out), "--split", "report", "--bootstrap", "20"]) == 0
    assert scored["rows"] == [1, 2, 3]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["split"] == "report"
    conflict = report["behavior"]["subsets"]["conflict"]
    assert (conflict["n_read"], conflict["n_recalled"]) == (2, 1)
    assert conflict["detectors"]["repcs"]["auc"] == pytest.approx(1.0)
    assert conflict["verdict"]["match"] == 1 and conflict["verdict"]["inconclusive"] == 2
    err = capsys.readouterr().err
    assert "against behavior (positive class recalled" in err and "headline verdict matches 33%" in err


def test_an_unknown_split_or_a_set_without_splits_is_one_error_line(tmp_path, data, scored, capsys):
    assert main(["evaluate", str(data), "--out", str(tmp_path / "r.json"), "--split", "test"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --split test: no row of") and "calibration, report" in err
    plain = tmp_path / "plain.csv"
    plain.write_text("query,context,label\nQ?,C.,memorized\nR?,D.,grounded\n", encoding="utf-8")
    assert main(["evaluate", str(plain), "--out", str(tmp_path / "r.json"), "--split", "report"]) == 2
    assert "has no 'split' column" in capsys.readouterr().err
    assert "rows" not in scored  # nothing was scored


def test_a_set_without_behavior_columns_has_no_behavior_section(tmp_path, scored):
    plain = tmp_path / "plain.csv"
    plain.write_text("query,context,label\nQ?,C.,memorized\nR?,D.,grounded\n", encoding="utf-8")
    out = tmp_path / "r.json"
    assert main(["evaluate", str(plain), "--out", str(out)]) == 0
    assert "behavior" not in json.loads(out.read_text(encoding="utf-8"))
