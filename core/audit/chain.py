"""The audit log's hash chain: the canonical form that is hashed, the head check before each append, and the walk
that names the first changed, deleted, inserted or re-ordered record.

Every record is a JSON object; its **canonical JSON** is ``json.dumps(record, sort_keys=True, separators=(",",
":"), ensure_ascii=False, allow_nan=False)`` encoded as UTF-8, and

    hash_n = SHA-256( prev_hash_n ‖ canonical_json_n ),   prev_hash_n = hash_{n−1},   prev_hash_1 = "0" × 64

where ``prev_hash`` enters as its 64 lowercase hex characters (ASCII) and ``‖`` is byte concatenation. The
record holds its own ``seq`` (1, 2, 3 … without gaps) and ``id``, so moving a record breaks the chain too.

The ``meta`` table keeps the chain's **stored head** (last ``seq`` and ``hash``), written in the same
transaction as each append. Two checks use it:

* :func:`check_head`, run by :meth:`core.audit.store.AuditStore.append` inside the write transaction before
  anything is appended: the last row must be the stored head. When rows were deleted (or the head edited) the
  store **refuses** to append (:class:`ChainHeadError`, logged as an error) instead of continuing the chain
  from the last surviving row — so deleted records stay visible to ``verify`` and a sequence number is never
  given out twice.
* :func:`verify_connection` compares the chain's end with the stored head, and with an externally kept head
  (``expect_head``, a hash published earlier) when given.

What a hash chain cannot prove on its own: whoever rewrites the whole file (or restores an older copy of it,
or loses its ``-wal`` file) leaves a consistent chain and head behind. Only a head kept where the server
cannot write (``--expect-head``) catches that.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import logging
import math
import re
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from core.io import AsDict

logger = logging.getLogger(__name__)

GENESIS = "0" * 64
"""``prev_hash`` of the first record."""
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
COLUMNS = (
    "seq, id, created_at, ts, request_id, batch_id, anomaly_flag, anomaly_score, latency_ms, model, calibration_id"
)
"""The indexed columns of the ``audits`` table (everything but the JSON and the chain fields)."""
TABLE_COLUMNS = {
    "audits": (*COLUMNS.split(", "), "record", "prev_hash", "hash"),
    "meta": ("key", "value"),
    "calibrations": ("id", "created_at", "description", "content_hash"),
}
"""Every table of the log and its columns, in order: what the store writes and what ``verify`` expects."""
DAMAGED = "damaged"
""":attr:`VerifyReport.problem` of a file SQLite itself finds malformed (``PRAGMA quick_check``)."""


class ChainHeadError(RuntimeError):
    """The log's last record is not the head the store recorded: records were deleted or the head was edited.

    The store refuses to append until an operator has looked (``python -m core audit verify``).
    """


def canonical_json(record: dict[str, Any]) -> str:
    """The one serialization that is hashed: sorted keys, no spaces, UTF-8 text, no NaN."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def chain_hash(prev_hash: str, canonical: str) -> str:
    """SHA-256 (hex) of ``prev_hash`` (64 hex characters) followed by the record's canonical JSON (UTF-8)."""
    return hashlib.sha256(prev_hash.encode("ascii") + canonical.encode("utf-8")).hexdigest()


def check_head_format(value: str) -> str:
    """An externally kept head hash, lowercased; it must be 64 hex characters.

    Raises:
        ValueError: anything else (an empty value included), so a typo is never reported as a rewritten history.
    """
    text = (value or "").strip().lower()
    if not _HEX64.match(text):
        raise ValueError(
            f"--expect-head must be a head hash of 64 hex characters (GET /stats → chain.head_hash); got "
            f"{len(value or '')} character(s)."
        )
    return text


@dataclass(frozen=True)
class VerifyReport(AsDict):
    """The outcome of walking the chain.

    Attributes:
        ok: every record is intact, in place, and the head matches.
        n_records: records read.
        head_seq, head_hash: the last record's, as found.
        problem: ``None``, or ``"changed"``, ``"deleted"``, ``"reordered"``, ``"head"`` (the chain was tampered
            with), or ``"damaged"`` (SQLite finds the file itself malformed: its own outcome, exit code 3).
        seq, record_id: where the first problem is (the record at that place, if any).
        message: one sentence for people.
    """

    ok: bool
    n_records: int
    head_seq: int
    head_hash: str
    problem: str | None = None
    seq: int | None = None
    record_id: str | None = None
    message: str = ""


def stored_head(conn: sqlite3.Connection) -> tuple[int, str]:
    """``(head_seq, head_hash)`` from ``meta``.

    Raises:
        ValueError: a head that is not a sequence number and a 64-hex hash (``meta`` was edited).
    """
    meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('head_seq', 'head_hash')").fetchall())
    raw_seq, raw_hash = meta.get("head_seq", "0"), meta.get("head_hash", GENESIS)
    try:
        seq = int(str(raw_seq))
    except ValueError:
        raise ValueError("meta.head_seq is not a sequence number (the head was edited)") from None
    if seq < 0 or not isinstance(raw_hash, str) or not _HEX64.match(raw_hash):
        raise ValueError("meta holds no valid head (head_seq/head_hash were edited)")
    return seq, raw_hash


def check_head(conn: sqlite3.Connection, path: object = "the audit log") -> tuple[int, str]:
    """The chain's head to append after: the stored head, which the last row must match.

    Raises:
        ChainHeadError: the last row is not the stored head (newest records deleted, a row added outside the
            store, an older copy restored over a newer ``meta`` …) or the head is unreadable; logged as an error.
    """
    last = conn.execute("SELECT seq, hash FROM audits ORDER BY seq DESC LIMIT 1").fetchone()
    found = (int(last[0]), str(last[1])) if last else (0, GENESIS)
    try:
        head = stored_head(conn)
    except ValueError as exc:
        problem = str(exc)
    else:
        if head == found:
            return head
        problem = (
            f"the last record is seq {found[0]} but the stored head is seq {head[0]}"
            + (f" (records {found[0] + 1}–{head[0]} were deleted)" if head[0] > found[0] else "")
            + ("" if head[0] != found[0] else " with another hash")
        )
    message = (
        f"Refusing to append to {path}: {problem}. Nothing was written; run `python -m core audit verify` and "
        "restore the log before the service records again."
    )
    logger.error(message)
    raise ChainHeadError(message)


def _number_differs(stored: Any, value: Any) -> bool:
    if isinstance(stored, bool) or not isinstance(stored, (int, float)):
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    if not (math.isfinite(stored) and math.isfinite(value)):
        return True
    return abs(float(stored) - float(value)) > 1e-9 * max(1.0, abs(float(value)))


def _column_mismatch(row: sqlite3.Row, record: dict[str, Any]) -> str | None:
    """The first indexed column that disagrees with the hashed JSON (the filters read the columns)."""
    result = record.get("result") or {}
    checks = {
        "id": record.get("id"),
        "created_at": record.get("created_at"),
        "request_id": record.get("request_id"),
        "batch_id": record.get("batch_id"),
        "anomaly_flag": int(bool(result.get("anomaly_flag"))),
        "anomaly_score": result.get("anomaly_score"),
        "latency_ms": result.get("latency_ms"),
        "model": (record.get("model") or {}).get("name"),
        "calibration_id": (record.get("calibration") or {}).get("id"),
    }
    for column, value in checks.items():
        stored = row[column]
        if column in ("anomaly_score", "latency_ms"):
            if _number_differs(stored, value):
                return column
        elif stored != value or type(stored) is not type(value):
            return column
    ts = row["ts"]
    if not isinstance(ts, (int, float)) or not abs(float(ts) - _parse_iso(record.get("created_at", ""))) <= 0.002:
        return "ts"
    return None


def _parse_iso(text: Any) -> float:
    try:
        base, frac = str(text).rstrip("Z").split(".")
        return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + int(frac) / 1000
    except (ValueError, TypeError, AttributeError, OverflowError):
        return float("nan")


def _calibration_problem(record: dict[str, Any], calibrations: dict[str, str]) -> str | None:
    """Why the calibration a record names (with the content hash the chain covers) is not in the table."""
    calibration = record.get("calibration") or {}
    wanted = calibration.get("content_hash") if isinstance(calibration, dict) else None
    if wanted is None:
        return None  # records written before calibrations were bound to the chain
    cid = calibration.get("id")
    if cid not in calibrations:
        return f"the calibration {cid} it was scored with is missing from the calibrations table (deleted)"
    if calibrations[cid] != wanted:
        return f"the calibration {cid} it was scored with was changed"
    return None


def _row_problem(
    row: sqlite3.Row, prev_seq: int, prev_hash: str, calibrations: dict[str, str]
) -> tuple[str, str] | None:
    """What is wrong with one row of the chain walk, as (problem, message); ``None`` when it follows the last."""
    seq, rid = int(row["seq"]), str(row["id"])
    text = row["record"]
    try:
        if not isinstance(text, str):  # a BLOB or a number where the JSON text belongs
            raise TypeError("not text")
        record = json.loads(text)
        claimed_seq, claimed_id = int(record["seq"]), str(record["id"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return "changed", f"record {rid} at seq {seq}: its stored JSON is unreadable (changed)."
    if claimed_seq != seq or claimed_id != rid:
        return "reordered", (
            f"record {claimed_id} (written as seq {claimed_seq}) sits at seq {seq}: the log was re-ordered."
        )
    if seq != prev_seq + 1:
        missing = f"records {prev_seq + 1}–{seq - 1}"
        return "deleted", f"{missing} are missing before record {rid} (seq {seq}): deleted."
    if row["prev_hash"] != prev_hash:
        return "deleted", (
            f"record {rid} (seq {seq}) does not follow the record before it (prev_hash differs): a record "
            "before it was deleted, replaced or inserted."
        )
    try:
        intact = canonical_json(record) == text and chain_hash(prev_hash, text) == row["hash"]
    except (TypeError, ValueError, UnicodeError):
        intact = False
    if not intact:
        return "changed", f"record {rid} (seq {seq}) was changed after it was written."
    column = _column_mismatch(row, record)
    if column is not None:
        return "changed", f"record {rid} (seq {seq}): column {column!r} was changed."
    calibration = _calibration_problem(record, calibrations)
    if calibration is not None:
        return ("deleted" if "deleted" in calibration else "changed"), f"record {rid} (seq {seq}): {calibration}."
    return None


def damaged_report(detail: str) -> VerifyReport:
    """The :class:`VerifyReport` of a file SQLite cannot read as a sound database (``problem="damaged"``)."""
    return VerifyReport(
        False, 0, 0, GENESIS, DAMAGED, None, None,
        f"the database file is damaged: {detail.rstrip('.')}. Its records cannot be vouched for; restore it from a "
        "backup (SQLite's `.recover` may save what is left).",
    )  # fmt: skip


def schema_problem(conn: sqlite3.Connection) -> tuple[str, str] | None:
    """``(problem, message)`` when a table of the log is missing or its columns are not :data:`TABLE_COLUMNS`."""
    for table, expected in TABLE_COLUMNS.items():
        found = tuple(str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})"))
        if not found:
            return "deleted", f"the {table} table is missing (dropped)."
        if found != expected:
            extra = [c for c in found if c not in expected]
            lost = [c for c in expected if c not in found]
            what = (f" column(s) added: {', '.join(extra)};" if extra else "") + (
                f" column(s) removed: {', '.join(lost)};" if lost else ""
            )
            return "changed", f"the {table} table was altered:{what.rstrip(';') or ' its columns were reordered'}."
    return None


def verify_connection(conn: sqlite3.Connection, *, expect_head: str | None = None) -> VerifyReport:
    """Walk the chain on an open (read-only) connection; see :func:`core.audit.store.verify_chain`.

    First SQLite's ``PRAGMA quick_check`` (a malformed file is **damaged**, whatever its chain says) and the
    tables' columns (:func:`schema_problem`); an SQLite error during the walk is **damaged** too.

    Raises:
        ValueError: ``expect_head`` is not 64 hex characters.
    """
    expect = None if expect_head is None else check_head_format(expect_head)
    try:
        checked = [str(r[0]) for r in conn.execute("PRAGMA quick_check(5)")]
        if checked != ["ok"]:
            lines = [line.strip() for row in checked[:3] for line in row.splitlines() if line.strip("* ")]
            return damaged_report("SQLite's quick_check says " + "; ".join(lines[:3]))
        found = schema_problem(conn)
        if found is not None:
            return VerifyReport(False, 0, 0, GENESIS, found[0], None, None, found[1])
        return _walk(conn, expect)
    except sqlite3.DatabaseError as exc:
        return damaged_report(f"SQLite could not read it ({exc})")


def _walk(conn: sqlite3.Connection, expect: str | None) -> VerifyReport:
    """The chain walk of :func:`verify_connection` (``expect``: a checked head hash, or ``None``)."""
    conn.execute("BEGIN")  # one snapshot: a record the server commits meanwhile is not half-seen
    calibrations = conn.execute("SELECT id, description, content_hash FROM calibrations").fetchall()
    stored = {str(cid): str(content_hash) for cid, _, content_hash in calibrations}
    cursor = conn.execute(f"SELECT {COLUMNS}, record, prev_hash, hash FROM audits ORDER BY seq")
    prev_hash, prev_seq, n = GENESIS, 0, 0
    seen_hashes: set[str] = set()

    def bad(problem: str, row: sqlite3.Row | None, message: str) -> VerifyReport:
        where = (None, None) if row is None else (int(row["seq"]), str(row["id"]))
        return VerifyReport(False, n, prev_seq, prev_hash, problem, where[0], where[1], message)

    for row in cursor:
        found = _row_problem(row, prev_seq, prev_hash, stored)
        if found is not None:
            return bad(found[0], row, found[1])
        prev_hash, prev_seq = row["hash"], int(row["seq"])
        seen_hashes.add(prev_hash)
        n += 1
    try:
        head_seq, head_hash = stored_head(conn)
    except ValueError as exc:
        return VerifyReport(False, n, prev_seq, prev_hash, "changed", None, None, f"{exc}.")
    if (head_seq, head_hash) != (prev_seq, prev_hash):
        if head_seq > prev_seq:
            message = f"records {prev_seq + 1}–{head_seq} were deleted (the log ends at seq {prev_seq})."
            problem = "deleted"
        else:
            message = (
                f"the stored head (seq {head_seq}) does not match the chain's end (seq {prev_seq}): records were "
                "added outside the service or the head was edited."
            )
            problem = "changed"
        return VerifyReport(False, n, prev_seq, prev_hash, problem, prev_seq + 1, None, message)
    if expect is not None and expect not in seen_hashes | {GENESIS}:
        return VerifyReport(
            False, n, prev_seq, prev_hash, "head", None, None,
            f"the published head {expect[:16]}… is not on this chain: the history was rewritten, or an "
            "older copy of the log was restored.",
        )  # fmt: skip
    for cid, description, content_hash in calibrations:
        if hashlib.sha256(str(description).encode("utf-8")).hexdigest() != content_hash:
            return VerifyReport(
                False, n, prev_seq, prev_hash, "changed", None, None, f"calibration {cid} was changed."
            )  # fmt: skip
    return VerifyReport(True, n, prev_seq, prev_hash, None, None, None, f"{n} records, chain intact.")
