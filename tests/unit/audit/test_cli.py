"""``python -m core audit calibrate`` and ``python -m core serve`` on the tiny model (uvicorn replaced)."""

from __future__ import annotations

import stat

import pytest
from fastapi.testclient import TestClient

from core.audit.calibration import AuditCalibration
from core.cli import main
from tests.unit.audit.conftest import AUTH, CLEAN_ROWS, PAIR, TOKEN


def _csv(path, rows, label=None):
    lines = ["query,context" + (",label" if label else "")]
    lines += [f'"{q}","{c}"' + (f",{label}" if label else "") for q, c in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_calibrate_writes_a_file_for_this_model(cli_model, tmp_path, capsys):
    data = _csv(tmp_path / "clean.csv", CLEAN_ROWS)
    out = tmp_path / "calib.npz"
    assert main(["audit", "calibrate", str(data), "--out", str(out), "--holdout", "0.25"]) == 0
    text = capsys.readouterr().out
    assert "held-out clean rows" in text and str(out) in text
    calib = AuditCalibration.load(out)
    assert calib.model == cli_model.info.name and calib.meta["n_rows"] == 9 and calib.meta["data"] == "clean.csv"


def test_calibrate_refuses_too_few_or_bad_rows(cli_model, tmp_path, capsys):
    assert main(["audit", "calibrate", str(_csv(tmp_path / "few.csv", CLEAN_ROWS[:4])), "--holdout", "0"]) == 2
    assert "at least 8" in capsys.readouterr().err
    assert main(["audit", "calibrate", str(_csv(tmp_path / "mem.csv", CLEAN_ROWS, label="memorized"))]) == 2
    assert "No clean rows" in capsys.readouterr().err


def test_serve_needs_a_token(cli_model, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("READ_OR_RECALL_TOKEN", raising=False)
    assert main(["serve", "--db", str(tmp_path / "a.sqlite3")]) == 2
    assert "READ_OR_RECALL_TOKEN" in capsys.readouterr().err
    (tmp_path / "short").write_text("abc\n")
    assert main(["serve", "--token-file", str(tmp_path / "short")]) == 2


def test_serve_wires_model_calibration_store_and_token(cli_model, tiny_calibration, tmp_path, monkeypatch, capsys):
    from core.cli.commands import serve

    served = {}

    def fake_run(app, **kwargs):  # what the running server would answer, before serve closes the store
        client = TestClient(app)
        served.update(kwargs, audit=client.post("/audit", json=PAIR, headers=AUTH).json())
        served["stats"] = client.get("/stats", headers=AUTH).json()

    monkeypatch.setattr(serve, "run_server", fake_run)
    monkeypatch.setenv("READ_OR_RECALL_TOKEN", TOKEN)
    calib = tiny_calibration.save(tmp_path / "c.npz")
    db = tmp_path / "a.sqlite3"
    args = ["serve", "--db", str(db), "--calibration", str(calib), "--port", "8765", "--no-store-text"]
    assert main(args) == 0
    assert served["host"] == "127.0.0.1" and served["port"] == 8765
    assert "c.npz" in capsys.readouterr().err
    assert served["audit"]["calibration_id"] == tiny_calibration.calibration_id
    assert served["stats"]["store_text"] is False and served["stats"]["log"]["records"] == 1
    assert main(["audit", "verify", "--db", str(db)]) == 0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_serve_rejects_a_bad_header_timeout_naming_the_flag(monkeypatch, value, tmp_path, capsys):
    monkeypatch.setenv("READ_OR_RECALL_TOKEN", TOKEN)
    assert main(["serve", "--header-timeout", value, "--db", str(tmp_path / "a.sqlite3")]) == 2
    assert "--header-timeout must be a positive number of seconds" in capsys.readouterr().err


def test_serve_passes_the_header_timeout_to_the_server(cli_model, tiny_calibration, tmp_path, monkeypatch):
    from core.cli.commands import serve

    served = {}
    monkeypatch.setattr(serve, "run_server", lambda app, **kwargs: served.update(kwargs))
    monkeypatch.setenv("READ_OR_RECALL_TOKEN", TOKEN)
    calib = tiny_calibration.save(tmp_path / "c.npz")
    args = ["serve", "--db", str(tmp_path / "a.sqlite3"), "--calibration", str(calib), "--header-timeout", "2.5"]
    assert main(args) == 0
    assert served["header_timeout_s"] == 2.5 and callable(served["on_head_timeout"])


@pytest.mark.parametrize("port", ["0", "70000"])
def test_serve_rejects_a_bad_port(cli_model, monkeypatch, port, tmp_path):
    monkeypatch.setenv("READ_OR_RECALL_TOKEN", TOKEN)
    assert main(["serve", "--port", port, "--db", str(tmp_path / "a.sqlite3")]) == 2


# -- issue 37 G: the files audit calibrate names ---------------------------------------------------------------


@pytest.fixture
def no_model(monkeypatch):
    import core.cli.common

    def refuse(*args, **kwargs):
        raise AssertionError("the model must not load for bad input")

    monkeypatch.setattr(core.cli.common, "load_model", refuse)


def test_calibrate_reads_its_csv_safely(tmp_path, no_model, capsys):
    """``audit calibrate /dev/zero`` read until memory ran out; a named pipe hung it."""
    from tests.helpers import dev_zero, error_in_time, named_pipe

    zero = dev_zero()
    box = {}
    assert error_in_time(lambda: box.update(code=main(["audit", "calibrate", zero]))) is None
    assert box["code"] == 2 and "is a device, not a regular file" in capsys.readouterr().err
    fifo = named_pipe(tmp_path, "clean.csv")
    assert error_in_time(lambda: box.update(code=main(["audit", "calibrate", str(fifo)]))) is None
    assert box["code"] == 2 and "is a named pipe" in capsys.readouterr().err


def test_calibrate_checks_out_before_any_model_work(tmp_path, no_model, capsys):
    """``--out`` was checked after the model work: a folder failed then with [Errno 21], a FIFO was replaced."""
    from tests.helpers import named_pipe

    data = _csv(tmp_path / "clean.csv", CLEAN_ROWS)
    assert main(["audit", "calibrate", str(data), "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    fifo = named_pipe(tmp_path, "calib.npz")
    assert main(["audit", "calibrate", str(data), "--out", str(fifo)]) == 2
    assert "is a named pipe" in capsys.readouterr().err
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # left as it was


def test_calibrate_names_the_row_and_column_of_an_invisible_query(tmp_path, no_model, capsys):
    rows = [*CLEAN_ROWS[:8], ("\u200b\u200b", "Record 9 says nothing.")]
    assert main(["audit", "calibrate", str(_csv(tmp_path / "clean.csv", rows))]) == 2
    assert "Row 9, column 'query': empty" in capsys.readouterr().err
