"""Labeled and conflict-set CSVs: parsing and strict validation, behavioral labels, stratified samples.

A labeled file has columns ``query,context,label`` (label ``memorized`` or ``grounded``); a conflict set
``query,context,answer_context,answer_memory``. Extra columns are kept per row. Files are validated all or
nothing before any model call: a bad row is reported by number and column (:class:`DataError`); a quote that
is never closed is reported with its line. Files are read through :func:`core.io.read_user_file` (regular
files only, at most :data:`MAX_BYTES`). What parsing changes or notices without refusing (NUL characters
removed, duplicate rows) is returned as ``notes`` on the rows (:class:`ParsedRows`).

Line endings are normalized first (``\r\n`` and a bare ``\r`` both become ``\n``, so files saved by old Mac
tools or with mixed endings read like any other), the csv module's field limit (131,072 characters by default)
is raised to the file's size, and any ``csv.Error`` that still occurs becomes a :class:`DataError` naming the
line — the Evaluate page, the command line and ``audit calibrate`` (:func:`open_csv`, :func:`csv_rows`) all
show that message.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.bundled_sets import CONFLICT_FILE as CONFLICT_FILE
from core.bundled_sets import PROBES_DIR as PROBES_DIR
from core.bundled_sets import SETS_DIR as SETS_DIR
from core.bundled_sets import bundled_sets as bundled_sets
from core.engine import DualPathSettings, prepare_prompts
from core.engine.verdict import GROUNDED, MEMORIZED
from core.io import MiB, UserFileError, format_size, read_user_file
from core.model.handle import ModelHandle
from core.model.prompts import has_visible_text

REQUIRED_COLUMNS = ("query", "context", "label")
CONFLICT_COLUMNS = ("query", "context", "answer_context", "answer_memory")
LABELS = (MEMORIZED, GROUNDED)
MAX_ROWS = 5000
MAX_BYTES = 20 * MiB
"""The largest labeled or conflict CSV accepted (bytes; messages print it in MiB)."""
SEED = 42
CONFIRMED_COLUMN = "parametric_correct"
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


class DataError(ValueError):
    """A labeled file is malformed; the message names the row and the column."""


@dataclass
class LabeledRow:
    """A row of a labeled file: ``row`` is its 1-based data row number (the header is row 0); ``extra``
    holds the columns beyond ``query,context,label``."""

    row: int
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


Row = LabeledRow | ConflictRow
"""A row of either kind of file."""


class ParsedRows(list):
    """The rows of a file (a plain ``list`` of rows) with the ``notes`` parsing produced.

    ``notes`` are plain sentences about what was changed or noticed without refusing the file (NUL characters
    removed, duplicate rows); the command line prints them as ``note:`` lines, the Evaluate page as warnings.
    A slice or copy is a plain list without notes.
    """

    def __init__(self, rows: Sequence[Any] = (), notes: Sequence[str] = ()) -> None:
        super().__init__(rows)
        self.notes: list[str] = list(notes)


def _rows_list(numbers: Sequence[int], limit: int = 8) -> str:
    shown = ", ".join(str(n) for n in numbers[:limit])
    return shown + (f" and {len(numbers) - limit} more" if len(numbers) > limit else "")


def normalize_newlines(text: str) -> str:
    """``\r\n`` and bare ``\r`` → ``\n`` (inside quoted fields too)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _allow_fields(n_chars: int) -> None:
    """Raise the csv module's process-wide field limit to ``n_chars`` (never lower it): no field of a file
    accepted under the upload cap can then be over the limit."""
    if csv.field_size_limit() < n_chars:
        csv.field_size_limit(n_chars)


def open_csv(text: str) -> csv.DictReader:
    """A ``csv.DictReader`` over ``text`` with its line endings normalized and the field limit raised to its size
    (iterate it with :func:`csv_rows`)."""
    text = normalize_newlines(text)
    _allow_fields(max(len(text), MAX_BYTES) + 1)
    return csv.DictReader(io.StringIO(text))


def csv_rows(reader: csv.DictReader) -> Iterator[dict[str, Any]]:
    """The reader's rows; a ``csv.Error`` becomes a :class:`DataError` naming the line."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"Line {reader.line_num}: the file is not valid CSV ({exc}).") from None
        yield row


def _unclosed_quote_line(text: str) -> int | None:
    """The line on which a quoted field opens and is never closed, or ``None``.

    Python's lenient CSV reader would read the rest of the file into that one cell (and then report another
    column as empty); a strict pass finds the unterminated quote. Other strict-mode complaints (a character
    after a closing quote) are left to the lenient parse, which accepts them as before.
    """
    reader = csv.reader(io.StringIO(text), strict=True)
    start = 1
    while True:
        try:
            next(reader)
        except StopIteration:
            return None
        except csv.Error as exc:
            if "unexpected end of data" in str(exc):
                return start
        start = reader.line_num + 1


def _reader(text: str, required: Sequence[str]) -> tuple[csv.DictReader, list[str]]:
    text = normalize_newlines(text)
    _allow_fields(max(len(text), MAX_BYTES) + 1)
    line = _unclosed_quote_line(text)
    if line is not None:
        raise DataError(
            f'Line {line}: a quoted field opens here and is never closed (an unterminated quote "); close it, '
            'or double the quote inside a quoted field ("").'
        )
    reader = open_csv(text)
    try:
        fieldnames = reader.fieldnames
    except csv.Error as exc:
        raise DataError(f"Line 1: the header is not valid CSV ({exc}).") from None
    header = [h.strip() for h in (fieldnames or [])]
    if not header:
        raise DataError(f"The file is empty: expected a header row with columns {', '.join(required)}.")
    missing = [c for c in required if c not in header]
    if missing:
        raise DataError(f"Missing column(s) {', '.join(missing)} in the header (found: {', '.join(header)}).")
    reader.fieldnames = header
    return reader, header


def _values(number: int, raw: dict[str, Any], nonempty: Sequence[str], nul_rows: list[int]) -> dict[str, str]:
    if None in raw:
        raise DataError(f"Row {number}: more fields than columns in the header (a stray comma or quote?).")
    values = {k: (v or "") for k, v in raw.items()}
    if any("\0" in v for v in values.values()):
        nul_rows.append(number)
        values = {k: v.replace("\0", "") for k, v in values.items()}
    for column in nonempty:
        if not has_visible_text(values[column]):
            shown = "empty" if not values[column].strip() else "empty (zero-width characters alone do not count)"
            raise DataError(f"Row {number}, column '{column}': {shown}.")
    return values


def _notes(rows: Sequence[Row], nul_rows: list[int]) -> list[str]:
    notes = []
    if nul_rows:
        notes.append(f"Removed NUL characters (byte 0) from row(s) {_rows_list(nul_rows)}.")
    first: dict[tuple[str, str], Row] = {}
    duplicates: list[int] = []
    conflicting: list[int] = []
    for r in rows:
        key = (r.query.strip(), r.context.strip())
        if key in first:
            duplicates.append(r.row)
            if getattr(r, "label", None) != getattr(first[key], "label", None):
                conflicting.append(r.row)
        else:
            first[key] = r
    if duplicates:
        notes.append(
            f"{len(duplicates)} duplicate row(s) repeat the query and context of an earlier row "
            f"(row(s) {_rows_list(duplicates)}); each is scored and counted in the metrics again."
        )
    if conflicting:
        notes.append(f"Row(s) {_rows_list(conflicting)} repeat an earlier row's query and context with another label.")
    return notes


def parse_labeled_csv(text: str, *, max_rows: int = MAX_ROWS) -> ParsedRows:
    """Parse and validate labeled rows.

    Returns:
        The rows, with ``notes`` (:class:`ParsedRows`): NUL characters removed, duplicate rows.

    Raises:
        DataError: missing columns, an unterminated quote (with its line), an empty query/context, an unknown
            label, too many rows, or no rows.
    """

    return _parse(text, REQUIRED_COLUMNS, ("query", "context"), max_rows, _labeled_row(True))


def parse_conflict_csv(text: str, *, max_rows: int = MAX_ROWS) -> ParsedRows:
    """Parse and validate a conflict set (``query,context,answer_context,answer_memory``; all non-empty).

    Raises:
        DataError: as :func:`parse_labeled_csv`, naming the row and column.
    """

    def conflict(number: int, v: dict[str, str]) -> ConflictRow:
        extra = {k: x for k, x in v.items() if k not in CONFLICT_COLUMNS}
        return ConflictRow(number, v["query"], v["context"], v["answer_context"], v["answer_memory"], extra)

    return _parse(text, CONFLICT_COLUMNS, CONFLICT_COLUMNS, max_rows, conflict)


def _labeled_row(labeled: bool) -> Callable[[int, dict[str, str]], LabeledRow]:
    """The builder of a labeled file's row (its label one of :data:`LABELS`; with ``labeled`` false, no label)."""

    def make(number: int, values: dict[str, str]) -> LabeledRow:
        label = values.get("label", "").strip().lower()
        if labeled and label not in LABELS:
            raise DataError(f"Row {number}, column 'label': {values['label']!r} is not one of {', '.join(LABELS)}.")
        extra = {k: v for k, v in values.items() if k not in REQUIRED_COLUMNS}
        return LabeledRow(number, values["query"], values["context"], label, extra)

    return make


def record_rows(records: Iterable[Mapping[str, Any]], *, labeled: bool, max_rows: int = MAX_ROWS) -> ParsedRows:
    """Rows given as records (a DataFrame's, the notebook's :meth:`read_or_recall.Lab.evaluate`), checked as a
    file's rows are, with the same notes (NUL characters removed, duplicate rows): each value as text (``None`` and
    NaN as empty), a visible query and context, a known label when ``labeled``; 1-based row numbers.

    Raises:
        DataError: an empty query or context, an unknown label, too many rows, or no rows.
    """
    plain = ({str(k): "" if v is None or v != v else str(v) for k, v in r.items()} for r in records)  # NaN → ""
    return _build(plain, ("query", "context"), max_rows, _labeled_row(labeled), "No rows to evaluate.")


def _build(
    records: Iterable[dict[str, Any]],
    nonempty: Sequence[str],
    max_rows: int,
    make_row: Callable[[int, dict[str, str]], Row],
    empty: str,
) -> ParsedRows:
    """Each record built by ``make_row(number, values)`` (``nonempty`` values non-blank; it may refuse a row
    with a :class:`DataError`), with the notes; ``empty`` is the refusal of no rows."""
    rows: list[Row] = []
    nul_rows: list[int] = []
    for number, raw in enumerate(records, start=1):
        if number > max_rows:
            raise DataError(f"Too many rows: the limit is {max_rows:,}.")
        rows.append(make_row(number, _values(number, raw, nonempty, nul_rows)))
    if not rows:
        raise DataError(empty)
    return ParsedRows(rows, _notes(rows, nul_rows))


def _parse(
    text: str,
    columns: Sequence[str],
    nonempty: Sequence[str],
    max_rows: int,
    make_row: Callable[[int, dict[str, str]], Row],
) -> ParsedRows:
    """The rows of a CSV with ``columns`` (``nonempty`` ones non-blank), each built by ``make_row(number,
    values)`` (which may refuse it with a :class:`DataError`), with the file's notes."""
    reader, _ = _reader(text, columns)
    return _build(csv_rows(reader), nonempty, max_rows, make_row, "The file has a header but no data rows.")


def decode_csv_bytes(data: bytes, *, name: str = "the file", max_bytes: int = MAX_BYTES) -> str:
    """Size-check and decode uploaded bytes as UTF-8 (a BOM is allowed).

    Raises:
        DataError: over ``max_bytes``, or not UTF-8 (the message gives the byte offset).
    """
    if len(data) > max_bytes:
        raise DataError(f"{name} is {format_size(len(data))}; the limit is {format_size(max_bytes)}.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{name} is not UTF-8 text (byte {exc.start}).") from exc


def parse_labeled_bytes(
    data: bytes, *, name: str = "the file", max_bytes: int = MAX_BYTES, max_rows: int = MAX_ROWS
) -> ParsedRows:
    """Validate an uploaded labeled CSV (size, encoding, every row) — all or nothing; notes as
    :func:`parse_labeled_csv`. The Evaluate page's uploads and the command line's files both end here."""
    return parse_labeled_csv(decode_csv_bytes(data, name=name, max_bytes=max_bytes), max_rows=max_rows)


def _read_text(path: str | Path) -> str:
    try:
        data = read_user_file(path, MAX_BYTES, "CSV file")
    except UserFileError as exc:
        raise DataError(str(exc)) from None
    return decode_csv_bytes(data, name=str(path))


def read_labeled_csv(path: str | Path, *, max_rows: int = MAX_ROWS) -> ParsedRows:
    """Read a labeled CSV file (a regular file, UTF-8, at most :data:`MAX_BYTES`) and validate it."""
    return parse_labeled_csv(_read_text(path), max_rows=max_rows)


def read_conflict_csv(path: str | Path, *, max_rows: int = MAX_ROWS) -> ParsedRows:
    """Read a conflict-set CSV file (UTF-8, size-limited) and validate it."""
    return parse_conflict_csv(_read_text(path), max_rows=max_rows)


def prompt_lengths(handle: ModelHandle, rows: Sequence[Row], settings: DualPathSettings) -> list[int]:
    """Validate every row's prompts against the model (token budget etc.) before any generation.

    Returns:
        The retrieval prompt's length in tokens per row (for :func:`core.engine.batch.plan_batches`).

    Raises:
        DataError: the first row that does not fit, by number.
    """
    lengths = []
    for r in rows:
        try:
            lengths.append(len(prepare_prompts(handle, r.query, r.context, settings).retrieval.ids))
        except ValueError as exc:
            column = "query" if str(exc).startswith("The query") else "context"  # the message says which text
            raise DataError(f"Row {r.row}, column '{column}': {exc}") from exc
    return lengths


# ----------------------------------------------------------------------------------------------------------
# Behavioral labels and samples


def parse_flag(value: Any) -> bool | None:
    """``true``/``false`` (also 1/0, yes/no) → bool; anything else → ``None``."""
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def label_confirmed(label: str, extra: dict[str, Any]) -> bool | None:
    """Whether a row's label is confirmed by the model's behavior (``parametric_correct`` column).

    A *memorized* row is confirmed when the parametric path (no context) already gives the expected answer; a
    *grounded* row when it does not. ``None`` when the column is missing or unreadable.
    """
    flag = parse_flag(extra.get(CONFIRMED_COLUMN, extra.get(f"extra.{CONFIRMED_COLUMN}", "")))
    if flag is None:
        return None
    return flag if label == MEMORIZED else not flag


def stratified_sample(rows: Sequence[LabeledRow], n: int, *, seed: int = SEED) -> list[LabeledRow]:
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
