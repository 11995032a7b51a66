"""components.evaluate_jobs: per-token progress of a batched evaluation (issue 14: the Evaluate bar moved only once a
whole batch was scored, e.g. "0 / 6 rows" for 110 s on the embedded model): the Evaluate page's bar turns the steps of
the batch in flight into a fraction of the run."""

from __future__ import annotations

import pytest

from components.evaluate_jobs import GENERATION_SHARE, TokenProgress, progress_text, progress_within_batch
from core.engine import DualPathSettings
from core.evaluation import EvaluationJob, JobSpec
from core.evaluation.data import LabeledRow
from core.model.handle import on_each_step

pytestmark = pytest.mark.usefixtures("one_thread")


def _job(handle, n: int = 6, batch: int = 3, tokens: int = 4) -> EvaluationJob:
    labels = ["memorized", "grounded"] * (n // 2)
    rows = [LabeledRow(i + 1, f"Question {i}?", f"Context {i}.", label) for i, label in enumerate(labels)]
    settings = DualPathSettings(max_new_tokens=tokens, force_length=True)
    spec = JobSpec("t.csv", "d", tuple(range(n)), handle.info.name, settings, (), batch_size=batch)
    job = EvaluationJob(spec, rows)
    job.prepare(handle)
    return job


class _Bar:
    def __init__(self) -> None:
        self.values: list[tuple[float, str]] = []

    def progress(self, value: float, text: str = "") -> None:
        self.values.append((value, text))


def test_the_evaluate_bar_moves_within_a_batch_and_never_backwards(tiny_handle) -> None:
    job = _job(tiny_handle)
    bar = _Bar()
    tracker = TokenProgress(bar, job)
    tracker.MIN_INTERVAL_S = 0.0  # draw every step here; the page draws at most every 0.5 s
    with on_each_step(tracker.step):
        job.run(tiny_handle, threshold=None, threshold_source=None, on_batch=tracker.batch_done)
    assert job.n_done == 6
    values = [v for v, _ in bar.values]
    assert values == sorted(values), "monotone"
    within = [(v, t) for v, t in bar.values if "token" in t]
    assert len(within) == 2 * 4, "every token of both batches of 3 rows moved the bar"
    assert within[0][0] == pytest.approx(GENERATION_SHARE * 3 * (1 / 4) / 6)
    assert within[0][1].startswith("0 / 6 rows scored") and "scoring 3 more: token 1 of at most 4" in within[0][1]
    assert within[4][0] == pytest.approx((3 + GENERATION_SHARE * 3 * (1 / 4)) / 6), "second batch starts at 3/6"
    assert bar.values[-1] == (1.0, progress_text(job))


def test_between_batches_the_bar_shows_rows_only(tiny_handle) -> None:
    job = _job(tiny_handle)
    assert job.rows_in_flight == 0
    assert progress_within_batch(job, 3) == (0.0, progress_text(job))
