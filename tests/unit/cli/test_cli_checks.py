"""Issue 17 (hardening), the command line: everything is checked before the model is loaded (2), sizes and
silent defaults (11), text that is not UTF-8 (7), and whatever is left ends in one ``error:`` line, exit 2."""

from __future__ import annotations

import json

import pytest

import core.cli.common
from core.cli import main
from core.maths.metrics import MAX_BOOTSTRAP, MIN_BOOTSTRAP, auc_bootstrap_ci

ROWS = "query,context,label\n" + "".join(
    f"Q{i}?,Fact {i} is {i * 7}.,{'memorized' if i % 2 else 'grounded'}\n" for i in range(6)
)


@pytest.fixture
def no_model(monkeypatch):
    """The model must not be loaded: record any attempt (and fail it)."""
    calls: list[tuple] = []

    def refuse(*args, **kwargs):
        calls.append((args, kwargs))
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(core.cli.common, "load_model", refuse)
    return calls


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text(ROWS)
    return path


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err  # one line, never a traceback
    assert lines[0].startswith("error: ")
    return lines[0]


def _written(path, text: str = "{}"):
    """``path``, after writing ``text`` to it."""
    path.write_text(text)
    return path


ONE_LABEL = "query,context,label\nq1,c1,grounded\nq2,c2,grounded\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            lambda tmp, data: [str(data), "--out", str(_written(tmp / "result.json") / "out.json")],
            "is a file, not a folder",
            id="out-under-a-regular-file",
        ),
        pytest.param(lambda tmp, data: [str(data), "--out", str(tmp)], "is a folder", id="out-is-a-folder"),
        pytest.param(
            lambda tmp, data: [str(_written(tmp / "one.csv", ONE_LABEL)), "--out", str(tmp / "r.json")],
            "both labels",
            id="a-file-with-one-label",
        ),
    ],
)
def test_evaluate_refuses_a_bad_output_or_input_file_before_the_model_loads(
    tmp_path, data, no_model, capsys, argv, message
):
    assert main(["evaluate", *argv(tmp_path, data)]) == 2
    assert message in _error_line(capsys)
    assert no_model == []


def test_out_in_an_unwritable_folder_is_refused_before_the_model_loads(tmp_path, data, no_model, capsys, monkeypatch):
    folder = tmp_path / "locked"
    folder.mkdir()
    monkeypatch.setattr(core.io.os, "access", lambda path, mode: str(path) != str(folder))
    assert main(["evaluate", str(data), "--out", str(folder / "out.json")]) == 2
    assert "not writable" in _error_line(capsys)
    assert no_model == []


@pytest.mark.parametrize("value", ["5", "0", "-1", str(MAX_BOOTSTRAP + 1), "many"])
def test_bootstrap_out_of_the_metrics_bounds_is_refused_at_parse_time(data, tmp_path, no_model, value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", str(data), "--out", str(tmp_path / "r.json"), "--bootstrap", value])
    assert exit_info.value.code == 2
    assert "--bootstrap" in capsys.readouterr().err
    assert no_model == []


def test_the_cli_and_the_metrics_share_one_bound():
    y = [0, 1] * 10
    s = list(range(20))
    auc_bootstrap_ci(y, s, n_boot=MIN_BOOTSTRAP)  # the smallest accepted value works
    with pytest.raises(ValueError):
        auc_bootstrap_ci(y, s, n_boot=MIN_BOOTSTRAP - 1)
    with pytest.raises(ValueError):
        auc_bootstrap_ci(y, s, n_boot=MAX_BOOTSTRAP + 1)
    parser_default = core.cli.common.parse_bootstrap(str(MIN_BOOTSTRAP))
    assert parser_default == MIN_BOOTSTRAP


REFUSALS = [
    ("evaluate", ["--detectors", "repcs,nope"], "Unknown detector"),
    ("evaluate", ["--sigmas", "0,-1"], "--sigmas must be finite numbers >= 0"),
    ("evaluate", ["--sigmas", "0,nan"], "--sigmas must be finite numbers >= 0"),
    ("evaluate", ["--sample", "0"], "--sample must be at least 1"),
    ("evaluate", ["--batch-size", "0"], "--batch-size must be at least 1"),
    ("evaluate", ["--window", "0"], "score_window must be between 1 and 4096, got 0"),
    ("evaluate", ["--max-new-tokens", "0"], "max_new_tokens"),
    ("evaluate", ["--model", ""], "--model is empty"),
    ("evaluate", ["--model", "  "], "--model is empty"),
    ("evaluate", ["--threshold-file", "/dev/zero"], "not a regular file"),
    ("calibrate", ["--alpha", "1.5"], "--alpha"),
    ("calibrate", ["--epsilon", "0"], "--epsilon"),
    ("calibrate", ["--calibration-fraction", "0"], "--calibration-fraction"),
    ("calibrate", ["--calibration-rows", "1,x"], "--calibration-rows"),
    ("calibrate", ["--window", "0"], "score_window must be between 1 and 4096"),
]
"""(command, extra flags, part of the error line): each refused before the model loads."""


@pytest.mark.parametrize(("command", "extra", "message"), REFUSALS)
def test_evaluate_and_calibrate_check_every_value_before_the_model_loads(
    data, tmp_path, no_model, command, extra, message, capsys
):
    out = tmp_path / "r.json"
    assert main([command, str(data), *(["--out", str(out)] if command == "evaluate" else []), *extra]) == 2
    assert message in _error_line(capsys)
    assert no_model == []
    assert not out.exists()


def test_calibrate_checks_its_output_files_first(tmp_path, data, no_model, capsys):
    blocker = tmp_path / "x.json"
    blocker.write_text("{}")
    assert main(["calibrate", str(data), "--write-threshold", str(blocker / "tau.json")]) == 2
    assert "--write-threshold file" in _error_line(capsys)
    assert main(["calibrate", str(data), "--out", str(tmp_path)]) == 2
    assert "--out file" in _error_line(capsys)
    assert no_model == []


def test_calibrate_reads_a_report_as_a_regular_file(tmp_path, no_model, capsys):
    assert main(["calibrate", str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in _error_line(capsys)
    folder = tmp_path / "folder.json"
    folder.mkdir()
    assert main(["calibrate", str(folder)]) == 2
    assert "is a folder" in _error_line(capsys)


def test_probe_and_ablate_check_their_values_before_the_model_loads(no_model, capsys):
    base = ["--query", "Q?", "--context", "C."]
    assert main(["probe", *base, "--lens-top-k", "0"]) == 2
    assert "--lens-top-k" in _error_line(capsys)
    assert main(["probe", *base, "--tau", "nan"]) == 2
    assert "--tau" in _error_line(capsys)
    assert main(["ablate", *base, "--layers", "0", "--grid", "0,1e9"]) == 2
    assert "--grid" in _error_line(capsys)
    assert no_model == []


@pytest.mark.parametrize("command", ["run", "detect", "probe", "ablate"])
def test_window_zero_and_empty_model_are_refused_by_every_command(command, no_model, capsys):
    base = [command, "--query", "Q?", "--context", "C."] + (["--layers", "0"] if command == "ablate" else [])
    assert main([*base, "--window", "0"]) == 2
    assert "score_window must be between 1 and 4096, got 0" in _error_line(capsys)
    assert main([*base, "--model", ""]) == 2
    assert "--model is empty" in _error_line(capsys)
    assert no_model == []


# ----------------------------------------------------------------------------------------------------------
# 7. not UTF-8 (Python hands undecodable argv bytes over as lone surrogates)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--query", "caf\udce9?", "--context", "C."],
        ["run", "--query", "Q?", "--context", "bad \udcff byte"],
        ["detect", "--query", "Q?", "--context", "C.", "--detectors", "repcs\udcff"],
    ],
)
def test_invalid_utf8_in_an_argument_is_one_clear_line(argv, no_model, capsys):
    assert main(argv) == 2
    line = _error_line(capsys)
    assert "not valid UTF-8" in line and ("--query" in line or "--context" in line or "--detectors" in line)
    assert no_model == []


def test_invalid_utf8_is_refused_even_with_a_loaded_model(cli_model, capsys):
    """The check runs before the command; the engine refuses such text too (pages, the API)."""
    assert main(["run", "--query", "Q\udcff", "--context", "C."]) == 2
    assert "not valid UTF-8" in _error_line(capsys)


# ----------------------------------------------------------------------------------------------------------
# notes, and what is left


def test_notes_for_nul_duplicates_and_a_sample_larger_than_the_file(tmp_path, cli_model, capsys):
    path = tmp_path / "rows.csv"
    path.write_text(ROWS + "Q1?,Fact 1 is 7.,memorized\nQ9?,Fact\x00 9.,grounded\n")
    out = tmp_path / "r.json"
    argv = ["evaluate", str(path), "--out", str(out), "--sample", "50", "--sigmas", "", "--bootstrap", "10"]
    assert main([*argv, "--max-new-tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert "note: Removed NUL characters (byte 0) from row(s) 8." in err
    assert "note: 1 duplicate row(s)" in err
    assert "note: --sample 50 is more than the file's 8 rows; scoring all." in err
    assert json.loads(out.read_text())["n"] == 8


def test_a_write_that_fails_at_the_end_keeps_the_report(tmp_path, cli_model, capsys, monkeypatch):
    import core.cli.commands.evaluate as evaluate_command

    real = evaluate_command.atomic_write_json
    target = tmp_path / "r.json"

    def flaky(path, data, **kwargs):
        if str(path) == str(target):
            raise PermissionError(13, "Permission denied")
        return real(path, data, **kwargs)

    monkeypatch.setattr(evaluate_command, "atomic_write_json", flaky)
    monkeypatch.setattr(evaluate_command.tempfile, "gettempdir", lambda: str(tmp_path))
    argv = ["evaluate", str(tmp_path / "rows.csv"), "--out", str(target), "--sigmas", "", "--bootstrap", "10"]
    (tmp_path / "rows.csv").write_text(ROWS)
    assert main([*argv, "--max-new-tokens", "2"]) == 0
    err = capsys.readouterr().err
    saved = list(tmp_path.glob("read_or_recall_evaluate_*.json"))
    assert len(saved) == 1 and str(saved[0]) in err and "could not write" in err
    assert json.loads(saved[0].read_text())["n"] == 6


def test_an_unexpected_failure_is_one_line_not_a_traceback(monkeypatch, cli_model, capsys):
    import core.cli.commands.run as run_command

    def boom(*args, **kwargs):
        raise RuntimeError("something\ndeep broke")

    monkeypatch.setattr(run_command, "run_from_args", boom)
    assert main(["run", "--query", "Q?", "--context", "C."]) == 2
    line = _error_line(capsys)
    assert "unexpected RuntimeError: something deep broke" in line and "-v" in line


def test_an_os_error_is_one_line(monkeypatch, cli_model, capsys):
    import core.cli.commands.run as run_command

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_command, "run_from_args", disk_full)
    assert main(["run", "--query", "Q?", "--context", "C."]) == 2
    assert "No space left on device" in _error_line(capsys)


def test_run_refuses_unknown_detectors_before_the_model_loads(no_model, capsys):
    assert main(["run", "--query", "Q?", "--context", "C.", "--detectors", "nope"]) == 2
    assert "Unknown detector" in _error_line(capsys)
    assert no_model == []
