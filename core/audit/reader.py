"""Reading the audit log: read-only connections that need no write access, the dashboard's and the service's
queries (:class:`AuditReader`) and :func:`verify_chain`.

The log itself is written by :class:`core.audit.store.AuditStore`; the chain is defined in
:mod:`core.audit.chain`. A reader opens the database with ``mode=ro``; when that fails because the folder is
not writable for this user (SQLite must create a WAL database's ``-shm`` file) and no ``-wal`` file holds
records not yet in the main file, it opens it ``immutable`` instead; otherwise it says what is wrong.

**Faults are named, never raised raw.** Every SQLite error met while reading (a missing file, a lock held too
long, a damaged page, a dropped table, text that is not UTF-8) leaves as :class:`AuditDatabaseError`, a
``ValueError`` whose :attr:`~AuditDatabaseError.kind` says which (``missing``, ``locked``, ``damaged``,
``schema``): the service answers 503 with its message, the Audit log page shows it, ``audit verify`` reports a
damaged file as its own outcome. Stored text that is not valid UTF-8 is read with replacement characters (the
chain then reports the record as changed), never as a decoding error.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.audit.chain import COLUMNS, VerifyReport, check_head_format, damaged_report, stored_head, verify_connection
from core.io import cache_dir

DB_ENV = "READ_OR_RECALL_AUDIT_DB"
"""Environment variable naming the audit database (``serve``'s default ``--db`` and the Audit log page's)."""
_COLUMNS = COLUMNS
BUSY_TIMEOUT_S = 10.0
"""How long a connection waits for another one's lock before the operation fails as ``locked``."""

MISSING = "missing"
LOCKED = "locked"
DAMAGED = "damaged"
SCHEMA = "schema"


class AuditDatabaseError(ValueError):
    """The audit database cannot serve this operation now; nothing was read or written.

    Attributes:
        kind: :data:`MISSING` (no file there, or it was deleted), :data:`LOCKED` (another connection held its
            lock past the busy timeout), :data:`DAMAGED` (SQLite found the file malformed, or a record unreadable)
            or :data:`SCHEMA` (a table or column is not the one the service writes).
        retry_after: seconds after which a retry may succeed (the ``Retry-After`` of the service's 503).
    """

    def __init__(self, message: str, kind: str, retry_after: int = 30) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after


def database_error(exc: sqlite3.Error, path: object) -> AuditDatabaseError:
    """An SQLite error as an :class:`AuditDatabaseError` with a sentence an operator can act on."""
    text = str(exc)
    low = text.lower()
    if "locked" in low or "busy" in low:
        return AuditDatabaseError(
            f"The audit database {path} is locked by another connection ({text}); nothing was read or written. "
            "Retry in a few seconds.",
            LOCKED,
            retry_after=2,
        )
    if "no such table" in low or "no such column" in low or "columns but" in low or "has no column" in low:
        return AuditDatabaseError(
            f"The audit database {path} does not have the tables this service writes ({text}): it was altered. "
            "Run `python -m core audit verify` and restore it.",
            SCHEMA,
        )
    if "unable to open" in low or "disk i/o" in low or "readonly" in low or "read-only" in low:
        return AuditDatabaseError(
            f"The audit database {path} cannot be used ({text}). Check that the file and its folder exist and "
            "are readable and writable by the service.",
            MISSING,
        )
    return AuditDatabaseError(
        f"The audit database {path} is damaged ({text}). Run `python -m core audit verify` and restore it from a "
        "backup.",
        DAMAGED,
    )


def _text(value: bytes) -> str:
    """How stored text is decoded: UTF-8, with invalid bytes replaced (they then fail the chain, as changed)."""
    return value.decode("utf-8", "replace")


def default_db_path() -> Path:
    """``$READ_OR_RECALL_AUDIT_DB``, else ``<cache_dir>/audit/audit.sqlite3`` (:func:`core.io.cache_dir`)."""
    env = os.environ.get(DB_ENV)
    if env:
        return Path(env).expanduser()
    return cache_dir() / "audit" / "audit.sqlite3"


def utc_iso(ts: float) -> str:
    """``2025-01-31T12:34:56.789Z`` for a Unix time."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1000):03d}Z"


def _open_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection that needs no write access anywhere.

    ``mode=ro`` still has to create the ``-shm`` file of a WAL database when none exists, which fails in a
    folder this user cannot write. Then, when there is no ``-wal`` file with records not yet in the main file,
    the database is opened ``immutable`` (no locks, no ``-shm``; the file is read as it is).

    Raises:
        ValueError: no file there, or it cannot be opened read-only (the message says why).
    """
    if not path.is_file():
        raise AuditDatabaseError(f"No audit database at {path}.", MISSING)
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1")
        return conn
    except sqlite3.DatabaseError as exc:
        conn.close()
        first = exc
    if not isinstance(first, sqlite3.OperationalError):
        if "malformed" in str(first).lower():
            raise database_error(first, path) from None
        raise AuditDatabaseError(f"{path} is not an audit database ({first}).", SCHEMA)
    if "locked" in str(first).lower() or "busy" in str(first).lower():
        raise database_error(first, path) from None
    wal = Path(f"{path}-wal")
    try:
        pending = wal.exists() and wal.stat().st_size > 0
    except OSError:
        pending = True
    if pending:
        raise ValueError(
            f"Cannot open {path} read-only ({first}): its folder is not writable for this user and its -wal file "
            "holds records not yet in the main file. Read it as the user the service runs as, or give this user "
            "write access to the folder."
        )
    conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise ValueError(f"Cannot open {path} read-only ({first}; immutable: {exc}).") from exc
    return conn


def _connect(path: Path, *, readonly: bool, timeout: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    if readonly:
        conn = _open_readonly(path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.text_factory = _text
    return conn


AUDIT_TABLES = ("audits", "meta", "calibrations")


@contextmanager
def read_connection(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to an audit database (closed on exit); it needs no write access to the folder.

    An SQLite error inside the block leaves as :class:`AuditDatabaseError` (:func:`database_error`).

    Raises:
        AuditDatabaseError: no file there (``missing``), a lock held too long, a damaged file, a dropped table.
        ValueError: a file that cannot be opened read-only (the reason), or one with none of the audit tables.
    """
    conn = _connect(Path(path), readonly=True)
    try:
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) or "malformed" in str(exc).lower():
                raise database_error(exc, path) from None
            raise AuditDatabaseError(f"{path} is not an audit database ({exc})", SCHEMA) from None
        if not names & {"audits", "meta"}:
            raise AuditDatabaseError(f"{path} is not an audit database (it has no audits or meta table)", SCHEMA)
        try:
            yield conn
        except sqlite3.Error as exc:
            raise database_error(exc, path) from None
    finally:
        conn.close()


def _summary(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "seq": row["seq"],
        "id": row["id"],
        "created_at": row["created_at"],
        "request_id": row["request_id"],
        "batch_id": row["batch_id"],
        "anomaly_flag": bool(row["anomaly_flag"]),
        "anomaly_score": row["anomaly_score"],
        "latency_ms": row["latency_ms"],
        "model": row["model"],
        "calibration_id": row["calibration_id"],
    }


def _full(row: sqlite3.Row) -> dict[str, Any]:
    try:
        record = json.loads(row["record"])
        if not isinstance(record, dict):
            raise TypeError("not an object")
    except (TypeError, ValueError) as exc:
        raise AuditDatabaseError(
            f"The stored record at seq {row['seq']} is not readable JSON ({str(exc)[:80]}): the log was changed or "
            "damaged. Run `python -m core audit verify`.",
            DAMAGED,
        ) from None
    record["chain"] = {"seq": row["seq"], "prev_hash": row["prev_hash"], "hash": row["hash"]}
    return record


def _number(value: Any) -> float | None:
    """A stored number, or ``None`` when the column holds something else (edited by hand: ``verify`` says so)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def prefix_range(prefix: str) -> tuple[str, str]:
    """``(low, high)`` such that, in SQLite's default (binary, case-sensitive) order, exactly the texts starting
    with ``prefix`` satisfy ``low <= text < high``: ids are matched as exact strings — ``LIKE`` would ignore
    ASCII case, and ``_`` / ``%`` would be wildcards."""
    return prefix, prefix + "\U0010ffff"


def _where(flag: bool | None, since: float | None, until: float | None) -> tuple[str, list[Any]]:
    clauses, params = [], []
    if flag is not None:
        clauses.append("anomaly_flag = ?")
        params.append(int(flag))
    if since is not None:
        clauses.append("ts >= ?")
        params.append(since)
    if until is not None:
        clauses.append("ts < ?")
        params.append(until)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


class AuditReader:
    """Read-only queries on an audit database (the dashboard's and the service's read endpoints)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def history(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        flag: bool | None = None,
        since: float | None = None,
        until: float | None = None,
        newest_first: bool = True,
    ) -> tuple[int, list[dict[str, Any]]]:
        """A page of record summaries (no texts, no trajectories) and how many records match in all.

        Args:
            flag: only flagged (``True``) or unflagged (``False``) records.
            since, until: Unix times, ``since ≤ t < until``.
        """
        where, params = _where(flag, since, until)
        order = "DESC" if newest_first else "ASC"
        with read_connection(self.path) as conn:
            total = conn.execute(f"SELECT COUNT(*) FROM audits{where}", params).fetchone()[0]
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM audits{where} ORDER BY seq {order} LIMIT ? OFFSET ?",
                [*params, int(limit), int(offset)],
            ).fetchall()
        return int(total), [_summary(r) for r in rows]

    def get(self, record_id: str) -> dict[str, Any] | None:
        """The full record (its stored JSON plus ``chain``: seq, prev_hash, hash), or ``None``."""
        with read_connection(self.path) as conn:
            row = conn.execute("SELECT seq, record, prev_hash, hash FROM audits WHERE id = ?", (record_id,)).fetchone()
        return None if row is None else _full(row)

    def records(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Full records of ``ids`` that exist, in chain order."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        with read_connection(self.path) as conn:
            rows = conn.execute(
                f"SELECT seq, record, prev_hash, hash FROM audits WHERE id IN ({marks}) ORDER BY seq", list(ids)
            ).fetchall()
        return [_full(r) for r in rows]

    def requests_with_prefix(self, prefix: str) -> list[dict[str, Any]]:
        """Summaries of the records whose ``request_id`` starts with ``prefix`` (e.g. one client's ids), in order."""
        low, high = prefix_range(prefix)
        with read_connection(self.path) as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM audits WHERE request_id >= ? AND request_id < ? ORDER BY seq", (low, high)
            ).fetchall()
        return [_summary(r) for r in rows]

    def stats(self) -> dict[str, Any]:
        """Counters: records, anomalies, their rate, first/last time, latency p50/p99 (ms), the chain head."""
        with read_connection(self.path) as conn:
            conn.execute("BEGIN")  # one snapshot for every counter
            n, flagged, first, last = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(anomaly_flag), 0), MIN(ts), MAX(ts) FROM audits"
            ).fetchone()
            pct = {}
            for name, q in (("p50", 0.5), ("p99", 0.99)):
                off = max(0, round(q * (n - 1))) if n else 0
                row = conn.execute(
                    "SELECT latency_ms FROM audits ORDER BY latency_ms LIMIT 1 OFFSET ?", (off,)
                ).fetchone()
                value = None if row is None else _number(row[0])
                pct[name] = None if value is None else round(value, 3)
            try:
                head_seq, head_hash = stored_head(conn)
            except ValueError:  # an edited head: verify says so; the counters still show
                head_seq, head_hash = -1, ""
            models = [r[0] for r in conn.execute("SELECT DISTINCT model FROM audits")]
            calibrations = [r[0] for r in conn.execute("SELECT DISTINCT calibration_id FROM audits")]
        return {
            "records": int(n),
            "anomalies": int(flagged),
            "anomaly_rate": (flagged / n) if n else None,
            "first_at": None if _number(first) is None else utc_iso(float(first)),
            "last_at": None if _number(last) is None else utc_iso(float(last)),
            "latency_ms": pct,
            "models": models,
            "calibration_ids": calibrations,
            "chain": {"head_seq": head_seq, "head_hash": head_hash},
        }

    def timeline(self) -> list[tuple[float, bool, float]]:
        """``(unix time, anomaly_flag, anomaly_score)`` of every record in chain order (the dashboard's rate plot);
        a row whose time or score is not a number (edited by hand: ``verify`` names it) is left out."""
        with read_connection(self.path) as conn:
            rows = conn.execute("SELECT ts, anomaly_flag, anomaly_score FROM audits ORDER BY seq").fetchall()
        out = []
        for ts, flag, score in rows:
            t, s = _number(ts), _number(score)
            if t is not None and s is not None and math.isfinite(t) and math.isfinite(s):
                out.append((t, bool(flag), s))
        return out

    def calibration(self, calibration_id: str) -> dict[str, Any] | None:
        """The description (μ, σ, layers, threshold …) of a calibration a record was scored against; ``None``
        when it is not in the table or is not a JSON object (edited: ``verify`` says so)."""
        with read_connection(self.path) as conn:
            row = conn.execute("SELECT description FROM calibrations WHERE id = ?", (calibration_id,)).fetchone()
        if row is None:
            return None
        try:
            found = json.loads(row[0])
        except (TypeError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def verify(self, expect_head: str | None = None) -> VerifyReport:
        """:func:`verify_chain` of this database."""
        return verify_chain(self.path, expect_head=expect_head)


def verify_chain(path: str | Path, *, expect_head: str | None = None) -> VerifyReport:
    """Walk the hash chain and name the first record that was changed, deleted, inserted or re-ordered.

    Checks, record by record in ``seq`` order: the stored JSON parses and names its own place (``seq``,
    ``id``) — else the record was moved (**reordered**); ``seq`` follows the previous one without a gap —
    else records were **deleted**; ``prev_hash`` is the previous record's hash — else a record was
    **deleted** or **inserted** before it; SHA-256(prev_hash ‖ JSON) is the stored hash and the indexed
    columns (numbers and text alike) agree with the JSON — else it was **changed**; the calibration the record
    names (by content hash) is still in the table — else **deleted**/**changed**. Then the chain's end must be
    the head the store recorded (newest records deleted → **deleted**; an unreadable or other head →
    **changed**) and, with ``expect_head``, the hash published earlier must be on the chain (**head**). Every
    calibration description must match its content hash (**changed**). Tampered values never raise: they are
    reported as a broken chain.

    Before the walk, SQLite's own ``PRAGMA quick_check`` must pass and the tables must be the ones the service
    writes: a file SQLite finds malformed (a zeroed page, flipped bytes in its structure), or any SQLite error
    during the walk, is reported as **damaged** — its own outcome, never "ok"; a dropped table is **deleted**, an
    added or missing column **changed**.

    Raises:
        ValueError: no database at ``path`` (or one that cannot be opened, or is locked past the busy timeout),
            or an ``expect_head`` that is not 64 hex characters.
    """
    if expect_head is not None:
        check_head_format(expect_head)  # a usage error before the file is even opened
    try:
        with read_connection(path) as conn:
            return verify_connection(conn, expect_head=expect_head)
    except AuditDatabaseError as exc:
        if exc.kind != DAMAGED:
            raise
        return damaged_report(str(exc))
