"""``run --json`` on a model whose display name was calibrated but whose identity or template was not (another GGUF
file at the same path, another hub revision, another template): *Not calibrated for this model*, never the
calibration of the other file (issue 41 A)."""

from __future__ import annotations

import json

import pytest

import core.cli.common
from core.cli import main
from tests.calibration_fakes import gguf_source, same_model_from, write_fake_calibration


@pytest.fixture
def calibrated(tiny_handle, monkeypatch, tmp_path):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    handle = same_model_from(tiny_handle, gguf_source("a" * 64))
    write_fake_calibration(handle, "chat")
    return handle


def _run_json(handle, monkeypatch, capsys, *extra: str) -> dict:
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: handle)
    argv = ["run", "--model", "/models/model.gguf", "--query", "Where is the tower?", "--context",
            "The tower stands in Quillmere.", "--max-new-tokens", "3", "--json", *extra]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_the_calibrated_file_gets_its_own_record(calibrated, monkeypatch, capsys):
    out = _run_json(calibrated, monkeypatch, capsys)
    assert out["calibration_id"] == f"{calibrated.slug}/chat" == out["calibration"]["id"]
    assert out["calibration"]["calibrated"] and out["calibration"]["origin"] == "calibrate-model"
    assert out["verdict"] != "uncalibrated" and out["threshold"] is not None


@pytest.mark.parametrize("what", ["another file at the same path", "another revision", "another template"])
def test_another_file_revision_or_template_is_not_calibrated(calibrated, tiny_handle, monkeypatch, capsys, what):
    extra: tuple[str, ...] = ()
    if what == "another file at the same path":
        handle = same_model_from(tiny_handle, gguf_source("b" * 64))
    elif what == "another revision":
        write_fake_calibration(same_model_from(tiny_handle, "huggingface hub owner/tiny@rev-1"), "chat")
        handle = same_model_from(tiny_handle, "huggingface hub owner/tiny@rev-2")
    else:
        handle, extra = calibrated, ("--template", "A")
    out = _run_json(handle, monkeypatch, capsys, *extra)
    assert out["verdict"] == "uncalibrated" and out["axes"]["title"] == "Not calibrated for this model"
    assert out["repcs_verdict"] == "uncalibrated" and out["threshold"] is None
    assert out["calibration"]["calibrated"] is False and out["calibration"]["origin"] == "none"
    assert out["calibration_id"] == out["calibration"]["id"] != f"{calibrated.slug}/chat"
    assert "calibrate-model --model" in out["calibration"]["how"]
