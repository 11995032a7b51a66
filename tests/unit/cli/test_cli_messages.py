"""Issue 25 item 12: the command line's messages for an empty token file, a model given as a file, and
``--calibration-rows`` naming rows that are not grounded rows of the data — one plain ``error:`` line, exit 2."""

from __future__ import annotations

import pytest

from core.cli import main

ROWS = "query,context,label\n" + "".join(
    f"Q{i}?,Fact {i} is {i * 7}.,{'memorized' if i % 2 else 'grounded'}\n" for i in range(1, 7)
)


def _error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_an_empty_token_file_says_it_is_empty(tmp_path, content, capsys):
    token = tmp_path / "token.txt"
    token.write_text(content)
    assert main(["serve", "--token-file", str(token), "--db", str(tmp_path / "a.sqlite3")]) == 2
    line = _error(capsys)
    assert "is empty" in line and "first line" in line and "list index" not in line


def test_a_model_given_as_a_file_says_it_is_a_file(tmp_path, capsys):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"not a model")
    q = ["--query", "Where?", "--context", "Here."]
    assert main(["run", "--model", str(weights), *q]) == 2
    line = _error(capsys)
    assert "is a file, not a model folder" in line and "no such folder" not in line


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("999", "row(s) 999 are not in data.csv (it has rows 1–6)"),
        ("2,3,5", "row(s) 3, 5 of data.csv are labeled memorized"),
    ],
)
def test_calibration_rows_that_are_not_grounded_rows_are_named(tmp_path, rows, message, monkeypatch, capsys):
    import core.cli.common

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before --calibration-rows was checked")

    monkeypatch.setattr(core.cli.common, "load_model", refuse)
    data = tmp_path / "data.csv"
    data.write_text(ROWS)
    assert main(["calibrate", str(data), "--calibration-rows", rows]) == 2
    line = _error(capsys)
    assert message in line and "at least one grounded row" not in line
