"""Evaluate detectors on labeled rows: the whole run behind ``python -m core evaluate``.

Pipeline (RePCS §V protocol: every detector scored on the same rows):

1. every row is validated against the model before anything runs (:func:`core.evaluation.data.prompt_lengths`);
2. rows are scored in length-sorted batches (:class:`core.evaluation.scheduler.EvaluationJob`; per batch one
   batched generate + one batched teacher-forced forward, :func:`core.engine.batch.score_batch`, the same maths
   as :func:`core.engine.dual_path.run_dual_path`), and every chosen detector scores each row's result
   (:func:`core.evaluation.scoring.record_for`);
3. :func:`core.evaluation.report.summarize` computes the metrics per detector (fitted detectors out of fold)
   and :func:`core.evaluation.report.build_report` the JSON document.

The Evaluate page runs the same job batch by batch, so a stopped run keeps its rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.detectors.registry import Detector
from core.engine import DEFAULT_BATCH_SIZE, DualPathSettings
from core.engine.calibration_record import record_for
from core.engine.tau_resolution import tau_in_force
from core.engine.threshold import Threshold
from core.evaluation.data import LABELS, SEED, DataError, LabeledRow, prompt_lengths
from core.evaluation.report import N_BOOT, build_report, summarize
from core.evaluation.robustness import DEFAULT_SIGMAS
from core.evaluation.scheduler import EvaluationJob, JobSpec
from core.evaluation.scoring import resolve_detectors
from core.model.handle import ModelHandle
from core.model.progress import Progress


def plan_job(
    handle: ModelHandle,
    rows: list[LabeledRow],
    settings: DualPathSettings,
    options: EvaluateOptions,
) -> tuple[EvaluationJob, dict[str, Detector], list[int], Threshold | None, str]:
    """Step 1 of the pipeline, shared by the local run and the Ray run: detectors resolved, every row validated
    against the model's token budget, both labels checked, τ resolved, the job built (not yet prepared) — all
    as ``options`` say.

    ``handle`` may be weightless (only its tokenizer and facts are used).

    Returns:
        ``(job, the resolved detectors, prompt lengths, τ, τ's source)``.

    Raises:
        ValueError: an unknown detector; :class:`DataError` for a row that does not fit or a single label.
    """
    chosen = resolve_detectors(options.detectors)
    lengths = prompt_lengths(handle, rows, settings)
    labels = {r.label for r in rows}
    if labels != set(LABELS):
        raise DataError(
            f"Evaluation needs rows of both labels ({', '.join(LABELS)}); this file only has "
            f"{', '.join(sorted(labels))}."
        )
    record = record_for(handle, settings.template)  # the model's calibration record: its identity + template
    threshold, source = tau_in_force(handle.info.name, options.threshold, calibration=record)
    spec = JobSpec(
        dataset="",
        digest="",
        rows_key=tuple(r.row for r in rows),
        model=handle.info.name,
        settings=settings,
        detectors=tuple(chosen),
        sigmas=tuple(float(s) for s in options.noise_sigmas),
        batch_size=options.batch_size,
        noise_seed=options.noise_seed,
        swap_test=options.swap_test,
    )
    return EvaluationJob(spec, list(rows)), chosen, lengths, threshold, source


@dataclass(frozen=True)
class EvaluateOptions:
    """What an evaluation scores and how, the same for the local run and the Ray run.

    Attributes:
        threshold: τ to apply (default: the model's, :func:`core.engine.threshold.tau_in_force`).
        detectors: names from :func:`core.detectors.available` (default: ``["repcs"]``).
        batch_size: rows per padded batch.
        noise_sigmas: σ values for the RePCS Table IV robustness table (``robustness`` in the output; default
            0, 0.02, 0.05, 0.10 — cheap: a few log-softmaxes per row; ``()`` to skip).
        noise_seed: the run seed of the noise draws (:func:`core.maths.noise.row_seed`).
        n_boot, seed: the AUC bootstrap's resamples and seed.
        swap_test: run the swap test on every row too (``swap_test`` in each row; one more generation per row).
    """

    threshold: Threshold | None = None
    detectors: list[str] | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    noise_sigmas: Sequence[float] = DEFAULT_SIGMAS
    noise_seed: int = 0
    n_boot: int = N_BOOT
    seed: int = SEED
    swap_test: bool = False

    @classmethod
    def of(cls, options: EvaluateOptions | None, fields: dict[str, Any]) -> EvaluateOptions:
        """``options`` (default: the defaults) with ``fields`` given as keywords replacing theirs."""
        return dataclasses.replace(options or cls(), **fields)


def evaluate_rows(
    handle: ModelHandle,
    rows: list[LabeledRow],
    settings: DualPathSettings,
    options: EvaluateOptions | None = None,
    *,
    progress: Progress | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """Score every row with the chosen detectors and compute their detection metrics.

    Metrics use the positive class *memorized* and each detector's score oriented so that higher = more
    likely memorized (RePCS: −Z).

    Args:
        options: :class:`EvaluateOptions`; any of its fields may be given as a keyword instead (``n_boot=20``).
        progress: called once per row, ``progress(done, total)``, as each batch finishes.

    Returns:
        ``{"n", "model", "settings", "threshold", "threshold_source", "positive_class", "detectors": {name:
        {auc, auc_ci, fpr_at_95tpr, precision_at_10, n, label, higher_means, cost, source, roc}},
        "robustness", "rows": [...]}``; each row has ``scores`` (raw, per detector; fitted detectors:
        out-of-fold P(memorized)).

    Raises:
        ValueError: an unknown detector; :class:`DataError` for a row that does not fit or a single label.
    """
    o = EvaluateOptions.of(options, fields)
    job, chosen, lengths, threshold, source = plan_job(handle, rows, settings, o)
    job.prepare(handle, lengths)
    reported = 0

    def on_batch(j: EvaluationJob) -> None:
        nonlocal reported
        for done in range(reported + 1, j.n_done + 1):
            progress(done, j.n_rows)  # type: ignore[misc]
        reported = j.n_done

    job.run(
        handle, threshold=threshold, threshold_source=source, on_batch=on_batch if progress else None, raise_errors=True
    )
    summary, out_rows = summarize(job.scored_records(), chosen, n_boot=o.n_boot, seed=o.seed)
    return build_report(handle.info.name, settings, threshold, source, summary, out_rows)
