"""“Calibrate this model”: the one-step calibration (:func:`core.evaluation.calibrate.calibrate_model`) as a
background job with progress and cancel, the notice of a model without calibration, and the calibration card next
to the verdict.

The job runs in a thread of the server, one per model (by its slug), shared by every browser session: a second
session sees the same progress, and a session that leaves does not stop it. It takes the model through the
handle's fair lock one batch at a time, so other sessions' runs interleave. Cancel stops it at its next token; the
rows scored so far stay in the model's work folder and the next start continues from them.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from components import keys
from components.text import escape_markdown
from core.engine.calibration_record import ModelCalibration, record_for, record_of_result
from core.engine.estimate import describe_estimate
from core.engine.result import DualPathResult
from core.evaluation.calibrate import (
    DEFAULT_MINUTES,
    DEFAULT_ROWS,
    Budget,
    calibrate_model,
    estimate_calibration,
)
from core.evaluation.model_card import calibration_status, card_text, find_card, how_to_calibrate
from core.model.handle import CancelToken, ModelHandle, RunCancelled

BUDGETS = {
    f"default ({DEFAULT_ROWS} rows, at most {DEFAULT_MINUTES:g} minutes)": None,
    "quick (80 rows: wider intervals)": "80",
    "at most 30 minutes": "30m",
}
"""The budgets the section offers (the command line takes any)."""
POLL_S = 2.0


@dataclass
class CalibrationJob:
    """One model's calibration running (or finished) in the background.

    Attributes:
        model: the model's name; budget: the budget it runs with.
        done, total, text: its last progress report; card: the card when it finished; error: why it stopped
            (cancelled or failed) otherwise.
    """

    model: str
    budget: str | None
    cancel: CancelToken = field(default_factory=CancelToken)
    done: int = 0
    total: int = 1
    text: str = "starting"
    card: dict[str, Any] | None = None
    error: str | None = None
    started: float = field(default_factory=time.monotonic)
    finished: bool = False

    def progress(self, done: int, total: int, text: str = "") -> None:
        self.done, self.total, self.text = done, max(total, 1), text or self.text

    @property
    def running(self) -> bool:
        return not self.finished


_JOBS: dict[str, CalibrationJob] = {}
_LOCK = threading.Lock()
_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ror-calibrate")


def job_for(handle: ModelHandle) -> CalibrationJob | None:
    """The calibration job of ``handle``'s model in this server, if one was started."""
    with _LOCK:
        return _JOBS.get(handle.slug)


def _run(handle: ModelHandle, job: CalibrationJob) -> None:
    try:
        job.card = calibrate_model(handle, budget=job.budget, progress=job.progress, cancel=job.cancel)
    except RunCancelled as exc:  # its note says what was kept (rows scored, swap tests, artifacts)
        kept = " ".join(getattr(exc, "__notes__", [])) or "the rows scored so far are kept; start again to continue"
        job.error = f"cancelled: {kept}"
    except Exception as exc:  # noqa: BLE001 - a failed job reports on the page instead of killing the thread
        job.error = f"{type(exc).__name__}: {exc}"
    finally:
        job.finished = True


def start(handle: ModelHandle, budget: str | None) -> CalibrationJob:
    """Start the calibration of ``handle``'s model in the background (or return the one already running)."""
    with _LOCK:
        running = _JOBS.get(handle.slug)
        if running is not None and running.running:
            return running
        job = CalibrationJob(handle.info.name, budget)
        _JOBS[handle.slug] = job
    _WORKER.submit(_run, handle, job)
    return job


def calibrated(result: DualPathResult) -> dict[str, Any]:
    """:func:`core.evaluation.model_card.calibration_status` of the record that decided ``result`` (its
    ``calibration_id``): the card and the verdict beside it come from the same record."""
    return calibration_status(record_of_result(result))


def handle_record(handle: ModelHandle) -> ModelCalibration:
    """The calibration record of the loaded model with the sidebar's template (by its identity and template)."""
    from components import state

    template = state.stored(keys.TEMPLATE, "auto")
    return record_for(handle, template if isinstance(template, str) else "auto")


def sidebar_notice(handle: ModelHandle) -> None:
    """In the sidebar: a model without its own calibration says so and how to calibrate it."""
    status = calibration_status(handle_record(handle))
    if status["calibrated"]:
        return
    with st.sidebar:
        st.warning(
            escape_markdown(
                f"Not calibrated for this model: its verdicts say “uncalibrated” and show raw scores. Calibrate it "
                f"with “Calibrate this model” on the Dual Path page, or `{status['how']}`."
            ),
            icon=":material/tune:",
        )


def draw_owner(result: DualPathResult, handle: ModelHandle) -> bool:
    """Above the verdict: which model it belongs to and the calibration record that decided it; a verdict of
    another model than the one loaded now says so. Returns whether it is the loaded model's."""
    own = result.model == handle.info.name
    key = result.calibration_id or "no calibration record"
    st.caption(escape_markdown(f"Verdict of {result.model} · calibration {key}"))
    if not own:
        st.warning(
            escape_markdown(
                f"This verdict belongs to {result.model}, not to the model loaded now ({handle.info.name}): press "
                "**Run both paths** to run the loaded model."
            ),
            icon=":material/swap_horiz:",
        )
    return own


def draw_card(result: DualPathResult) -> None:
    """Next to the verdict: the calibration card (held-out figures) of the record that decided it, or that the
    bundled files calibrate it, or nothing (the section below says it is not calibrated)."""
    record = record_of_result(result)
    status = calibration_status(record)
    if status["origin"] == "bundled":
        st.caption(
            escape_markdown(
                f"Calibration of {result.model}: the bundled files of the embedded model (held-out figures in "
                "docs/validity.md)."
            )
        )
        return
    card = status["card"]
    if card is None:
        return
    ci = card.get("headline_match_ci") or [None, None]
    per = "; ".join(f"{b} {_pct(v.get('match'))} of {v.get('n')}" for b, v in (card.get("per_behavior") or {}).items())
    st.caption(
        escape_markdown(
            f"Calibration card ({card.get('budget')}, {card.get('created')}): on {card.get('held_out_rows')} held-out "
            f"report rows the headline matched behavior {_pct(card.get('headline_match'))} "
            f"[{_pct(ci[0])}, {_pct(ci[1])}] ({per}; undecided {_pct(card.get('undecided'))}; the text-only rule "
            f"{_pct(card.get('text_only_match'))})."
            + ("" if status["calibrated"] else " Its budget was too small to fit the headline's axes: calibrate again.")
        )
    )
    with st.expander("The whole calibration card"):
        full = find_card(record)
        st.code(card_text(full) if full else "", language=None)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.0f} %"


def draw_section(handle: ModelHandle) -> None:
    """“Calibrate this model”: shown wherever a model without calibration is loaded. A budget, the start button
    with its estimate, then the job's progress (polled) with a cancel button, and its card when it finishes."""
    job = job_for(handle)
    if job is None and calibration_status(handle_record(handle))["calibrated"]:
        return
    st.subheader("Calibrate this model")
    st.caption(
        escape_markdown(
            f"{handle.info.name} has no calibration of its own, so its headline says “not calibrated for this model” "
            "and shows the raw axis scores, RePCS has no τ, and the detectors that need a per-model file say which. "
            "One calibration builds all of them from the bundled behavior rows (the model's own answers, knownness "
            "checked with it), and reports how well they hold on rows they never saw. Same as "
            f"`{how_to_calibrate(handle.info.name, handle.info.source)}`."
        )
    )
    if job is None or job.finished:
        if job is not None and job.card is not None:
            st.success("Calibrated. New runs use the model's own calibration.")
            st.code(card_text(job.card), language=None)
            return
        if job is not None and job.error:
            st.warning(escape_markdown(job.error))
        choice = st.selectbox("Budget", list(BUDGETS), key=keys.CALIBRATE_BUDGET)
        budget = BUDGETS[choice]
        st.caption(f"Estimate: {describe_estimate(estimate_calibration(handle, Budget.parse(budget)))}.")
        if st.button("Calibrate this model", key=keys.CALIBRATE_START, icon=":material/tune:"):
            start(handle, budget)
            st.rerun()
        return
    _draw_running(handle)


@st.fragment(run_every=POLL_S)
def _draw_running(handle: ModelHandle) -> None:
    job = job_for(handle)
    if job is None:
        return
    if job.finished:
        st.rerun()  # the whole page: the new calibration is in force
    st.progress(min(1.0, job.done / max(job.total, 1)), text=escape_markdown(job.text))
    st.caption(f"Running for {time.monotonic() - job.started:.0f} s; the page may be left, the job goes on.")
    if st.button("Cancel the calibration", key=keys.CALIBRATE_CANCEL, icon=":material/stop:"):
        job.cancel.cancel("cancelled on the page")
