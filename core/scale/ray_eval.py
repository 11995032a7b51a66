"""``python -m core evaluate DATA.csv --ray …``: the evaluation's scoring on Ray actors, the rest as today.

Same pipeline as :func:`core.evaluation.evaluate.evaluate_rows`, with step 2 on the cluster:

1. on the driver, with the weightless :func:`core.scale.spec.planning_handle`: detectors resolved, every row
   validated against the model's token budget (:func:`core.evaluation.data.prompt_lengths`), both labels
   checked, τ resolved, and the length-sorted batches planned by
   :meth:`core.evaluation.scheduler.EvaluationJob.prepare` — the same batches as the local run;
2. the rows go into a Ray Dataset (one block per batch, with each row's index) and ``map_batches`` runs them
   on actors that each load the model once and call :func:`core.evaluation.scoring.score_records` — the
   local path's batched per-row scorer (one padded generate + one padded teacher-forced forward per batch,
   then every detector) — and return one JSON record per row (:mod:`core.scale.pool`);
3. back on the driver, the records are put back in row order (each exactly once), and
   :func:`core.evaluation.report.summarize` / :func:`~core.evaluation.report.build_report` compute the
   metrics, bootstrap CIs, out-of-fold fitted detectors and the robustness table exactly as today.

Same batches on the same kind of device give the same numbers: the report equals the local one, plus a
``"ray"`` entry (workers, retries, throughput).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from core.engine import DualPathSettings
from core.engine.threshold import Threshold
from core.evaluation.data import LabeledRow
from core.evaluation.evaluate import EvaluateOptions, plan_job
from core.evaluation.report import build_report, summarize
from core.evaluation.scheduler import EvaluationJob
from core.evaluation.scoring import resolve_detectors, score_records
from core.model.handle import ModelHandle
from core.model.progress import Progress
from core.scale.pool import RunStats, run_items
from core.scale.spec import ModelSpec, planning_handle


class EvaluateHandler:
    """The actors' side: one batch of labeled rows → their records (:func:`score_records`), in order.

    Args:
        handle: the actor's model (loaded once per actor).
        config: ``{"settings", "detectors", "threshold", "threshold_source", "sigmas", "noise_seed", "swap_test"}``.
    """

    def __init__(self, handle: ModelHandle, config: dict[str, Any]) -> None:
        self.handle = handle
        self.settings = DualPathSettings.from_dict(config["settings"])
        self.detectors = resolve_detectors(config["detectors"])
        self.threshold = Threshold.from_dict(config["threshold"]) if config.get("threshold") else None
        self.threshold_source = config.get("threshold_source")
        self.sigmas = [float(s) for s in config.get("sigmas", ())]
        self.noise_seed = int(config.get("noise_seed", 0))
        self.swap_test = bool(config.get("swap_test", False))

    def __call__(self, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return score_records(
            self.handle,
            [LabeledRow(**p) for p in payloads],
            self.settings,
            self.detectors,
            threshold=self.threshold,
            threshold_source=self.threshold_source,
            noise_sigmas=self.sigmas,
            noise_seed=self.noise_seed,
            free_parametric=True,  # the headline is the app's (as the local run)
            swap_test=self.swap_test,
        )


def score_job_on_ray(
    spec: ModelSpec,
    job: EvaluationJob,
    *,
    threshold: Threshold | None,
    threshold_source: str | None,
    planner: ModelHandle | None = None,
    lengths: Sequence[int] | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    monitor: Any = None,
) -> RunStats:
    """Score every row of a labeled :class:`EvaluationJob` on the connected Ray cluster and store the records in it.

    The job is planned with :meth:`EvaluationJob.prepare` on ``planner`` (the local run's batches), each batch is
    scored by an actor, and the records land in ``job.records`` by row index; the job is then ``DONE``, exactly
    as if :meth:`EvaluationJob.run` had scored it here (the Evaluate page shows it with the same tabs).

    Args:
        spec: the model each worker loads; ``planner``: the driver's handle of the same model (default:
            :func:`planning_handle` of ``spec``); ``lengths``: the rows' prompt lengths, when known.
        workers, progress, monitor: see :func:`evaluate_on_ray`.

    Returns:
        The run's :class:`RunStats`.

    Raises:
        ValueError: a row that does not fit (the job is then ``FAILED``); ClusterError: see :func:`evaluate_on_ray`.
    """
    planner = planner or planning_handle(spec)
    job.prepare(planner, lengths)  # the local run's batches, planned the same way
    planned = job.batches or []
    config = {
        "settings": job.spec.settings.to_dict(),
        "detectors": list(job.spec.detectors),
        "threshold": None if threshold is None else json.loads(threshold.to_json()),
        "threshold_source": threshold_source,
        "sigmas": list(job.spec.sigmas),
        "noise_seed": job.spec.noise_seed,
        "swap_test": job.spec.swap_test,
    }
    payloads = [[asdict(job.rows[i]) for i in batch] for batch in planned]
    records, stats = run_items("evaluate", spec, config, payloads, workers=workers, progress=progress, monitor=monitor)
    order = [i for batch in planned for i in batch]
    job.records = dict(zip(order, records))
    job.seconds += stats.seconds
    job.version += 1
    job.claimed = set(range(len(planned)))
    job.finished = set(range(len(planned)))
    job.complete()
    return stats


def evaluate_on_ray(
    spec: ModelSpec,
    rows: list[LabeledRow],
    settings: DualPathSettings,
    options: EvaluateOptions | None = None,
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    monitor: Any = None,
    planner: ModelHandle | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """:func:`core.evaluation.evaluate.evaluate_rows` with the scoring on the connected Ray cluster.

    Call :func:`core.scale.cluster.connect` first. Arguments as ``evaluate_rows`` (``options``, or any of its
    fields as keywords), plus:

    Args:
        spec: the model each worker loads (:meth:`ModelSpec.load`).
        workers: actors (default: one per GPU, else one per CPU; :func:`core.scale.pool.placement`).
        progress: ``progress(done, total)`` in rows, as results arrive.
        monitor: a :func:`core.scale.pool.new_monitor` handle (tests reach the actors through it).
        planner: the driver's handle for validation and planning (default: :func:`planning_handle` of
            ``spec``; any handle of the same model gives the same plan).

    Returns:
        ``evaluate_rows``' report plus ``"ray"``: :meth:`core.scale.pool.RunStats.to_dict`.

    Raises:
        ValueError / DataError: as ``evaluate_rows``; :class:`core.scale.cluster.ClusterError`: the cluster
        cannot run it (no GPUs for ``--device cuda``, too many workers).
    """
    o = EvaluateOptions.of(options, fields)
    planner = planner or planning_handle(spec)
    job, chosen, lengths, threshold, source = plan_job(planner, rows, settings, o)
    stats = score_job_on_ray(
        spec,
        job,
        threshold=threshold,
        threshold_source=source,
        planner=planner,
        lengths=lengths,
        workers=workers,
        progress=progress,
        monitor=monitor,
    )
    summary, out_rows = summarize(job.scored_records(), chosen, n_boot=o.n_boot, seed=o.seed)
    report = build_report(planner.info.name, settings, threshold, source, summary, out_rows)
    report["ray"] = stats.to_dict()
    return report
