"""A model to study, in a notebook: :class:`Lab` runs and evaluates it, and says what it is calibrated with.

The lab's verbs are about the model over many inputs (:meth:`Lab.run`, :meth:`Lab.run_many`, :meth:`Lab.evaluate`)
or the model itself (:meth:`Lab.calibration`, :meth:`Lab.calibrate`); everything about one run's inputs is a method
of the run (:mod:`read_or_recall.run`; the rule for verbs: docs/notebook.md). Everything here calls :mod:`core`
(the engine, the methods, the evaluation) exactly as the pages and ``python -m core`` do; no number is computed a
second way. ``Lab()`` is the embedded model (offline, from its PyPI package); ``Lab("path/or/id")`` any model the
app loads (a folder, a GGUF file, a packaged model's shortcut, a hub id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from read_or_recall.results import Calibration, Evaluation
from read_or_recall.run import Run

if TYPE_CHECKING:
    import pandas as pd

    from core.engine.settings import DualPathSettings
    from core.engine.threshold import Threshold
    from core.model.handle import ModelHandle


class Lab:
    """One loaded model and the run settings used by default.

    Args:
        model: ``None`` (the embedded SmolLM2-135M-Instruct), a local folder, a GGUF file, a packaged model's
            shortcut (``"gemma3-270m"``) or a Hugging Face id (fetched only if the hub is reachable and
            ``HF_HUB_OFFLINE`` is not set).
        device, revision: as ``--device`` / ``--revision`` of the command line (default: CUDA when available).
        settings: the default :class:`~core.engine.settings.DualPathSettings` of :meth:`run` (default: the app's).
        handle: an already-loaded :class:`~core.model.handle.ModelHandle` instead of ``model`` (e.g. a tiny model
            in a test).

    Raises:
        core.model.handle.ModelLoadError: the model cannot be loaded (the message says why).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str | None = None,
        revision: str | None = None,
        settings: DualPathSettings | None = None,
        handle: ModelHandle | None = None,
    ) -> None:
        from core.engine.settings import DualPathSettings

        if handle is None:
            from core.model.loading import load_model

            handle = load_model(model, revision=revision, device=device)
        self.handle = handle
        self.settings = settings or DualPathSettings()
        self.settings.validate()

    @property
    def model(self) -> str:
        """The model's name, as every result and calibration file names it."""
        return self.handle.info.name

    @property
    def info(self) -> dict[str, Any]:
        """The model's facts: name, layers, heads, vocabulary, device, dtype, token budget."""
        return self.handle.info.to_dict()

    def __repr__(self) -> str:
        return f"<Lab {self.model}>"

    def _settings(self, settings: DualPathSettings | None, overrides: Mapping[str, Any]) -> DualPathSettings:
        chosen = dataclasses.replace(settings or self.settings, **overrides)
        chosen.validate()
        return chosen

    def run(
        self,
        query: str,
        context: str,
        *,
        settings: DualPathSettings | None = None,
        threshold: Threshold | None = None,
        swap: str | None = None,
        **overrides: Any,
    ) -> Run:
        """Both paths on one query and context: the run of the Dual Path page and of ``python -m core run``.

        Args:
            query, context: the user's text.
            settings: run settings (default: the lab's); ``overrides`` replace single fields
                (``max_new_tokens=32``, ``template="A"``, …).
            threshold: RePCS' τ to apply (default: the τ in force for the model).
            swap: when the swap test runs as part of the run (:mod:`core.engine.swap_verdict`): ``"auto"`` where
                context and memory agree on the answer span (a decided test then carries the verdict, the
                internals' own prediction in ``run.axes["internals"]``), ``"always"``, or ``"never"``; ``None``:
                the environment's ``READ_OR_RECALL_SWAP``, else ``"auto"``.

        Returns:
            A :class:`~read_or_recall.run.Run`: ``.verdict`` (the headline), ``.axes``, ``.span``,
            ``.detectors()``, ``.figure(name)`` and the verbs about this run (``.swap_test()``, ``.ablate(…)`` …).

        Raises:
            ValueError: empty or too long inputs, a setting out of range, or an unknown ``swap`` (nothing has run
                then).
        """
        from core.engine import run_dual_path
        from core.engine.swap import swap_test, with_swap_test
        from core.engine.swap_verdict import check_mode, default_mode, wants_swap

        swap = check_mode(default_mode() if swap is None else swap)
        chosen = self._settings(settings, overrides)
        result = run_dual_path(self.handle, query, context, chosen, threshold=threshold, record=True)
        if not wants_swap(result.head, swap):
            return Run(self, result)
        test = swap_test(self.handle, result)
        joined = with_swap_test(result, test)
        run = Run(self, joined)
        run.hold_swap_test(test)
        return run

    def run_many(
        self, pairs: Iterable[tuple[str, str]], *, settings: DualPathSettings | None = None, **overrides: Any
    ) -> list[Run]:
        """Many ``(query, context)`` pairs in padded batches (:func:`core.engine.score_rows`: one generate and one
        forward per batch), each with its headline. The parametric answers are generated too, as in :meth:`run`."""
        from core.engine import score_rows

        chosen = self._settings(settings, overrides)
        results = score_rows(self.handle, list(pairs), chosen, free_parametric=True)
        return [Run(self, r) for r in results if r is not None]

    # ---------------------------------------------------------------------------------------------------------
    # Evaluation

    def evaluate(
        self,
        data: pd.DataFrame | Sequence[Mapping[str, Any]],
        *,
        detectors: Sequence[str] | None = None,
        settings: DualPathSettings | None = None,
        progress: Callable[[int, int], None] | None = None,
        **options: Any,
    ) -> Evaluation:
        """Every row of ``data`` through the engine and the chosen detectors, as ``python -m core evaluate`` and the
        Evaluate page do — the same row loop (:class:`core.evaluation.scheduler.EvaluationJob`: padded batches,
        one generate and one forward each); each row also gets its headline (``verdict``, ``axes``) and RePCS'.

        Args:
            data: a DataFrame (or records) with ``query`` and ``context`` columns and, for the detection metrics,
                ``label`` (``memorized`` / ``grounded``); other columns ride along (``extra.<name>`` in the rows).
            detectors: registered names (default ``["repcs"]``; yours too, :func:`read_or_recall.register_detector`).
            progress: ``progress(done, total)`` as rows finish.
            options: :class:`core.evaluation.evaluate.EvaluateOptions` fields (``n_boot``, ``batch_size``,
                ``noise_sigmas``, ``swap_test``, …; labeled data only).

        Returns:
            An :class:`~read_or_recall.results.Evaluation`: ``.rows`` (a DataFrame, one row per input row),
            ``.metrics`` (per detector; labeled data), ``.figure(name)``.

        Raises:
            ValueError: a missing column, an empty text, an unknown detector, a bad label
                (:class:`core.evaluation.DataError` names the row and column).
        """
        import pandas as pd

        from core.evaluation import evaluate_rows

        frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame(list(data))
        labeled = "label" in frame.columns
        rows = _rows(frame, labeled)
        chosen = self._settings(settings, {})
        names = list(detectors or ["repcs"])
        if labeled:
            report = evaluate_rows(self.handle, rows, chosen, detectors=names, progress=progress, **options)
            return Evaluation(self.model, report)
        if options:
            raise ValueError(f"{sorted(options)}: these options need a label column (detection metrics).")
        return Evaluation(self.model, self._score(rows, chosen, names, progress))

    def _score(
        self, rows: list[Any], settings: DualPathSettings, names: list[str], progress: Callable[[int, int], None] | None
    ) -> dict[str, Any]:
        """Unlabeled rows through the evaluation's own job (its batches, its scoring; no metrics: no labels)."""
        from core.evaluation.scheduler import EvaluationJob, JobSpec

        spec = JobSpec("", "", tuple(r.row for r in rows), self.model, settings, tuple(names))
        job = EvaluationJob(spec, rows)
        job.prepare(self.handle)

        def on_batch(j: EvaluationJob) -> None:
            if progress is not None:
                progress(j.n_done, j.n_rows)

        job.run(self.handle, threshold=None, threshold_source=None, on_batch=on_batch, raise_errors=True)
        records = [{k: v for k, v in r.items() if k != "label"} for r in job.scored_records()]
        return {"n": len(rows), "model": self.model, "settings": settings.to_dict(), "detectors": {}, "rows": records}

    # ---------------------------------------------------------------------------------------------------------
    # Calibration

    def calibration(self) -> Calibration:
        """What this model is calibrated with: the headline's axes calibration and RePCS' τ in force. A model
        without its own axes calibration gets the verdict ``"uncalibrated"``; :attr:`Calibration.how` is the
        command that makes one (or :meth:`calibrate`)."""
        from read_or_recall.calibration import status

        return Calibration(status(self.handle))

    def calibrate(self, **options: Any) -> Calibration:
        """Calibrate this model with the engine's ``calibrate-model`` (:mod:`read_or_recall.calibration`:
        ``budget=``, ``progress=``, … as the engine takes them); every later run gets a calibrated headline.

        Returns:
            The model's :class:`~read_or_recall.results.Calibration` now, with the engine's ``report``.

        Raises:
            NotImplementedError: this engine has no ``calibrate-model``.
        """
        from read_or_recall.calibration import calibrate, status

        report = calibrate(self, **options)
        return Calibration(status(self.handle), report if isinstance(report, dict) else {"result": report})


def _rows(frame: pd.DataFrame, labeled: bool) -> list[Any]:
    """A DataFrame's rows as the evaluation's :class:`~core.evaluation.data.LabeledRow` (1-based numbers, as a
    file's), each checked as a file's row is (:func:`core.evaluation.data.record_rows`: a visible query and
    context, a known label; other columns ride along); what a file's parse would note (NUL characters removed,
    duplicate rows) is a warning.

    Raises:
        ValueError: a missing column; :class:`~core.evaluation.data.DataError` naming the row and column.
    """
    import warnings

    from core.evaluation.data import DataError, record_rows

    missing = [c for c in ("query", "context") if c not in frame.columns]
    if missing:
        raise ValueError(f"evaluate needs the columns query and context; missing: {', '.join(missing)}")
    if frame.empty:
        raise DataError("No rows to evaluate.")
    rows = record_rows(frame.to_dict("records"), labeled=labeled)
    for note in rows.notes:
        warnings.warn(note, UserWarning, stacklevel=3)
    return list(rows)
