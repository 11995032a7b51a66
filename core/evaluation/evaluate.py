"""Evaluate detectors on a labelled CSV (``query,context,label``; label ``memorized`` or ``grounded``).

Files are validated strictly before any model call: a bad row is reported by number and column, and the
output file is written only when the whole run succeeds.

Pipeline (RePCS §V protocol: every detector scored on the same rows):

1. rows are scored in length-sorted batches by :func:`core.batch.score_batch` (one batched generate + one
   batched teacher-forced forward per batch; the same maths as :func:`core.engine.run_dual_path`);
2. every chosen detector scores each row's :class:`~core.result.DualPathResult` (plus its own model calls);
   detectors that need a fit (``Detector.features``) give per-row features instead;
3. :func:`summarize` computes, per detector, ROC-AUC with a bootstrap 95% CI, FPR at 95% TPR and
   Precision@10 (positive class *memorized*; each score oriented so that higher = more likely memorised), the
   cross-validated scores of the fitted detectors (stratified 5-fold, seed 42: no row is scored by a model
   trained on it), and the RePCS Table IV robustness table when noisy scores were requested.

The page drives the same functions batch by batch (:func:`score_records`), so a stopped run keeps its rows.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.engine.batch import DEFAULT_BATCH_SIZE, plan_batches, score_batch
from core.detectors import Detector, DetectorInput, available, resolve
from core.engine.dual_path import DualPathSettings, prepare_prompts
from core.maths.metrics import auc_bootstrap_ci, detection_metrics, roc_points
from core.model.loading import ModelHandle
from core.methods.repcs import GROUNDED, MEMORIZED, Threshold, threshold_for
from core.engine.result import DualPathResult
from core.evaluation.robustness import DEFAULT_SIGMAS

logger = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("query", "context", "label")
CONFLICT_COLUMNS = ("query", "context", "answer_context", "answer_memory")
LABELS = (MEMORIZED, GROUNDED)
MAX_ROWS = 5000
MAX_BYTES = 20 * 1024 * 1024
N_BOOT = 1000
SEED = 42
CONFIRMED_COLUMN = "parametric_correct"
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


class DataError(ValueError):
    """A labelled file is malformed; the message names the row and the column."""


@dataclass
class LabelledRow:
    row: int  # 1-based data row number (the header is row 0)
    query: str
    context: str
    label: str
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class ConflictRow:
    """A row of a conflict set: the context contradicts a well-known fact.

    ``answer_context`` is what the context says; ``answer_memory`` the well-known fact.
    """

    row: int
    query: str
    context: str
    answer_context: str
    answer_memory: str
    extra: dict[str, str] = field(default_factory=dict)


def _reader(text: str, required: Sequence[str]) -> tuple[csv.DictReader, list[str]]:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    if not header:
        raise DataError(f"The file is empty: expected a header row with columns {', '.join(required)}.")
    missing = [c for c in required if c not in header]
    if missing:
        raise DataError(f"Missing column(s) {', '.join(missing)} in the header (found: {', '.join(header)}).")
    reader.fieldnames = header
    return reader, header


def _values(number: int, raw: dict[str, Any], nonempty: Sequence[str]) -> dict[str, str]:
    if None in raw:
        raise DataError(f"Row {number}: more fields than columns in the header (a stray comma or quote?).")
    values = {k: (v or "") for k, v in raw.items()}
    for column in nonempty:
        if not values[column].strip():
            raise DataError(f"Row {number}, column '{column}': empty.")
    return values


def parse_labelled_csv(text: str, *, max_rows: int = MAX_ROWS) -> list[LabelledRow]:
    """Parse and validate labelled rows.

    Raises:
        DataError: missing columns, an empty query/context, an unknown label, too many rows, or no rows.
    """
    reader, _ = _reader(text, REQUIRED_COLUMNS)
    rows: list[LabelledRow] = []
    for number, raw in enumerate(reader, start=1):
        if number > max_rows:
            raise DataError(f"Too many rows: the limit is {max_rows:,}.")
        values = _values(number, raw, ("query", "context"))
        label = values["label"].strip().lower()
        if label not in LABELS:
            raise DataError(
                f"Row {number}, column 'label': {values['label']!r} is not one of {', '.join(LABELS)}."
            )
        extra = {k: v for k, v in values.items() if k not in REQUIRED_COLUMNS}
        rows.append(LabelledRow(number, values["query"], values["context"], label, extra))
    if not rows:
        raise DataError("The file has a header but no data rows.")
    return rows


def parse_conflict_csv(text: str, *, max_rows: int = MAX_ROWS) -> list[ConflictRow]:
    """Parse and validate a conflict set (``query,context,answer_context,answer_memory``; all non-empty).

    Raises:
        DataError: as :func:`parse_labelled_csv`, naming the row and column.
    """
    reader, _ = _reader(text, CONFLICT_COLUMNS)
    rows: list[ConflictRow] = []
    for number, raw in enumerate(reader, start=1):
        if number > max_rows:
            raise DataError(f"Too many rows: the limit is {max_rows:,}.")
        v = _values(number, raw, CONFLICT_COLUMNS)
        extra = {k: x for k, x in v.items() if k not in CONFLICT_COLUMNS}
        rows.append(ConflictRow(number, v["query"], v["context"], v["answer_context"], v["answer_memory"], extra))
    if not rows:
        raise DataError("The file has a header but no data rows.")
    return rows


def decode_csv_bytes(data: bytes, *, name: str = "the file", max_bytes: int = MAX_BYTES) -> str:
    """Size-check and decode uploaded bytes as UTF-8 (a BOM is allowed).

    Raises:
        DataError: over ``max_bytes``, or not UTF-8 (the message gives the byte offset).
    """
    if len(data) > max_bytes:
        raise DataError(f"{name} is {len(data) / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.1f} MB.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{name} is not UTF-8 text (byte {exc.start}).") from exc


def parse_labelled_bytes(
    data: bytes, *, name: str = "the file", max_bytes: int = MAX_BYTES, max_rows: int = MAX_ROWS
) -> list[LabelledRow]:
    """Validate an uploaded labelled CSV (size, encoding, every row) — all or nothing."""
    return parse_labelled_csv(decode_csv_bytes(data, name=name, max_bytes=max_bytes), max_rows=max_rows)


def _read_text(path: str | Path) -> str:
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DataError(f"Cannot read {path}: {exc.strerror}") from exc
    if size > MAX_BYTES:
        raise DataError(f"{path} is {size / 1e6:.1f} MB; the limit is {MAX_BYTES / 1e6:.0f} MB.")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text (byte {exc.start}).") from exc


def read_labelled_csv(path: str | Path, *, max_rows: int = MAX_ROWS) -> list[LabelledRow]:
    """Read a labelled CSV file (UTF-8, size-limited) and validate it."""
    return parse_labelled_csv(_read_text(path), max_rows=max_rows)


def read_conflict_csv(path: str | Path, *, max_rows: int = MAX_ROWS) -> list[ConflictRow]:
    """Read a conflict-set CSV file (UTF-8, size-limited) and validate it."""
    return parse_conflict_csv(_read_text(path), max_rows=max_rows)


def check_rows_fit(handle: ModelHandle, rows: Sequence[LabelledRow | ConflictRow], settings: DualPathSettings) -> None:
    """Validate every row's prompts against the model (budget etc.) before any generation."""
    for r in rows:
        try:
            prepare_prompts(handle, r.query, r.context, settings)
        except ValueError as exc:
            raise DataError(f"Row {r.row}, column 'context': {exc}") from exc


# ----------------------------------------------------------------------------------------------------------
# Behavioural labels and the conflict set


def parse_flag(value: Any) -> bool | None:
    """``true``/``false`` (also 1/0, yes/no) → bool; anything else → ``None``."""
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def label_confirmed(label: str, extra: dict[str, Any]) -> bool | None:
    """Whether a row's label is confirmed by the model's behaviour (``parametric_correct`` column).

    A *memorized* row is confirmed when the parametric path (no context) already gives the expected answer; a
    *grounded* row when it does not. ``None`` when the column is missing or unreadable.
    """
    flag = parse_flag(extra.get(CONFIRMED_COLUMN, extra.get(f"extra.{CONFIRMED_COLUMN}", "")))
    if flag is None:
        return None
    return flag if label == MEMORIZED else not flag


def answer_follows(answer: str, answer_context: str, answer_memory: str) -> str:
    """Which source an answer repeats: ``"context"``, ``"memory"``, ``"both"`` or ``"neither"``
    (case-insensitive containment of each expected answer)."""
    text = answer.casefold()
    ctx = bool(answer_context.strip()) and answer_context.strip().casefold() in text
    mem = bool(answer_memory.strip()) and answer_memory.strip().casefold() in text
    return "both" if ctx and mem else "context" if ctx else "memory" if mem else "neither"


# ----------------------------------------------------------------------------------------------------------
# Scoring


def resolve_detectors(names: Sequence[str] | None) -> dict[str, Detector]:
    """The registered detectors for ``names`` (default ``["repcs"]``), in the given order.

    ``min_k_<k>`` / ``min_kpp_<k>`` exist for any 1 ≤ k ≤ 100.

    Raises:
        ValueError: an unknown name (the message lists the available ones).
    """
    return {d.name: d for d in resolve(list(names or ["repcs"]))}


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def record_for(
    handle: ModelHandle,
    result: DualPathResult,
    settings: DualPathSettings,
    detectors: dict[str, Detector],
    meta: dict[str, Any],
) -> dict[str, Any]:
    """One JSON-ready row record: the run's summary, every detector's raw score (``None`` + an entry in
    ``errors`` when a detector fails on this row) and, for fitted detectors, their per-row features."""
    inp = DetectorInput(handle=handle, result=result, settings=settings)
    scores: dict[str, float | None] = {}
    features: dict[str, list[float]] = {}
    errors: dict[str, str] = {}
    for name, det in detectors.items():
        try:
            if det.needs_fit and det.features is not None:
                x = np.asarray(det.features(inp), dtype=np.float64).ravel()
                if not np.all(np.isfinite(x)):
                    raise ValueError("non-finite features")
                features[name] = x.tolist()
                scores[name] = None  # filled by summarize() from the other folds
            else:
                value = _finite(det.score(inp))
                if value is None:
                    raise ValueError("non-finite score")
                scores[name] = value
        except Exception as exc:  # noqa: BLE001 - one detector failing on one row must not lose the run
            logger.warning("detector %s failed on row %s: %s", name, meta.get("row"), exc)
            scores[name] = None
            errors[name] = f"{type(exc).__name__}: {exc}"
    record: dict[str, Any] = {
        **{k: v for k, v in meta.items() if k != "extra"},
        "query": result.query,
        "context": result.context,
        "repcs_score": result.repcs_score,
        "verdict": result.verdict,
        "rag_answer": result.retrieval.answer,
        "parametric_answer": result.parametric.answer,
        "n_tokens": result.n_tokens,
        "rag_finish": result.retrieval.finish,
        "max_abs_log_ratio": result.max_abs_log_ratio,
        "scores": scores,
    }
    if features:
        record["features"] = features
    if errors:
        record["errors"] = errors
    if "noisy_repcs" in result.extras:
        noisy = result.extras["noisy_repcs"]
        record["noisy_z"] = {"sigma": list(noisy["sigma"]), "z": list(noisy["z"])}
    for k, v in (meta.get("extra") or {}).items():
        record[f"extra.{k}"] = v
    return record


def _meta(row: LabelledRow | ConflictRow) -> dict[str, Any]:
    if isinstance(row, LabelledRow):
        return {"row": row.row, "label": row.label, "extra": row.extra}
    return {"row": row.row, "answer_context": row.answer_context, "answer_memory": row.answer_memory, "extra": row.extra}


def score_records(
    handle: ModelHandle,
    rows: Sequence[LabelledRow | ConflictRow],
    settings: DualPathSettings,
    detectors: dict[str, Detector],
    *,
    threshold: Threshold | None = None,
    threshold_source: str | None = None,
    noise_sigmas: Sequence[float] = (),
    noise_seed: int = 0,
    free_parametric: bool = False,
) -> list[dict[str, Any]]:
    """Score one batch of rows (one :func:`core.batch.score_batch` call) and return their records.

    Conflict rows also get ``follows`` (which source the retrieval answer repeats) and, with
    ``free_parametric``, ``parametric_follows``.
    """
    if not rows:
        return []
    results = score_batch(
        handle, [(r.query, r.context) for r in rows], settings, threshold=threshold,
        threshold_source=threshold_source, free_parametric=free_parametric, noise_sigmas=noise_sigmas,
        noise_seed=noise_seed,
    )
    records = []
    for r, res in zip(rows, results):
        rec = record_for(handle, res, settings, detectors, _meta(r))
        if isinstance(r, ConflictRow):
            rec["follows"] = answer_follows(res.retrieval.answer, r.answer_context, r.answer_memory)
            if free_parametric:
                rec["parametric_follows"] = answer_follows(res.parametric.answer, r.answer_context, r.answer_memory)
        records.append(rec)
    return records


# ----------------------------------------------------------------------------------------------------------
# Metrics


def _labels(records: Sequence[dict[str, Any]]) -> np.ndarray:
    return np.array([1 if r.get("label") == MEMORIZED else 0 for r in records], dtype=int)


def detector_metrics(
    labels: np.ndarray, raw: Sequence[float | None], det: Detector, *, n_boot: int = N_BOOT, seed: int = SEED
) -> dict[str, Any]:
    """AUC, bootstrap 95% CI, FPR@95%TPR, Precision@10 and the ROC points of one detector over the rows with
    a score. Metrics are ``None`` (with a ``note``) when the scored rows miss a class."""
    y = np.asarray(labels, dtype=int)
    values = np.array([np.nan if v is None else float(v) for v in raw], dtype=np.float64)
    keep = np.isfinite(values)
    entry: dict[str, Any] = {
        "label": det.label,
        "higher_means": det.higher_means,
        "cost": det.cost,
        "source": det.source,
        "n": int(keep.sum()),
        "auc": None,
        "auc_ci": None,
        "fpr_at_95tpr": None,
        "precision_at_10": None,
    }
    yk = y[keep]
    if yk.size == 0 or yk.min() == yk.max():
        entry["note"] = "needs scored rows of both labels"
        return entry
    oriented = np.array([det.oriented(v) for v in values[keep]])
    entry.update(detection_metrics(yk, oriented))
    entry["auc_ci"] = list(auc_bootstrap_ci(yk, oriented, n_boot=n_boot, seed=seed))
    fpr, tpr, _ = roc_points(yk, oriented)
    entry["roc"] = {"fpr": fpr.tolist(), "tpr": tpr.tolist()}
    return entry


def summarize(
    records: Sequence[dict[str, Any]],
    detectors: dict[str, Detector],
    *,
    n_boot: int = N_BOOT,
    seed: int = SEED,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Metrics of every detector over labelled records, and the records with the fitted detectors' scores.

    Fitted detectors (``features``) are scored by :func:`core.detectors_fitted.cross_validated_scores` over
    the records that have features: each row's score comes from a model trained on the other folds.

    Returns:
        ``(summary, rows)``: ``summary = {"detectors": {name: {...}}, "robustness": [...] | None}``; ``rows``
        are shallow copies of ``records`` whose ``scores`` include the cross-validated values.
    """
    from core.detectors.fitted import cross_validated_scores

    rows = [{**r, "scores": dict(r.get("scores", {}))} for r in records]
    y = _labels(rows)
    out: dict[str, Any] = {}
    for name, det in detectors.items():
        note = None
        if det.needs_fit and det.features is not None:
            idx = [i for i, r in enumerate(rows) if name in r.get("features", {})]
            try:
                if not idx:
                    raise ValueError("no row has features")
                probs = cross_validated_scores(np.array([rows[i]["features"][name] for i in idx]), y[idx], seed=seed)
                for i, p in zip(idx, probs):
                    rows[i]["scores"][name] = float(p)
            except ValueError as exc:
                note = f"not fitted: {exc}"
        entry = detector_metrics(y, [r["scores"].get(name) for r in rows], det, n_boot=n_boot, seed=seed)
        if det.needs_fit and det.features is not None:
            entry["cross_validated"] = "stratified 5-fold, seed 42 (out-of-fold probabilities)"
        if note:
            entry["note"] = note
        errors = [r["errors"][name] for r in rows if name in r.get("errors", {})]
        if errors:
            entry["errors"] = len(errors)
            entry["first_error"] = errors[0]
        out[name] = entry
    return {"detectors": out, "robustness": robustness_summary(rows, n_boot=n_boot, seed=seed)}, rows


def robustness_summary(records: Sequence[dict[str, Any]], *, n_boot: int = N_BOOT, seed: int = SEED) -> list[dict[str, Any]] | None:
    """RePCS Table IV over the records that carry noisy scores (``None`` when none do or a class is missing)."""
    from core.evaluation.robustness import robustness_table

    noisy = [r for r in records if r.get("noisy_z")]
    if not noisy:
        return None
    sigmas = noisy[0]["noisy_z"]["sigma"]
    noisy = [r for r in noisy if r["noisy_z"]["sigma"] == sigmas]
    y = _labels(noisy)
    if y.min() == y.max():
        return None
    z = {float(s): np.array([r["noisy_z"]["z"][j] for r in noisy], dtype=np.float64) for j, s in enumerate(sigmas)}
    return robustness_table(y, z, n_boot=n_boot, seed=seed)


# ----------------------------------------------------------------------------------------------------------
# The whole run


def stratified_sample(rows: Sequence[LabelledRow], n: int, *, seed: int = SEED) -> list[LabelledRow]:
    """``n`` rows keeping the label proportions (largest remainders; at least one row of each present label),
    drawn with a seeded generator and returned in file order."""
    if n >= len(rows):
        return list(rows)
    if n < 1:
        raise ValueError(f"sample size must be >= 1, got {n}")
    by_label = {lab: [i for i, r in enumerate(rows) if r.label == lab] for lab in LABELS}
    by_label = {lab: idx for lab, idx in by_label.items() if idx}
    n = max(n, len(by_label))
    share = {lab: n * len(idx) / len(rows) for lab, idx in by_label.items()}
    k = {lab: max(1, int(share[lab])) for lab in by_label}
    while sum(k.values()) < n:
        lab = max((x for x in k if k[x] < len(by_label[x])), key=lambda x: share[x] - k[x])
        k[lab] += 1
    while sum(k.values()) > n:
        k[max((x for x in k if k[x] > 1), key=lambda x: k[x] - share[x])] -= 1
    rng = np.random.default_rng(seed)
    chosen = [i for lab, idx in by_label.items() for i in rng.choice(idx, size=k[lab], replace=False).tolist()]
    return [rows[i] for i in sorted(chosen)]


def build_report(
    model: str,
    settings: DualPathSettings,
    threshold: Threshold | None,
    threshold_source: str | None,
    summary: dict[str, Any],
    rows: list[dict[str, Any]],
) -> dict[str, Any]:
    """The JSON document of ``python -m core evaluate`` (also the Evaluate page's JSON download)."""
    return {
        "n": len(rows),
        "model": model,
        "settings": settings.to_dict(),
        "threshold": None if threshold is None else float(threshold.tau),
        "threshold_source": threshold_source,
        "positive_class": MEMORIZED,
        "detectors": summary["detectors"],
        "robustness": summary["robustness"],
        "rows": rows,
    }


def evaluate_rows(
    handle: ModelHandle,
    rows: list[LabelledRow],
    settings: DualPathSettings,
    *,
    threshold: Threshold | None = None,
    detectors: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    noise_sigmas: Sequence[float] = DEFAULT_SIGMAS,
    noise_seed: int = 0,
    n_boot: int = N_BOOT,
    seed: int = SEED,
) -> dict[str, Any]:
    """Score every row with the chosen detectors and compute their detection metrics.

    Rows run in batches (:func:`core.batch.score_batch`: per batch one generate + one teacher-forced forward,
    ``free_parametric=False``); every detector scores each row from that result (plus its own extra model
    calls). Metrics use the positive class *memorized* and each detector's score oriented so that higher =
    more likely memorised (RePCS: −Z).

    Args:
        detectors: names from :func:`core.detectors.available` (default: ``["repcs"]``).
        progress: called once per row, ``progress(done, total)``, as each batch finishes.
        noise_sigmas: σ values for the RePCS Table IV robustness table (``robustness`` in the output; default
            0, 0.02, 0.05, 0.10 — cheap: a few log-softmaxes per row; ``()`` to skip).

    Returns:
        ``{"n", "model", "settings", "threshold", "threshold_source", "positive_class", "detectors": {name:
        {auc, auc_ci, fpr_at_95tpr, precision_at_10, n, label, higher_means, cost, source, roc}},
        "robustness", "rows": [...]}``; each row has ``scores`` (raw, per detector; fitted detectors:
        out-of-fold P(memorised)).
    """
    chosen = resolve_detectors(detectors)
    check_rows_fit(handle, rows, settings)
    labels = {r.label for r in rows}
    if labels != set(LABELS):
        raise DataError(f"Evaluation needs rows of both labels ({', '.join(LABELS)}); this file only has {', '.join(sorted(labels))}.")
    if threshold is None:
        threshold, source = threshold_for(handle.info.name)
    else:
        source = "given"
    records: list[dict[str, Any] | None] = [None] * len(rows)
    lengths = [len(prepare_prompts(handle, r.query, r.context, settings).retrieval.ids) for r in rows]
    done = 0
    for batch in plan_batches(lengths, batch_size, settings.max_new_tokens):
        batch_records = score_records(
            handle, [rows[i] for i in batch], settings, chosen, threshold=threshold, threshold_source=source,
            noise_sigmas=noise_sigmas, noise_seed=noise_seed,
        )
        for i, rec in zip(batch, batch_records):
            records[i] = rec
            done += 1
            if progress is not None:
                progress(done, len(rows))
    summary, out_rows = summarize([r for r in records if r is not None], chosen, n_boot=n_boot, seed=seed)
    return build_report(handle.info.name, settings, threshold, source, summary, out_rows)


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> None:
    """Write JSON to ``path`` via a temporary file in the same folder (no half-written output)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, ensure_ascii=False, allow_nan=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
