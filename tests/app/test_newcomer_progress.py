"""Per-token progress of a batched evaluation (issue 14: the Evaluate bar moved only once a whole batch was
scored, e.g. "0 / 6 rows" for 110 s on the embedded model). ``core.model.handle.on_each_step`` hears every
generation step; the Evaluate page's bar turns the steps of the batch in flight into a fraction of the run."""

from __future__ import annotations

import pytest

from components.evaluate_jobs import GENERATION_SHARE, TokenProgress, progress_text, progress_within_batch
from core.engine import DualPathSettings
from core.engine.generation import generate_greedy
from core.evaluation import EvaluationJob, JobSpec
from core.evaluation.data import LabeledRow
from core.model.handle import on_each_step, report_step

pytestmark = pytest.mark.usefixtures("one_thread")


def _job(handle, n: int = 6, batch: int = 3, tokens: int = 4) -> EvaluationJob:
    labels = ["memorized", "grounded"] * (n // 2)
    rows = [LabeledRow(i + 1, f"Question {i}?", f"Context {i}.", label) for i, label in enumerate(labels)]
    settings = DualPathSettings(max_new_tokens=tokens, force_length=True)
    spec = JobSpec("t.csv", "d", tuple(range(n)), handle.info.name, settings, (), batch_size=batch)
    job = EvaluationJob(spec, rows)
    job.prepare(handle)
    return job


def test_every_generation_step_of_a_batch_is_reported_once(tiny_handle) -> None:
    steps: list[int] = []
    settings = DualPathSettings(max_new_tokens=5, force_length=True)
    with on_each_step(lambda: steps.append(1)):
        out = generate_greedy(tiny_handle, [[1, 2, 3], [4, 5]], settings)
    assert [len(ids) for ids, _, _ in out] == [5, 5]
    assert len(steps) == 5, "one step per new token of the whole batch, not per row"
    generate_greedy(tiny_handle, [[1, 2, 3]], settings)
    report_step()  # outside the block: nobody listens, nothing fails
    assert len(steps) == 5


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


def test_a_noise_sweep_bar_moves_with_every_token_of_the_run_in_progress(tiny_handle) -> None:
    from components.progress import GENERATION_SHARE as SHARE
    from components.progress import StepTicker
    from core.methods.ablation import layer_sweep

    bar = _Bar()
    runs = 1 + tiny_handle.info.n_layers
    ticker = StepTicker(bar, steps_per_unit=3, total=runs)
    ticker.MIN_INTERVAL_S = 0.0
    settings = DualPathSettings(max_new_tokens=3, force_length=True)
    with ticker.listening():
        grid = layer_sweep(
            tiny_handle, "Q?", "C.", settings, 0.5, (0,), max_new_tokens=3,
            progress=lambda d, t, label: ticker.report(d, t, f"{d} / {t} runs"),
        )  # fmt: skip
    assert grid.z.shape == (tiny_handle.info.n_layers, 1)
    values = [v for v, _ in bar.values]
    assert values == sorted(values) and values[-1] == 1.0, "monotone, ends full"
    tokens = [(v, t) for v, t in bar.values if "next: token" in t]
    assert len(tokens) == 3 * runs, "every token of every run (the clean one too) moved the bar"
    assert tokens[0] == (pytest.approx(SHARE / 3 / runs), "Starting… · next: token 1")
    first_after_clean = next(v for v, t in bar.values if t == f"1 / {runs} runs · next: token 1")
    assert first_after_clean == pytest.approx((1 + SHARE / 3) / runs)


def test_a_step_ticker_never_fills_past_the_unit_in_progress() -> None:
    from components.progress import StepTicker

    bar = _Bar()
    ticker = StepTicker(bar, steps_per_unit=4, unit_size=8)
    ticker.MIN_INTERVAL_S = 0.0
    ticker.report(8, 20, "8 / 20 generations")
    for _ in range(10):  # more steps than a unit takes (a call split in two): capped
        ticker.step()
    assert bar.values[-1][0] == pytest.approx((8 + 0.9 * 8) / 20)
    ticker.report(16, 20, "16 / 20 generations")
    ticker.step()
    assert bar.values[-1][0] == pytest.approx((16 + 0.9 * 4 * (1 / 4)) / 20), "only 4 generations are left"
