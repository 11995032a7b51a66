"""core.evaluation.scoring: a batch whose detectors read the retrieval trace or CRM's displacement is recorded
while it generates, so each row costs no pass of its own for them — with the scores of the unrecorded path."""

from __future__ import annotations

import pytest

import core.engine.batch as batch_module
import core.model.trace as trace_module
from core.detectors import resolve
from core.engine import DualPathSettings
from core.evaluation.data import LabeledRow
from core.evaluation.scoring import score_records

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS = [
    LabeledRow(1, "Where is the tower?", "The tower stands in Quillmere, by the river.", "grounded"),
    LabeledRow(2, "Who keeps the bees?", "Old Mara keeps the bees behind the chapel.", "memorized"),
]
SETTINGS = DualPathSettings(max_new_tokens=5, score_window=5, top_k=3, force_length=True)
NAMES = ["repcs", "lookback_mean", "redeep_ecs", "crm_l2"]


def _forwards(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = trace_module.run_model

    def counted(model, keep, **inputs):
        calls.append(int(inputs["input_ids"].shape[0]))
        return real(model, keep, **inputs)

    monkeypatch.setattr(trace_module, "run_model", counted)
    return calls


def _scores(records) -> list[dict]:
    assert all("errors" not in r for r in records), [r.get("errors") for r in records]
    return [r["scores"] for r in records]


def test_a_recorded_batch_needs_no_pass_per_row_and_scores_alike(tiny_handle, monkeypatch):
    detectors = {d.name: d for d in resolve(NAMES)}
    calls = _forwards(monkeypatch)
    recorded = _scores(score_records(tiny_handle, ROWS, SETTINGS, detectors))
    assert calls == [len(ROWS)], "one forward: the batch's teacher-forced scoring pass (the rest was recorded)"
    calls.clear()
    monkeypatch.setattr(batch_module, "MAX_RECORD_BYTES", 0)  # over budget: not recorded
    alone = _scores(score_records(tiny_handle, ROWS, SETTINGS, detectors))
    assert len(calls) == 1 + 2 * len(ROWS), "the scoring pass, then per row the shared pass and CRM's h^0 prompt"
    for mine, theirs in zip(recorded, alone, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-4, abs=1e-5)


def test_a_batch_of_detectors_that_read_no_internals_is_not_recorded(tiny_handle, monkeypatch):
    seen = []
    real = batch_module.score_prepared

    def spy(handle, prepared, request, **kwargs):
        seen.append(request.record)
        return real(handle, prepared, request, **kwargs)

    monkeypatch.setattr(batch_module, "score_prepared", spy)
    score_records(tiny_handle, ROWS, SETTINGS, {d.name: d for d in resolve(["repcs", "max_token_kl"])})
    score_records(tiny_handle, ROWS, SETTINGS, {d.name: d for d in resolve(["repcs", "crm_l2"])})
    assert seen == [False, True]
