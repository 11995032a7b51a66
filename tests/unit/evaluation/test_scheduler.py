"""EvaluationJob: batches are claimed once, records land before the caller hears of them, stop/resume keep
every scored row, a failed batch keeps the others, and the CLI's evaluate_rows runs the same job."""

from __future__ import annotations

import threading

import pytest

import core.evaluation.scheduler as scheduler
from core.engine import DualPathSettings
from core.evaluation import (
    CONFLICT,
    EvaluationJob,
    JobSpec,
    JobStatus,
    LabeledRow,
    any_busy,
    evaluate_rows,
    resolve_detectors,
    score_records,
)

SETTINGS = DualPathSettings(max_new_tokens=3, score_window=3, top_k=3)
ROWS = [
    LabeledRow(
        i + 1,
        f"Where is tower {i}?",
        f"Tower {i} stands in Quill{'mere' * (i % 3 + 1)}.",
        "memorized" if i % 2 else "grounded",
    )
    for i in range(6)
]


def _spec(**kw) -> JobSpec:
    base = {
        "dataset": "d.csv",
        "digest": "x",
        "rows_key": tuple(r.row for r in ROWS),
        "model": "tiny-random-llama",
        "settings": SETTINGS,
        "detectors": ("repcs", "ppl"),
        "sigmas": (0.0, 0.1),
        "batch_size": 2,
    }
    return JobSpec(**{**base, **kw})


def _run(job: EvaluationJob, handle, **kw) -> None:
    job.run(handle, threshold=None, threshold_source=None, **kw)


def test_stop_after_a_batch_keeps_its_rows_and_resume_finishes(tiny_handle):
    job = EvaluationJob(_spec(), list(ROWS))
    job.prepare(tiny_handle)
    assert sorted(i for b in job.batches for i in b) == list(range(6)) and len(job.batches) == 3
    seen = []

    def stop_after_first(j: EvaluationJob) -> None:
        seen.append(j.n_done)  # the batch's records are stored before the caller hears of it
        j.stop()

    _run(job, tiny_handle, on_batch=stop_after_first)
    assert seen == [2] and job.status == JobStatus.STOPPED and job.n_done == 2
    assert job.resumable and not job.busy and job.eta_s is None
    kept = dict(job.records)
    job.resume()
    _run(job, tiny_handle)
    assert job.status == JobStatus.DONE and job.n_done == 6 and not job.resumable
    assert all(job.records[i] is rec for i, rec in kept.items())
    assert [r["row"] for r in job.scored_records()] == [1, 2, 3, 4, 5, 6]
    assert job.version == 3 and job.seconds > 0 and job.seconds_per_row > 0
    # the same records as scoring the rows directly
    direct = score_records(
        tiny_handle, ROWS[:1], SETTINGS, resolve_detectors(["repcs", "ppl"]), noise_sigmas=(0.0, 0.1)
    )
    assert job.records[0]["scores"] == pytest.approx(direct[0]["scores"], rel=1e-4, abs=1e-5)
    assert job.records[0]["noisy_z"]["sigma"] == [0.0, 0.1]


def test_two_threads_claim_different_batches_and_wait_for_each_other(tiny_handle):
    job = EvaluationJob(_spec(), list(ROWS))
    job.prepare(tiny_handle)
    first, second = job._claim(), job._claim()
    assert (first, second) == (0, 1) and job.in_flight and job.busy
    assert any_busy([None, job]) and not any_busy([None])
    job.stop()
    assert job.busy  # still finishing its batches after the Stop

    def land() -> None:
        for b in (first, second):
            job._score_batch(tiny_handle, b, None, None, raise_errors=False)

    thread = threading.Thread(target=land)
    thread.start()
    assert job.wait_in_flight(timeout_s=120)
    thread.join()
    assert not job.busy and job.n_done == 4 and job.finished == {0, 1}


def test_a_failed_batch_keeps_the_other_rows(tiny_handle, monkeypatch):
    job = EvaluationJob(_spec(), list(ROWS))
    job.prepare(tiny_handle)
    real, calls = scheduler.score_records, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("out of memory")
        return real(*args, **kwargs)

    monkeypatch.setattr(scheduler, "score_records", flaky)
    _run(job, tiny_handle)
    assert job.status == JobStatus.FAILED and job.error == "RuntimeError: out of memory"
    assert job.n_done == 2 and job.claimed == job.finished == {0} and job.resumable
    job.resume()
    assert job.status == JobStatus.RUNNING and job.error is None
    _run(job, tiny_handle)
    assert job.status == JobStatus.DONE and job.n_done == 6

    calls.clear()
    again = EvaluationJob(_spec(), list(ROWS))
    again.prepare(tiny_handle)
    calls.append(1)  # the next batch fails
    with pytest.raises(RuntimeError, match="out of memory"):
        _run(again, tiny_handle, raise_errors=True)
    assert again.status == JobStatus.FAILED


def test_prepare_refuses_another_model_an_unknown_detector_and_a_row_over_budget(tiny_handle):
    job = EvaluationJob(_spec(model="another-model"), list(ROWS))
    with pytest.raises(ValueError, match="another-model"):
        job.prepare(tiny_handle)
    assert job.status == JobStatus.FAILED
    with pytest.raises(ValueError, match="Unknown detector"):
        EvaluationJob(_spec(detectors=("nope",)), list(ROWS)).prepare(tiny_handle)
    long = [*ROWS, LabeledRow(7, "Q?", "word " * 600, "grounded")]
    with pytest.raises(ValueError, match="Row 7, column 'context'"):
        EvaluationJob(_spec(), long).prepare(tiny_handle)
    with pytest.raises(RuntimeError, match="prepare"):
        _run(EvaluationJob(_spec(), list(ROWS)), tiny_handle)


def test_conflict_jobs_skip_fitted_detectors_and_specs_compare_without_kind(tiny_handle):
    job = EvaluationJob(_spec(kind=CONFLICT, detectors=("repcs", "crm_l2_lr")), list(ROWS))
    job.prepare(tiny_handle)
    assert list(job._detectors) == ["repcs"]
    assert _spec().same_choices(_spec(kind=CONFLICT))
    assert not _spec().same_choices(_spec(sigmas=()))


def test_summary_is_cached_per_version_and_subset(tiny_handle):
    job = EvaluationJob(_spec(), list(ROWS))
    job.prepare(tiny_handle)
    _run(job, tiny_handle)
    records = job.scored_records()
    first = job.summary(records)
    assert job.summary(records) is first
    assert job.summary(records[:4], True) is not first
    assert set(first[0]["detectors"]) == {"repcs", "ppl"}


def test_evaluate_rows_reports_progress_per_row(tiny_handle):
    seen = []
    report = evaluate_rows(
        tiny_handle,
        list(ROWS),
        SETTINGS,
        detectors=["repcs"],
        batch_size=4,
        progress=lambda done, total: seen.append((done, total)),
        noise_sigmas=(),
    )
    assert seen == [(i, 6) for i in range(1, 7)]
    assert report["n"] == 6 and [r["row"] for r in report["rows"]] == [1, 2, 3, 4, 5, 6]


def test_every_row_gets_the_parametric_answer_the_app_generates(tiny_handle, monkeypatch):
    """Every row is scored with the parametric path's own answer, as the app's Dual Path run is, so each row's
    headline (``verdict``) is the app's: behavior-labeled or not."""
    seen = []
    real = scheduler.score_records

    def spy(handle, rows, *args, **kw):
        seen.extend((r.row, kw["free_parametric"]) for r in rows)
        return real(handle, rows, *args, **kw)

    monkeypatch.setattr(scheduler, "score_records", spy)
    extra = {"answer_context": "Quill", "answer_memory": "Rome"}
    behavior = [LabeledRow(r.row, r.query, r.context, r.label, dict(extra)) for r in ROWS[:2]]
    job = EvaluationJob(_spec(rows_key=(1, 2, 3, 4), detectors=("repcs",), batch_size=1), [*behavior, *ROWS[2:4]])
    job.prepare(tiny_handle)
    _run(job, tiny_handle)
    assert sorted(seen) == [(1, True), (2, True), (3, True), (4, True)]
    records = job.scored_records()
    assert all(r["verdict"] == r["axes"]["verdict"] and "repcs_verdict" in r for r in records)
