"""The audit service on a model whose display name was calibrated but whose identity or template was not: the
generation it returns is *not calibrated for this model* (RePCS has no τ), and says which record decided it (issue
41 A)."""

from __future__ import annotations

import pytest

from core.audit.scoring import AuditOptions, audit_pairs
from tests.calibration_fakes import gguf_source, same_model_from, write_fake_calibration

PAIRS = [("Where is the tower?", "The tower stands in Quillmere.")]


@pytest.fixture
def calibrated(tiny_handle, monkeypatch, tmp_path):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    handle = same_model_from(tiny_handle, gguf_source("a" * 64))
    write_fake_calibration(handle, "chat")
    return handle


def _generation(handle, calibration) -> dict:
    options = AuditOptions(generate=True, max_new_tokens=3)
    return audit_pairs(handle, calibration, PAIRS, options)[0]["generation"]


def test_the_calibrated_file_gets_its_tau(calibrated, tiny_calibration):
    gen = _generation(calibrated, tiny_calibration)
    assert gen["threshold"] is not None and gen["verdict"] != "uncalibrated"
    assert gen["model_calibration_id"] == f"{calibrated.slug}/chat"


@pytest.mark.parametrize("what", ["another file at the same path", "another revision", "another template"])
def test_another_file_revision_or_template_is_not_calibrated(calibrated, tiny_handle, tiny_calibration, what):
    if what == "another file at the same path":
        handle = same_model_from(tiny_handle, gguf_source("b" * 64))
    elif what == "another revision":
        write_fake_calibration(same_model_from(tiny_handle, "huggingface hub owner/tiny@rev-1"), "chat")
        handle = same_model_from(tiny_handle, "huggingface hub owner/tiny@rev-2")
    else:  # calibrated with template A only; the server's template is the audit calibration's (chat)
        handle = same_model_from(tiny_handle, gguf_source("c" * 64))
        write_fake_calibration(handle, "A")
    gen = _generation(handle, tiny_calibration)
    assert gen["verdict"] == "uncalibrated" and gen["threshold"] is None
    assert gen["threshold_source"].startswith("not calibrated for this model")
    assert gen["model_calibration_id"] != f"{calibrated.slug}/chat"
