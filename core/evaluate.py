"""Evaluate detectors on a labelled CSV (``query,context,label``; label ``memorized`` or ``grounded``).

Files are validated strictly before any model call: a bad row is reported by number and column, and the
output file is written only when the whole run succeeds.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.engine import DualPathSettings, prepare_prompts, run_dual_path
from core.detectors import DetectorInput, available
from core.metrics import detection_metrics
from core.models import ModelHandle
from core.repcs import GROUNDED, MEMORIZED, Threshold

REQUIRED_COLUMNS = ("query", "context", "label")
LABELS = (MEMORIZED, GROUNDED)
MAX_ROWS = 5000
MAX_BYTES = 20 * 1024 * 1024


class DataError(ValueError):
    """A labelled file is malformed; the message names the row and the column."""


@dataclass
class LabelledRow:
    row: int  # 1-based data row number (the header is row 0)
    query: str
    context: str
    label: str
    extra: dict[str, str] = field(default_factory=dict)


def parse_labelled_csv(text: str, *, max_rows: int = MAX_ROWS) -> list[LabelledRow]:
    """Parse and validate labelled rows.

    Raises:
        DataError: missing columns, an empty query/context, an unknown label, too many rows, or no rows.
    """
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    if not header:
        raise DataError("The file is empty: expected a header row with columns query, context, label.")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise DataError(f"Missing column(s) {', '.join(missing)} in the header (found: {', '.join(header)}).")
    reader.fieldnames = header
    rows: list[LabelledRow] = []
    for number, raw in enumerate(reader, start=1):
        if number > max_rows:
            raise DataError(f"Too many rows: the limit is {max_rows:,}.")
        if None in raw:
            raise DataError(f"Row {number}: more fields than columns in the header (a stray comma or quote?).")
        values = {k: (v or "") for k, v in raw.items()}
        for column in ("query", "context"):
            if not values[column].strip():
                raise DataError(f"Row {number}, column '{column}': empty.")
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


def read_labelled_csv(path: str | Path, *, max_rows: int = MAX_ROWS) -> list[LabelledRow]:
    """Read a labelled CSV file (UTF-8, size-limited) and validate it."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DataError(f"Cannot read {path}: {exc.strerror}") from exc
    if size > MAX_BYTES:
        raise DataError(f"{path} is {size / 1e6:.1f} MB; the limit is {MAX_BYTES / 1e6:.0f} MB.")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text (byte {exc.start}).") from exc
    return parse_labelled_csv(text, max_rows=max_rows)


def check_rows_fit(handle: ModelHandle, rows: list[LabelledRow], settings: DualPathSettings) -> None:
    """Validate every row's prompts against the model (budget etc.) before any generation."""
    for r in rows:
        try:
            prepare_prompts(handle, r.query, r.context, settings)
        except ValueError as exc:
            raise DataError(f"Row {r.row}, column 'context': {exc}") from exc


def evaluate_rows(
    handle: ModelHandle,
    rows: list[LabelledRow],
    settings: DualPathSettings,
    *,
    threshold: Threshold | None = None,
    detectors: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Score every row with the chosen detectors and compute their detection metrics.

    Each row gets one cheap dual-path run (``free_parametric=False``: one generate + one forward); every
    detector scores it from that result (plus its own extra model calls). Metrics use the positive class
    *memorized* and each detector's score oriented so that higher = more likely memorised (RePCS: −Z).

    Args:
        detectors: names from :func:`core.detectors.available` (default: ``["repcs"]``).

    Returns:
        ``{"n", "model", "settings", "threshold", "detectors": {name: {auc, fpr_at_95tpr, precision_at_10,
        label, higher_means}}, "rows": [...]}``; each row has ``scores`` (raw, per detector).
    """
    registry = available()
    names = detectors or ["repcs"]
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ValueError(f"Unknown detector(s) {', '.join(unknown)}; available: {', '.join(registry)}")
    check_rows_fit(handle, rows, settings)
    out_rows: list[dict[str, Any]] = []
    tau = None
    for i, r in enumerate(rows):
        res = run_dual_path(handle, r.query, r.context, settings, threshold=threshold, free_parametric=False)
        tau = res.threshold
        inp = DetectorInput(handle=handle, result=res, settings=settings)
        scores = {name: float(registry[name].score(inp)) for name in names}
        out_rows.append(
            {
                "row": r.row,
                "label": r.label,
                "repcs_score": res.repcs_score,
                "verdict": res.verdict,
                "rag_answer": res.rag_answer,
                "n_tokens": res.n_tokens,
                "scores": scores,
                **{f"extra.{k}": v for k, v in r.extra.items()},
            }
        )
        if progress is not None:
            progress(i + 1, len(rows))
    labels = np.array([1 if r["label"] == MEMORIZED else 0 for r in out_rows])
    summary: dict[str, Any] = {}
    for name in names:
        det = registry[name]
        oriented = np.array([det.oriented(r["scores"][name]) for r in out_rows])
        summary[name] = {**detection_metrics(labels, oriented), "label": det.label, "higher_means": det.higher_means}
    return {
        "n": len(out_rows),
        "model": handle.info.name,
        "settings": settings.to_dict(),
        "threshold": tau,
        "positive_class": MEMORIZED,
        "detectors": summary,
        "rows": out_rows,
    }


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
