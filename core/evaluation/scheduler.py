"""An evaluation run scored batch by batch, that can be stopped, resumed or discarded without losing rows.

An :class:`EvaluationJob` holds what a run was started with (:class:`JobSpec`), its rows, the planned batches
and every scored record. Each batch's records are stored the moment the batch finishes, before control
returns to the caller, so an interruption between batches (a Stop click in the app, which interrupts the
script at its next Streamlit call) never loses a scored row.

Two threads may share a job: with Streamlit's ``runner.fastReruns`` a rerun starts a new script thread while
the old one is still scoring a batch. Batches are therefore *claimed* under the job's lock: each thread scores
a different batch, and :meth:`EvaluationJob.wait_in_flight` lets the new thread wait for the old one's batch
to land. ``python -m core evaluate`` runs the same job on one thread (:func:`core.evaluation.evaluate.evaluate_rows`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from core.detectors import Detector
from core.engine import DualPathSettings, plan_batches
from core.engine.threshold import Threshold
from core.evaluation.data import Row, prompt_lengths
from core.evaluation.report import summarize
from core.evaluation.scoring import resolve_detectors, score_records
from core.model.handle import ModelHandle, RunCancelled, check_cancelled

logger = logging.getLogger(__name__)

LABELED, CONFLICT = "labeled", "conflict"
"""The kinds of job: labeled rows (metrics) or the conflict set (which source each answer follows)."""


class JobStatus(StrEnum):
    """Where a job stands. A job is created ``RUNNING``; ``STOPPED`` and ``FAILED`` ones can be resumed."""

    RUNNING = "running"
    STOPPED = "stopped"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class JobSpec:
    """What a run is for: the data, the model, the settings and the detector choices.

    Attributes:
        dataset: the file's name; ``digest`` a hash of its bytes; ``rows_key`` the scored rows' numbers.
        model: the model's name (a job only runs on that model).
        settings: the run's :class:`DualPathSettings`.
        detectors: detector names, in display order.
        sigmas: logit-noise σ values for the robustness table (``()`` = none).
        batch_size: most rows per batch.
        kind: :data:`LABELED` or :data:`CONFLICT` (conflict rows also get the parametric answer and skip
            detectors that need a fit).
        noise_seed: the run seed of the noise draws (:func:`core.maths.noise.row_seed`).
        swap_test: also run the swap test on every row (one more generation per row; :mod:`core.engine.swap`).
    """

    dataset: str
    digest: str
    rows_key: tuple[int, ...]
    model: str
    settings: DualPathSettings
    detectors: tuple[str, ...]
    sigmas: tuple[float, ...] = ()
    batch_size: int = 8
    kind: str = LABELED
    noise_seed: int = 0
    swap_test: bool = False

    def same_choices(self, other: JobSpec) -> bool:
        """Whether ``other`` asks for the same run (everything but :attr:`kind`)."""
        return replace(self, kind=other.kind) == other


@dataclass
class EvaluationJob:
    """One run over ``rows``: its batches, the records scored so far and its status.

    Attributes:
        spec: what the run is for.
        rows: the rows to score, in display order.
        batches: row indices per batch (``None`` until :meth:`prepare` plans them).
        records: scored records by row index (:func:`core.evaluation.scoring.record_for`).
        status: a :class:`JobStatus`; ``error`` says why a job failed.
        seconds: time spent scoring so far (for the ETA).
        version: incremented whenever ``records`` change (a cache key for summaries).
        claimed, finished: batch indices taken by a thread, and those whose records are stored. Guarded by
            the job's lock; ``claimed - finished`` are batches in flight.
    """

    spec: JobSpec
    rows: list[Row]
    batches: list[list[int]] | None = None
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    status: JobStatus = JobStatus.RUNNING
    error: str | None = None
    seconds: float = 0.0
    version: int = 0
    claimed: set[int] = field(default_factory=set)
    finished: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _detectors: dict[str, Detector] | None = field(default=None, repr=False, compare=False)
    _summary: tuple[tuple[int, bool], Any] | None = field(default=None, repr=False, compare=False)

    # -- state --------------------------------------------------------------------------------------------

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def n_done(self) -> int:
        """Rows scored so far."""
        return len(self.records)

    @property
    def is_running(self) -> bool:
        return self.status == JobStatus.RUNNING

    @property
    def in_flight(self) -> bool:
        """Whether some thread is still scoring a batch of this job (e.g. one that was running at a Stop)."""
        with self._lock:
            return bool(self.claimed - self.finished)

    @property
    def rows_in_flight(self) -> int:
        """Rows of the batches claimed and not yet stored (the batch being scored now; 0 between batches)."""
        with self._lock:
            return sum(len(self.batches[b]) for b in self.claimed - self.finished) if self.batches else 0

    @property
    def busy(self) -> bool:
        """Running, or still finishing a batch after a Stop."""
        return self.is_running or self.in_flight

    @property
    def resumable(self) -> bool:
        """Stopped or failed with rows left to score."""
        return self.status in (JobStatus.STOPPED, JobStatus.FAILED) and self.n_done < self.n_rows

    @property
    def seconds_per_row(self) -> float | None:
        return self.seconds / self.n_done if self.n_done and self.seconds > 0 else None

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the pace so far (``None`` before the first batch or when not running)."""
        per_row = self.seconds_per_row
        if per_row is None or not self.is_running or self.n_done >= self.n_rows:
            return None
        return per_row * (self.n_rows - self.n_done)

    def stop(self) -> None:
        """Stop after the batch in flight (its rows are kept)."""
        self.status = JobStatus.STOPPED

    def resume(self) -> None:
        """Score the remaining rows (a no-op unless :attr:`resumable`)."""
        if self.resumable:
            self.status, self.error = JobStatus.RUNNING, None

    def scored_records(self, *, only: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        """The records scored so far, in row order (those for which ``only(record)`` holds, when given)."""
        out = [self.records[i] for i in sorted(self.records)]
        return [r for r in out if only(r)] if only is not None else out

    def summary(self, records: Sequence[dict[str, Any]], cache_key: bool = False) -> tuple[dict, list]:
        """:func:`core.evaluation.report.summarize` of ``records`` (a subset of this job's), cached per
        (:attr:`version`, ``cache_key``) so redrawing is cheap; ``cache_key`` names the subset."""
        key = (self.version, cache_key)
        if self._summary is not None and self._summary[0] == key:
            return self._summary[1]
        result = summarize(records, resolve_detectors(self.spec.detectors))
        self._summary = (key, result)
        return result

    # -- running ------------------------------------------------------------------------------------------

    def prepare(self, handle: ModelHandle, lengths: Sequence[int] | None = None) -> None:
        """Resolve the detectors and plan the batches (once; every row is validated against the model).

        Args:
            lengths: the rows' :func:`~core.evaluation.data.prompt_lengths` when the caller has them already.

        Raises:
            ValueError: another model than the job's, an unknown detector, or a row that does not fit
                (:class:`~core.evaluation.data.DataError`, by row number). The job is then ``FAILED``; a caller
                that can switch models back should check :attr:`JobSpec.model` first and :meth:`stop` instead.
        """
        try:
            if handle.info.name != self.spec.model:
                raise ValueError(f"this run was started with {self.spec.model}, not {handle.info.name}")
            detectors = resolve_detectors(self.spec.detectors)
            if self.spec.kind == CONFLICT:  # no labels to fit on
                detectors = {n: d for n, d in detectors.items() if not (d.needs_fit and d.features is not None)}
            with self._lock:
                self._detectors = detectors
                if self.batches is None:
                    if lengths is None:
                        lengths = prompt_lengths(handle, self.rows, self.spec.settings)
                    self.batches = plan_batches(lengths, self.spec.batch_size, self.spec.settings.max_new_tokens)
        except ValueError as exc:
            self.status, self.error = JobStatus.FAILED, str(exc)
            raise

    def _claim(self) -> int | None:
        with self._lock:
            for b in range(len(self.batches or [])):
                if b not in self.claimed:
                    self.claimed.add(b)
                    return b
        return None

    def run(
        self,
        handle: ModelHandle,
        *,
        threshold: Threshold | None,
        threshold_source: str | None,
        on_batch: Callable[[EvaluationJob], None] | None = None,
        raise_errors: bool = False,
    ) -> None:
        """Score batches while the job is running and a batch is left; then mark it done if nothing is left.

        Each batch's records are stored before ``on_batch(job)`` is called. A batch that fails leaves the job
        ``FAILED`` with its ``error`` (rows scored before are kept) and is re-raised with ``raise_errors``.

        Raises:
            RuntimeError: :meth:`prepare` has not run.
        """
        if self.batches is None or self._detectors is None:
            raise RuntimeError("prepare(handle) the job before running it")
        while self.is_running:
            try:
                check_cancelled()  # a cancelled run (closed tab, newer run of the session) stops between batches
            except RunCancelled:
                self.stop()
                break
            b = self._claim()
            if b is None:
                break
            self._score_batch(handle, b, threshold, threshold_source, raise_errors)
            if on_batch is not None:
                on_batch(self)
        self.complete()

    def _score_batch(
        self, handle: ModelHandle, b: int, threshold: Threshold | None, source: str | None, raise_errors: bool
    ) -> None:
        batch = self.batches[b]  # type: ignore[index]
        rows = [self.rows[i] for i in batch]
        t0 = time.perf_counter()
        ok = False
        try:
            records = score_records(
                handle,
                rows,
                self.spec.settings,
                self._detectors or {},
                threshold=threshold,
                threshold_source=source,
                noise_sigmas=self.spec.sigmas,
                noise_seed=self.spec.noise_seed,
                free_parametric=True,  # every row's headline is the app's (it reads the answer without context)
                swap_test=self.spec.swap_test,
            )
            with self._lock:
                for i, rec in zip(batch, records):
                    self.records[i] = rec
                self.seconds += time.perf_counter() - t0
                self.version += 1
            ok = True
        except RunCancelled:  # cancelled at a token: the batch goes back unscored, the job can be resumed
            self.status = JobStatus.STOPPED
        except Exception as exc:
            logger.exception("evaluation batch failed")
            self.status, self.error = JobStatus.FAILED, f"{type(exc).__name__}: {exc}"
            if raise_errors:
                raise
        finally:
            with self._lock:
                (self.finished.add if ok else self.claimed.discard)(b)

    def complete(self) -> None:
        """Mark a running job ``DONE`` once every batch's records are stored."""
        with self._lock:
            if self.is_running and self.batches is not None and len(self.finished) == len(self.batches):
                self.status = JobStatus.DONE

    def wait_in_flight(self, timeout_s: float = 900.0, poll_s: float = 0.25) -> bool:
        """Wait for batches another thread is still scoring; ``True`` when none is left in flight."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(poll_s)
        return not self.in_flight


def any_busy(jobs: Sequence[EvaluationJob | None]) -> bool:
    """Whether any of ``jobs`` is running or finishing a batch (then no other run may start)."""
    return any(job is not None and job.busy for job in jobs)
