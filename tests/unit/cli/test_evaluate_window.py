"""``python -m core evaluate`` takes T from the τ in force (issue 11): T = 64 for the bundled τ, the file's T
with ``--threshold-file``; an explicit different T warns in the output and in the report JSON."""

from __future__ import annotations

import json

import pytest

import core.cli.commands.evaluate as evaluate_command
from core.cli import main
from core.engine.tau_resolution import threshold_for
from core.engine.threshold import Threshold
from core.model.loading import EMBEDDED_NAME


@pytest.fixture
def captured(monkeypatch, cli_model):
    """Replace the scoring by a stub that records the settings it was given (no generation needed)."""
    seen = {}

    def fake(handle, rows, settings, options=None, **kwargs):
        seen["settings"] = settings
        return {"n": len(rows), "detectors": {}, "rows": []}

    monkeypatch.setattr(evaluate_command, "evaluate_rows", fake)
    return seen


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("query,context,label\nQ1?,Fact one.,memorized\nQ2?,Fact two.,grounded\n")
    return path


def test_default_T_is_the_bundled_taus(tmp_path, data, captured, capsys):
    bundled, _ = threshold_for(EMBEDDED_NAME)
    assert bundled is not None and bundled.T == 64
    out = tmp_path / "r.json"
    assert main(["evaluate", str(data), "--out", str(out)]) == 0
    s = captured["settings"]
    assert s.score_window == 64 and s.max_new_tokens == 64  # the old default was 32
    report = json.loads(out.read_text())
    assert report["tau_T"] == 64 and "warnings" not in report
    assert "WARNING" not in capsys.readouterr().err


def test_explicit_other_T_warns_loudly(tmp_path, data, captured, capsys):
    out = tmp_path / "r.json"
    assert main(["evaluate", str(data), "--out", str(out), "--max-new-tokens", "32"]) == 0
    assert captured["settings"].score_window == 32
    report = json.loads(out.read_text())
    assert any("T = 32" in w and "T = 64" in w for w in report["warnings"])
    err = capsys.readouterr().err
    assert err.count("WARNING: T = 32") >= 1


def test_threshold_files_T_is_used(tmp_path, data, captured, cli_model):
    tau = Threshold(tau=3.0, alpha=0.05, T=16, model=cli_model.info.name, source="test")  # the loaded model's τ
    path = tmp_path / "tau.json"
    tau.save(path)
    out = tmp_path / "r.json"
    assert main(["evaluate", str(data), "--out", str(out), "--threshold-file", str(path)]) == 0
    assert captured["settings"].score_window == 16 and captured["settings"].max_new_tokens == 16
    assert json.loads(out.read_text())["tau_T"] == 16


def test_a_threshold_file_of_another_model_is_refused(tmp_path, data, captured, capsys):
    """Issue 25 item 6: the CLI applied a τ calibrated for another model without a word (the app refuses it)."""
    tau = Threshold(tau=3.0, alpha=0.05, T=16, model=EMBEDDED_NAME, source="test")
    path = tmp_path / "tau.json"
    tau.save(path)
    out = tmp_path / "r.json"
    assert main(["evaluate", str(data), "--out", str(out), "--threshold-file", str(path)]) == 2
    assert "calibrated for SmolLM2" in capsys.readouterr().err and "settings" not in captured and not out.exists()
