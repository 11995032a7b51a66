"""The notebook API on a model whose display name was calibrated but whose identity or template was not: the run
and ``lab.calibration()`` say *Not calibrated for this model* (issue 41 A)."""

from __future__ import annotations

import pytest

import read_or_recall as rr
from core.engine import DualPathSettings
from tests.calibration_fakes import gguf_source, same_model_from, write_fake_calibration

SETTINGS = DualPathSettings(max_new_tokens=3, score_window=3)
Q, C = "Where is the tower?", "The tower stands in Quillmere."


@pytest.fixture
def calibrated(tiny_handle, monkeypatch, tmp_path):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    handle = same_model_from(tiny_handle, gguf_source("a" * 64))
    write_fake_calibration(handle, "chat")
    return handle


def test_the_calibrated_file_is_calibrated_in_the_notebook(calibrated):
    lab = rr.Lab(handle=calibrated, settings=SETTINGS)
    assert lab.calibration().calibrated and lab.calibration().status["id"] == f"{calibrated.slug}/chat"
    run = lab.run(Q, C)
    assert run.verdict != "uncalibrated" and run.result.calibration_id == f"{calibrated.slug}/chat"


@pytest.mark.parametrize("what", ["another file at the same path", "another revision", "another template"])
def test_another_file_revision_or_template_is_not_calibrated(calibrated, tiny_handle, what):
    settings = SETTINGS
    if what == "another file at the same path":
        handle = same_model_from(tiny_handle, gguf_source("b" * 64))
    elif what == "another revision":
        write_fake_calibration(same_model_from(tiny_handle, "huggingface hub owner/tiny@rev-1"), "chat")
        handle = same_model_from(tiny_handle, "huggingface hub owner/tiny@rev-2")
    else:
        handle, settings = calibrated, DualPathSettings(max_new_tokens=3, score_window=3, template="A")
    lab = rr.Lab(handle=handle, settings=settings)
    run = lab.run(Q, C)
    assert run.verdict == "uncalibrated" and run.result.repcs_verdict == "uncalibrated"
    assert run.result.head.title == "Not calibrated for this model"
    if what != "another template":  # lab.calibration() is asked for the model's default template
        assert lab.calibration().calibrated is False and "calibrate-model" in lab.calibration().how
