"""A calibration's progress: ``progress(done, total, text)`` after every batch, the text naming the stage (and
which of the run's stages it is) and the time the **whole job** has left — this stage's rest at the pace this run
measured (kept across a resume) plus the estimates of the stages after it (:class:`Tracker`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from core.evaluation.calibrate.budget import Budget
from core.evaluation.calibrate.checkpoints import Work
from core.model.handle import check_cancelled
from core.model.progress import Progress


def duration(seconds: float) -> str:
    """``"40 s"``, ``"12 min"``, ``"1.5 h"``."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Tracker:
    """Reports ``progress(done, total, text)`` with the stage, its place among the run's stages and an estimate of
    the whole job's time left (see the module docstring).

    Attributes:
        later: the estimated seconds of the stages after the current one (``None``: not known yet), asked at every
            report (the runner sets it from the stage table).
        elapsed: the run's seconds so far (a resumed run's included), for the time cap.
    """

    def __init__(self, progress: Progress | None, work: Work, budget: Budget) -> None:
        self.progress = progress
        self.work = work
        self.budget = budget
        self.stage = ""
        self.total = 0
        self.position = (0, 0)
        self.later: Callable[[], float | None] = lambda: 0.0
        self.elapsed: Callable[[], float] = lambda: 0.0
        self.started = time.monotonic()

    @property
    def pace(self) -> dict[str, float]:
        return self.work.state.setdefault("pace", {})

    def measured(self, stage: str, seconds: float, units: int) -> None:
        if units > 0 and seconds > 0:
            old = self.pace.get(stage)
            new = seconds / units
            self.pace[stage] = new if old is None else 0.5 * old + 0.5 * new

    def begin(self, stage: str, total: int) -> None:
        """A stage starts: reported, and a cancel asked for so far ends the run here."""
        self.stage, self.total = stage, total
        self.report(0)
        check_cancelled()

    def left(self, done: int) -> tuple[float | None, bool]:
        """The seconds left and whether they are the whole job's: this stage's rest plus the stages after it, or
        this stage's alone while a later one is not measured yet (``None``: this stage's pace is not measured)."""
        pace = self.pace.get(self.stage)
        if pace is None:
            return None, False
        left = pace * max(0, self.total - done)
        later = self.later()
        if later is not None:
            left += later
        cap = self.budget.time_cap
        if cap is not None and self.stage == "rows":  # the time cap ends the rows; the stages after them run to
            left = min(left, max(0.0, cap * 60 - self.elapsed()))  # their end (never "0 s left" past the cap)
        return left, later is not None

    def report(self, done: int, text: str = "") -> None:
        if self.progress is None:
            return
        words = f"{self.stage} {done}/{self.total}"
        index, count = self.position
        if count:
            words += f" (stage {index} of {count})"
        if text:
            words += f" · {text}"
        left, whole = self.left(done)
        if left is not None:
            scope = "in all" if whole else "in this stage (the next not measured yet)"
            words += f" · about {duration(left)} left {scope}"
        self.progress(done, max(self.total, 1), words)

    def say(self, text: str) -> None:
        """A line of its own (a damaged checkpoint skipped, what a cancel kept)."""
        if self.progress is not None:
            self.progress(1, 1, text)
