"""Strict validation of labeled CSV files and the evaluate command's output contract."""

from __future__ import annotations

import json

import pytest

from core.cli import main
from core.engine import DualPathSettings
from core.evaluation import DataError, evaluate_rows, parse_labeled_csv, read_labeled_csv


def test_valid_file_keeps_extra_columns():
    rows = parse_labeled_csv("query,context,label,source\nq1,c1,memorized,wiki\nq2,c2, Grounded ,made-up\n")
    assert [r.label for r in rows] == ["memorized", "grounded"]
    assert rows[0].extra == {"source": "wiki"} and rows[1].row == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("query,label\nq,memorized\n", "Missing column.*context"),
        ("query,context,label\n", "no data rows"),
        ("query,context,label\nq,c,memorized\nq2,,grounded\n", r"Row 2, column 'context': empty"),
        ("query,context,label\nq,c,maybe\n", r"Row 1, column 'label': 'maybe'"),
        ("query,context,label\n  ,c,grounded\n", r"Row 1, column 'query'"),
        ("query,context,label\nq,c,grounded,extra\n", r"Row 1: more fields"),
    ],
)
def test_malformed_files_name_row_and_column(text, message):
    with pytest.raises(DataError, match=message):
        parse_labeled_csv(text)


def test_row_limit_and_encoding(tmp_path):
    with pytest.raises(DataError, match="Too many rows"):
        parse_labeled_csv("query,context,label\n" + "q,c,grounded\n" * 4, max_rows=3)
    bad = tmp_path / "latin1.csv"
    bad.write_bytes("query,context,label\nq,caf\xe9,grounded\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_labeled_csv(bad)


def test_evaluate_metrics_and_rows(tiny_handle):
    text = "query,context,label,note\n" + "\n".join(
        f"Question {i}?,Fact number {i} is {i * 7}.,{'memorized' if i % 2 else 'grounded'},n{i}" for i in range(6)
    )
    report = evaluate_rows(tiny_handle, parse_labeled_csv(text), DualPathSettings(max_new_tokens=4, score_window=4))
    assert report["n"] == 6 and len(report["rows"]) == 6
    rep = report["detectors"]["repcs"]
    assert 0.0 <= rep["auc"] <= 1.0 and 0.0 <= rep["fpr_at_95tpr"] <= 1.0 and 0.0 <= rep["precision_at_10"] <= 1.0
    assert report["rows"][0]["extra.note"] == "n0"


def test_cli_evaluate_writes_nothing_on_bad_file(tmp_path, capsys):
    data = tmp_path / "bad.csv"
    data.write_text("query,context,label\nq,c,memorized\nq,c,unsure\n")
    out = tmp_path / "out.json"
    assert main(["evaluate", str(data), "--out", str(out)]) == 2
    assert not out.exists()
    assert "Row 2, column 'label'" in capsys.readouterr().err


def test_cli_evaluate_over_budget_row_names_row(tmp_path, capsys, cli_model):
    data = tmp_path / "long.csv"
    data.write_text("query,context,label\nq,short,memorized\nq," + "word " * 600 + ",grounded\n")
    out = tmp_path / "out.json"
    assert main(["evaluate", str(data), "--out", str(out)]) == 2
    assert not out.exists()
    assert "Row 2" in capsys.readouterr().err


def test_cli_evaluate_contract(tmp_path, cli_model):
    data = tmp_path / "d.csv"
    data.write_text("query,context,label\nA?,a is 1.,memorized\nB?,b is 2.,grounded\nC?,c is 3.,grounded\n")
    out = tmp_path / "r.json"
    assert main(["evaluate", str(data), "--out", str(out), "--max-new-tokens", "4"]) == 0
    report = json.loads(out.read_text())
    assert report["n"] == 3
    assert set(report["detectors"]["repcs"]) >= {"auc", "fpr_at_95tpr", "precision_at_10"}
    assert [r["row"] for r in report["rows"]] == [1, 2, 3]


def test_all_registered_free_detectors_are_scored(tiny_handle):
    from core.detectors.registry import available

    free = [n for n, d in available().items() if d.cost == "free"]
    assert {"repcs", "repcs_mean", "max_token_kl"} <= set(free)
    text = "query,context,label\n" + "\n".join(
        f"Q{i}?,C{i} is {i}.,{'memorized' if i % 2 else 'grounded'}" for i in range(4)
    )
    report = evaluate_rows(
        tiny_handle, parse_labeled_csv(text), DualPathSettings(max_new_tokens=4, score_window=4), detectors=free
    )
    assert set(report["detectors"]) == set(free)
    row = report["rows"][0]
    assert row["scores"]["repcs"] == row["repcs_score"]
    # the RePCS metrics are computed on −Z
    import numpy as np

    from core.maths.metrics import auc

    labels = np.array([1 if r["label"] == "memorized" else 0 for r in report["rows"]])
    z = np.array([r["repcs_score"] for r in report["rows"]])
    assert report["detectors"]["repcs"]["auc"] == auc(labels, -z)


def test_unknown_detector_is_refused(tiny_handle):
    with pytest.raises(ValueError, match="Unknown detector"):
        evaluate_rows(
            tiny_handle,
            parse_labeled_csv("query,context,label\nq,c,grounded\n"),
            DualPathSettings(),
            detectors=["nope"],
        )


# -- issue 25 item 5: CSVs that crashed the Evaluate page, the CLI and `audit calibrate` ---------------------------

ODD_LINE_ENDINGS = [
    pytest.param("query,context,label\rq1,c1,memorized\rq2,c2,grounded\r", id="bare-cr"),
    pytest.param("query,context,label\r\nq1,c1,memorized\rq2,c2,grounded\n", id="mixed"),
    pytest.param('query,context,label\r"q1","c1",memorized\r"q2","c\r2",grounded', id="bare-cr-quoted"),
]


@pytest.mark.parametrize("text", ODD_LINE_ENDINGS)
def test_bare_cr_and_mixed_line_endings_parse(text):
    rows = parse_labeled_csv(text)
    assert [(r.query, r.label) for r in rows] == [("q1", "memorized"), ("q2", "grounded")]


def test_a_field_over_the_default_csv_limit_parses(tmp_path):
    """Python's csv refuses fields over 131,072 characters unless the limit is raised: the upload cap sets it."""
    long_context = "word " * 40_000  # 200,000 characters
    text = f'query,context,label\nq1,"{long_context}",grounded\nq2,c2,memorized\n'
    rows = parse_labeled_csv(text)
    assert len(rows[0].context) == len(long_context)
    path = tmp_path / "long.csv"
    path.write_text(text)
    assert len(read_labeled_csv(path)) == 2


def test_a_lower_process_wide_field_limit_is_raised_to_the_file_size():
    import csv

    real = csv.field_size_limit()
    try:
        csv.field_size_limit(1000)  # another library lowered it
        rows = parse_labeled_csv('query,context,label\nq,"' + "x" * 5000 + '",grounded\n')
        assert len(rows[0].context) == 5000
    finally:
        csv.field_size_limit(real)


def test_every_csv_parse_error_becomes_a_data_error_naming_the_line(monkeypatch, tmp_path, capsys):
    """Whatever ``_csv.Error`` the reader still raises comes back as a :class:`DataError` naming the line: the page
    shows it, and the CLI prints it as one ``error:`` line instead of "unexpected Error"."""
    import csv

    class Failing(csv.DictReader):
        def __next__(self):
            if self.line_num >= 2:
                raise csv.Error("a parse error")
            return super().__next__()

    monkeypatch.setattr("core.evaluation.data.csv.DictReader", Failing)
    text = "query,context,label\nq1,c1,memorized\nq2,c2,grounded\n"
    with pytest.raises(DataError, match=r"Line \d+: the file is not valid CSV \(a parse error\)"):
        parse_labeled_csv(text)
    path = tmp_path / "d.csv"
    path.write_text(text)
    assert main(["evaluate", str(path), "--out", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert "the file is not valid CSV (a parse error)" in err and "unexpected" not in err


@pytest.mark.parametrize("text", [p.values[0] for p in ODD_LINE_ENDINGS])
def test_the_cli_and_audit_calibrate_read_odd_line_endings(tmp_path, text, capsys):
    from core.audit.calibration import read_clean_csv

    path = tmp_path / "odd.csv"
    path.write_bytes(text.encode())
    rows, note, _ = read_clean_csv(path)
    assert rows == [("q2", rows[0][1])] and "grounded" in note
    big = tmp_path / "big.csv"
    big.write_text('query,context\nq1,"' + "w " * 70_000 + '"\n')
    assert len(read_clean_csv(big)[0][0][1]) == 140_000
