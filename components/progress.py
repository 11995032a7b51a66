"""The wait of a long run: the estimate before it, and a progress bar that moves at every generated token.

Long runs report whole units — a scoring run of a noise sweep, a batch of SMA generations — and one unit can
take many seconds on a CPU. :class:`StepTicker` also listens to every generation step
(:func:`core.model.handle.on_each_step`), so inside a unit the bar advances with the tokens and its text
counts them. (The Evaluate page's bar, whose unit is a batch of rows, is
:class:`components.evaluate_jobs.TokenProgress`.)

Before a run, :func:`estimate_text` says how long it will take: from the last runs of the same kind
(:func:`core.engine.estimate.estimate_run`), which each page records when a run ends
(:func:`core.engine.estimate.measured_run`; a costly detector of the agreement view through
:func:`judge_measured`), else from the measured cost per token.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from core.detectors import get
from core.detectors.agreement import DetectorVerdict, judge
from core.detectors.registry import Detector, DetectorInput
from core.engine.estimate import Estimate, Work, answer_steps, describe_estimate, estimate_run, observe_run
from core.model.handle import on_each_step


def detector_kind(name: str) -> str:
    """The estimate's kind of a costly detector run from the agreement view (its work: :func:`detector_work`)."""
    return f"detector:{name}"


def detector_work(detector: Detector | None, inp: DetectorInput) -> float | Work:
    """The size of a costly detector's run on this example: its declared units of work (``detector.work``: the
    answers Self-Critique and SMA generate and the prompts they read, :mod:`core.methods.work`); else, for a
    ``"generate"`` detector, this example's answer steps (:func:`core.engine.estimate.answer_steps`: its time
    follows their length), else its token budget."""
    if detector is not None and detector.work is not None:
        return detector.work(inp)
    cost = detector.cost if detector is not None else "generate"
    return answer_steps(inp.result) if cost == "generate" else int(inp.settings.max_new_tokens)


def detector_estimate(inp: DetectorInput, name: str, fallback: Estimate | float | None) -> str:
    """The sentence under a costly detector's button: its last runs scaled to this example's work
    (:func:`detector_work`), else the unit costs of that work (a detector that declares its work), else
    ``fallback`` (the detector's declared unit-cost estimate)."""
    work = detector_work(get(name), inp)
    return estimate_text(inp.handle, detector_kind(name), work, None if isinstance(work, Work) else fallback)


def estimate_text(handle: Any, kind: str, work: float | Work, fallback: Estimate | float | None = None) -> str:
    """The sentence under a run button: from the last runs of ``kind`` scaled to ``work`` (a
    :class:`~core.engine.estimate.Work`: its units of work; a number: the kind's own unit), else ``fallback``
    (the unit-cost estimate), else the unit costs alone (a :class:`~core.engine.estimate.Work`)."""
    return describe_estimate(
        estimate_run(handle, kind, work if isinstance(work, Work) else max(float(work), 1e-9), fallback)
    )


def judge_measured(detector: Detector, inp: DetectorInput) -> DetectorVerdict:
    """:func:`core.detectors.agreement.judge`, timed: a run that scored is recorded as a run of
    :func:`detector_kind` (work: :func:`detector_work`), so the next estimate of that detector is measured."""
    started = time.monotonic()
    verdict = judge(detector, inp)
    if verdict.error is None:
        seconds = time.monotonic() - started
        observe_run(inp.handle, detector_kind(detector.name), seconds, detector_work(detector, inp))
    return verdict


GENERATION_SHARE = 0.9
"""The share of a unit's part of the bar that its generation steps may fill (the rest when the unit ends)."""


class StepTicker:
    """A bar driven by unit reports (``report(done, total, text)``) and, in between, by generation steps.

    Args:
        bar: a Streamlit progress element (anything with ``progress(value, text=...)``).
        steps_per_unit: the most generation steps one unit takes (its max new tokens).
        unit_size: how many of ``done``'s units one generation call scores (e.g. SMA's batch of generations).
        total: the planned units, when known before the first report (the steps of the first unit then move
            the bar too; otherwise only its text until the first report).

    Use it as the run's progress callback and listen for steps while the run lasts::

        ticker = StepTicker(st.progress(0.0), steps_per_unit=16)
        with ticker.listening():
            layer_sweep(..., progress=ticker.report)
    """

    MIN_INTERVAL_S = 0.5

    def __init__(self, bar: Any, steps_per_unit: int, unit_size: int = 1, total: int | None = None) -> None:
        self.bar = bar
        self.steps_per_unit = max(1, int(steps_per_unit))
        self.unit_size = max(1, int(unit_size))
        self.done, self.text, self.steps = 0, "Starting…", 0
        self.total: int | None = max(1, int(total)) if total else None
        self._last = 0.0

    def value(self) -> float:
        """Where the bar stands: the units done, plus the share of the next unit its steps so far fill (0 while
        the total is unknown)."""
        if self.total is None:
            return 0.0
        share = GENERATION_SHARE * min(self.steps / self.steps_per_unit, 1.0)
        next_unit = min(self.unit_size, max(self.total - self.done, 0))
        return min((self.done + share * next_unit) / self.total, 1.0)

    def report(self, done: int, total: int, text: str) -> None:
        """A unit ended: ``done`` of ``total`` units, ``text`` says what (the step count starts again)."""
        self.done, self.total, self.text, self.steps = int(done), max(1, int(total)), text, 0
        self.bar.progress(self.value(), text=text)

    def between_reports(self) -> tuple[float, str]:
        """The bar's value and text ``self.steps`` generation steps after the last report."""
        return self.value(), f"{self.text} · next: token {self.steps}"

    def step(self) -> None:
        """One generation step (every row of the call got one more token); redraws at most every 0.5 s."""
        self.steps += 1
        now = time.monotonic()
        if now - self._last >= self.MIN_INTERVAL_S:
            self._last = now
            self.bar.progress(*self.between_reports())

    @contextmanager
    def listening(self) -> Iterator[StepTicker]:
        """Hear every generation step of this thread while the block runs."""
        with on_each_step(self.step):
            yield self
