"""``python -m core conflict``: every bad input is one ``error:`` line (exit 2) before the model loads, and a run
with the tiny random model writes the set, its counts and its README."""

from __future__ import annotations

import csv
import json

import pytest

import core.cli.common
from core.cli import main

FACTS = [
    {"subject": "Beats Music", "attribute": "Apple", "template": "{} is owned by", "relation_id": "P127"},
    {"subject": "Skype", "attribute": "Microsoft", "template": "{} is owned by", "relation_id": "P127"},
]


def _run(argv: list[str]) -> int:
    return main(["conflict", *argv])


@pytest.fixture
def no_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model must not load for bad input")

    monkeypatch.setattr(core.cli.common, "load_model", refuse)


@pytest.fixture
def facts_file(tmp_path):
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(FACTS), encoding="utf-8")
    return path


def _error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        ("{not json", [], "not valid UTF-8 JSON"),
        ('{"subject": "x"}', [], "expected a JSON list of facts"),
        ('[{"subject": "S", "template": "{} is", "relation_id": "P1"}]', [], "fact 0: field 'attribute'"),
        (None, ["--limit", "0"], "--limit must be at least 1"),
        (None, ["--max-new-tokens", "0"], "max_new_tokens must be between 1 and"),
        (None, ["--calibration-fraction", "1.5"], "calibration_fraction must be strictly between 0 and 1"),
        (None, ["--name", "../x"], "--name must be"),
        (None, ["--nq-limit", "5"], "--nq-limit needs --nq"),
    ],
)
def test_bad_input_is_one_error_line_before_the_model_loads(
    tmp_path, facts_file, content, extra, message, no_model, capsys
):
    if content is not None:
        facts_file.write_text(content, encoding="utf-8")
    assert _run([str(facts_file), "--out", str(tmp_path / "set"), *extra]) == 2
    assert message in _error(capsys)


def test_missing_files_and_a_bad_out_folder_are_named(tmp_path, facts_file, no_model, capsys):
    assert _run([str(tmp_path / "none.json"), "--out", str(tmp_path / "set")]) == 2
    assert "none.json" in _error(capsys)
    assert _run([str(facts_file), "--out", str(facts_file)]) == 2
    assert "is not a folder" in _error(capsys)
    assert _run([str(facts_file), "--out", str(tmp_path / "no" / "such" / "set")]) == 2
    assert "does not exist" in _error(capsys)
    nq = tmp_path / "nq.jsonl"
    nq.write_text('{"question": "q"}\n', encoding="utf-8")
    assert _run([str(facts_file), "--out", str(tmp_path / "set"), "--nq", str(nq)]) == 2
    assert "line 1: expected question, sub_context" in _error(capsys)


def test_a_run_with_the_tiny_model_writes_the_set_and_prints_the_counts(
    tmp_path, facts_file, tiny_handle, monkeypatch, capsys, one_thread
):
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    out = tmp_path / "set"
    cache = tmp_path / "cache.json"
    argv = [str(facts_file), "--out", str(out), "--max-new-tokens", "3", "--cache", str(cache), "--seed", "2"]
    assert _run(argv) == 0
    captured = capsys.readouterr()
    assert "no-context answers: 2/2" in captured.err  # progress on stderr
    assert "facts: 2, known without context:" in captured.out and "rows answered with their context:" in captured.out
    with (out / "behavior.csv").open(encoding="utf-8") as fh:
        assert next(csv.reader(fh))[:3] == ["query", "context", "label"]
    counts = json.loads((out / "counts.json").read_text(encoding="utf-8"))
    assert counts["meta"]["seed"] == 2 and counts["counts"]["facts"] == 2
    assert "## Counts" in (out / "README.md").read_text(encoding="utf-8")
    answered = counts["counts"]["rows_answered"]
    assert len(json.loads(cache.read_text(encoding="utf-8"))["answers"]) == 2 + answered  # every answer cached


def test_the_attribution_file_is_read_safely_before_the_model_loads(tmp_path, facts_file, no_model, capsys):
    """Issue 37 G: ``--attribution /dev/zero`` read until memory ran out, and a named pipe hung the command."""
    from tests.helpers import dev_zero, error_in_time, named_pipe

    out, box = str(tmp_path / "set"), {}

    def attribution(path: str) -> None:
        box["code"] = _run([str(facts_file), "--out", out, "--attribution", path])

    assert error_in_time(lambda: attribution(dev_zero())) is None
    assert box["code"] == 2 and "is a device, not a regular file" in _error(capsys)
    fifo = named_pipe(tmp_path, "attribution.txt")
    assert error_in_time(lambda: attribution(str(fifo))) is None
    assert box["code"] == 2 and "is a named pipe" in _error(capsys)
    (tmp_path / "folder").mkdir()
    assert _run([str(facts_file), "--out", out, "--attribution", str(tmp_path / "folder")]) == 2
    assert "is a folder" in _error(capsys)
