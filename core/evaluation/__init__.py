"""Evaluating detectors on labeled data, calibrating RePCS' τ, and robustness to logit noise.

Modules, one job each:

* :mod:`~core.evaluation.data` — labeled and conflict-set CSVs: parsing, strict validation (:class:`DataError`
  names the row and column), behavioral labels, stratified samples;
* :mod:`~core.evaluation.scoring` — rows → JSON-ready records: one batched dual-path run per batch, then every
  chosen detector per row;
* :mod:`~core.evaluation.report` — detection metrics per detector (fitted ones out of fold) and the report;
* :mod:`~core.evaluation.scheduler` — :class:`EvaluationJob`: a run scored batch by batch that can be stopped,
  resumed or discarded without losing rows (the Evaluate page and the CLI);
* :mod:`~core.evaluation.evaluate` — :func:`evaluate_rows`, the whole run of ``python -m core evaluate``;
* :mod:`~core.evaluation.calibration` — τ on chosen clean rows, held-out FPR/FNR and the PAC n;
* :mod:`~core.evaluation.length_rates` — FPR/FNR per answer-length bucket with Wilson intervals;
* :mod:`~core.evaluation.robustness` — the RePCS Table IV AUC-per-σ table;
* :mod:`~core.evaluation.behavior` — behavior as ground truth: the answer matcher, read / recalled labels, every
  detector's AUC against them and the headline verdict's agreement;
* :mod:`~core.evaluation.conflict` / :mod:`~core.evaluation.conflict_sources` — the builder of
  ``python -m core conflict`` (a knowledge-conflict set labeled by the model's own answers) and its inputs.
"""

from core.evaluation.calibration import (
    DEFAULT_ALPHA,
    DEFAULT_EPSILON,
    DEFAULT_FRACTION,
    CalibrationReport,
    calibrate,
    calibrate_records,
    check_threshold,
)
from core.evaluation.data import (
    CONFIRMED_COLUMN,
    LABELS,
    ConflictRow,
    DataError,
    LabeledRow,
    Row,
    label_confirmed,
    parse_conflict_csv,
    parse_labeled_bytes,
    parse_labeled_csv,
    prompt_lengths,
    read_conflict_csv,
    read_labeled_csv,
    stratified_sample,
)
from core.evaluation.evaluate import evaluate_rows
from core.evaluation.report import build_report, detector_metrics, summarize
from core.evaluation.robustness import DEFAULT_SIGMAS, robustness_table
from core.evaluation.scheduler import CONFLICT, LABELED, EvaluationJob, JobSpec, JobStatus, any_busy
from core.evaluation.scoring import answer_follows, record_for, resolve_detectors, score_records

__all__ = [
    "CONFIRMED_COLUMN",
    "CONFLICT",
    "DEFAULT_ALPHA",
    "DEFAULT_EPSILON",
    "DEFAULT_FRACTION",
    "DEFAULT_SIGMAS",
    "LABELED",
    "LABELS",
    "CalibrationReport",
    "ConflictRow",
    "DataError",
    "EvaluationJob",
    "JobSpec",
    "JobStatus",
    "LabeledRow",
    "Row",
    "answer_follows",
    "any_busy",
    "build_report",
    "calibrate",
    "calibrate_records",
    "check_threshold",
    "detector_metrics",
    "evaluate_rows",
    "label_confirmed",
    "parse_conflict_csv",
    "parse_labeled_bytes",
    "parse_labeled_csv",
    "prompt_lengths",
    "read_conflict_csv",
    "read_labeled_csv",
    "record_for",
    "resolve_detectors",
    "robustness_table",
    "score_records",
    "stratified_sample",
    "summarize",
]
