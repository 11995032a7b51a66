"""The Evaluate page's run widgets: Run / Stop / Resume / Discard and the progress of a scoring job.

A job is a :class:`core.evaluation.scheduler.EvaluationJob` kept in ``st.session_state`` under its key
(``keys.EVAL_JOB_MAIN`` or ``keys.EVAL_JOB_CONFLICT``); all its bookkeeping (batches, claims, stop/resume)
lives in the scheduler, and these widgets only draw it and call it. Each batch's rows are stored by the
scheduler before the progress bar is touched, so a Stop click (which interrupts the script at its next
Streamlit call) never loses a scored row.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

import streamlit as st

from components import keys
from components.progress import GENERATION_SHARE, StepTicker
from components.text import escape_markdown
from components.threshold_state import active_threshold
from core.engine.estimate import observe_run
from core.evaluation import EvaluationJob, JobSpec, JobStatus, Row, any_busy
from core.model.handle import ModelHandle

JOB_KEYS = (keys.EVAL_JOB_MAIN, keys.EVAL_JOB_CONFLICT)


ANY_EVALUATION = "evaluate:any"
"""Every scoring job is also recorded under this kind: the estimate of a job whose own kind has no run yet (other
detectors, another batch size) comes from it before the cost per token — an evaluation feeds no per-token cost."""


def estimate_kind(spec: JobSpec) -> str:
    """The estimate's kind of a scoring job (work: rows): jobs with the same detectors, σ values, batch size, token
    budget, window and job kind score rows at one pace, whatever the data set."""
    s = spec.settings
    plan = [spec.kind, sorted(spec.detectors), list(spec.sigmas), spec.batch_size, s.max_new_tokens, s.score_window]
    if spec.swap_test:  # one more generation per row: another pace
        plan.append("swap_test")
    return "evaluate:" + hashlib.sha1(json.dumps(plan).encode("utf-8")).hexdigest()[:12]


def job(key: str) -> EvaluationJob | None:
    """The job stored under ``key``, if any."""
    return st.session_state.get(key)


def _start(key: str, spec: JobSpec, rows: Sequence[Row]) -> None:
    st.session_state[key] = EvaluationJob(spec, list(rows))


def _stop(key: str) -> None:
    if (j := job(key)) is not None:
        j.stop()


def _resume(key: str) -> None:
    if (j := job(key)) is not None:
        j.resume()


def _discard(key: str) -> None:
    st.session_state.pop(key, None)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def progress_text(j: EvaluationJob) -> str:
    """``"<done> / <total> rows scored · <s> s per row · about <t> left"``."""
    text = f"{j.n_done} / {j.n_rows} rows scored"
    per_row = j.seconds_per_row
    if per_row is not None:
        text += f" · {per_row:.1f} s per row"
        if j.eta_s is not None:
            text += f" · about {_duration(j.eta_s)} left"
    return text


def progress_within_batch(j: EvaluationJob, steps: int) -> tuple[float, str]:
    """The bar's value and text ``steps`` generation steps into the batch in flight.

    One step is one new token for every row of the batch; a batch takes at most ``max_new_tokens`` steps (fewer
    when every row ends early). Between batches (nothing in flight) this is :func:`progress_text`.
    """
    rows, most = j.rows_in_flight, j.spec.settings.max_new_tokens
    done, total = j.n_done, max(1, j.n_rows)
    if rows == 0 or steps <= 0:
        return done / total, progress_text(j)
    step = min(steps, most)
    value = (done + GENERATION_SHARE * rows * step / most) / total
    text = f"{progress_text(j)} · scoring {rows} more: token {step} of at most {most}"
    return min(value, 1.0), text


class TokenProgress(StepTicker):
    """The Evaluate bar: moves at every generated token of the batch in flight (redrawn at most every 0.5 s).

    Used as an :func:`core.model.handle.on_each_step` listener during a job's run (:meth:`listening`), and as
    its ``on_batch`` callback (:meth:`batch_done`, which resets the step count once a batch is stored).
    """

    def __init__(self, bar: Any, j: EvaluationJob) -> None:
        super().__init__(bar, steps_per_unit=j.spec.settings.max_new_tokens)
        self.job = j

    def between_reports(self) -> tuple[float, str]:
        return progress_within_batch(self.job, self.steps)

    def batch_done(self, j: EvaluationJob) -> None:
        self.report(j.n_done, j.n_rows, progress_text(j))


def _wait_in_flight(j: EvaluationJob) -> None:
    """Wait (with a spinner) for a batch another script thread of this session is still scoring."""
    if j.in_flight:
        with st.spinner("Finishing the batch in progress (its rows are kept)…"):
            j.wait_in_flight()


def draw_run_controls(key: str, spec: JobSpec, rows: Sequence[Row], *, run_label: str) -> None:
    """Run / Stop / Resume / Discard for one job, and a line saying what the shown results are for."""
    j = job(key)
    running = j is not None and j.is_running
    busy = any_busy([job(k) for k in JOB_KEYS])
    cols = st.columns([1.5, 1.2, 1, 1, 2.3])
    cols[0].button(
        run_label,
        type="primary",
        key=keys.scoped(key, "run"),
        disabled=busy or not rows,
        on_click=_start,
        args=(key, spec, rows),
        icon=":material/play_arrow:",
    )
    cols[1].button(
        "Stop scoring",
        key=keys.scoped(key, "stop"),
        disabled=not running,
        on_click=_stop,
        args=(key,),
        icon=":material/stop:",
        help="Rows already scored are kept.",
    )
    cols[2].button(
        "Resume",
        key=keys.scoped(key, "resume"),
        disabled=j is None or not j.resumable or busy,
        on_click=_resume,
        args=(key,),
        icon=":material/replay:",
    )
    cols[3].button(
        "Discard",
        key=keys.scoped(key, "discard"),
        disabled=j is None or running,
        on_click=_discard,
        args=(key,),
        icon=":material/delete:",
    )
    if j is None:
        return
    if j.status == JobStatus.FAILED and j.error:
        st.error(f"The run stopped with an error: {escape_markdown(j.error)}")
    elif j.status == JobStatus.STOPPED and j.n_done < j.n_rows:
        st.info(f"Stopped: {j.n_done} of {j.n_rows} rows scored; the results below use them.")
    if not j.spec.same_choices(spec):
        st.caption(
            f"The results below are for {escape_markdown(j.spec.dataset)} ({j.n_rows} rows, "
            f"T = {j.spec.settings.score_window}, {len(j.spec.detectors)} detectors); the choices above have "
            "changed since — press the run button to start over with them."
        )


def run_job(handle: ModelHandle, key: str) -> None:
    """Score the job's remaining batches with a progress bar that moves at every generated token (rows done /
    total, the batch in flight's token, ETA), then redraw."""
    j = job(key)
    if j is None:
        return
    if not j.is_running:
        before = j.n_done
        _wait_in_flight(j)
        if j.n_done != before:
            st.rerun()  # the batch that was in flight when Stop was clicked has landed: show its rows too
        st.progress(j.n_done / max(1, j.n_rows), text=progress_text(j))
        return
    bar = st.progress(j.n_done / max(1, j.n_rows), text=progress_text(j))
    if handle.info.name != j.spec.model:
        j.stop()
        st.warning("The model in the sidebar differs from the one this run started with; switch back to resume.")
        return
    try:
        j.prepare(handle)
    except ValueError as exc:
        st.error(f"Not run: {escape_markdown(str(exc))}")
        return
    threshold, source = active_threshold(handle.info.name)
    tracker = TokenProgress(bar, j)
    before, started = j.n_done, time.monotonic()
    with tracker.listening():
        j.run(handle, threshold=threshold, threshold_source=source, on_batch=tracker.batch_done)
    _wait_in_flight(j)
    if j.n_done > before:  # the rows scored in this script run measure the next estimate of a job like it
        for kind in (estimate_kind(j.spec), ANY_EVALUATION):
            observe_run(handle, kind, time.monotonic() - started, j.n_done - before)
    j.complete()
    st.rerun()  # redraw the controls (Stop → Run) and the results from the stored rows
