"""Reading the audit log: read-only connections that need no write access, the dashboard's and the service's
queries (:class:`AuditReader`) and :func:`verify_chain`.

The log itself is written by :class:`core.audit.store.AuditStore`; the chain is defined in
:mod:`core.audit.chain`. A reader opens the database with ``mode=ro``; when that fails because the folder is
not writable for this user (SQLite must create a WAL database's ``-shm`` file) and no ``-wal`` file holds
records not yet in the main file, it opens it ``immutable`` instead; otherwise it says what is wrong.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.audit.chain import COLUMNS, VerifyReport, stored_head, verify_connection
from core.io import cache_dir

DB_ENV = "READ_OR_RECALL_AUDIT_DB"
"""Environment variable naming the audit database (``serve``'s default ``--db`` and the Audit log page's)."""
_COLUMNS = COLUMNS


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
        raise ValueError(f"No audit database at {path}.")
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=10.0, check_same_thread=False)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1")
        return conn
    except sqlite3.DatabaseError as exc:
        conn.close()
        first = exc
    if not isinstance(first, sqlite3.OperationalError):
        raise ValueError(f"{path} is not an audit database ({first}).")
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
    conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=10.0, check_same_thread=False)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise ValueError(f"Cannot open {path} read-only ({first}; immutable: {exc}).") from exc
    return conn


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    if readonly:
        conn = _open_readonly(path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=10.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    return conn


@contextmanager
def read_connection(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to an audit database (closed on exit); it needs no write access to the folder.

    Raises:
        ValueError: no file there, a file that cannot be opened read-only (the reason), or not an audit database.
    """
    conn = _connect(Path(path), readonly=True)
    try:
        try:
            conn.execute("SELECT seq FROM audits LIMIT 1")
            conn.execute("SELECT key FROM meta LIMIT 1")
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{path} is not an audit database ({exc})") from exc
        yield conn
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
    record = json.loads(row["record"])
    record["chain"] = {"seq": row["seq"], "prev_hash": row["prev_hash"], "hash": row["hash"]}
    return record


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
        like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        with read_connection(self.path) as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM audits WHERE request_id LIKE ? ESCAPE '\\' ORDER BY seq", (like,)
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
                pct[name] = None if row is None else round(float(row[0]), 3)
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
            "first_at": None if first is None else utc_iso(first),
            "last_at": None if last is None else utc_iso(last),
            "latency_ms": pct,
            "models": models,
            "calibration_ids": calibrations,
            "chain": {"head_seq": head_seq, "head_hash": head_hash},
        }

    def timeline(self) -> list[tuple[float, bool, float]]:
        """``(unix time, anomaly_flag, anomaly_score)`` of every record in chain order (the dashboard's rate plot)."""
        with read_connection(self.path) as conn:
            rows = conn.execute("SELECT ts, anomaly_flag, anomaly_score FROM audits ORDER BY seq").fetchall()
        return [(float(r[0]), bool(r[1]), float(r[2])) for r in rows]

    def calibration(self, calibration_id: str) -> dict[str, Any] | None:
        """The description (μ, σ, layers, threshold …) of a calibration a record was scored against."""
        with read_connection(self.path) as conn:
            row = conn.execute("SELECT description FROM calibrations WHERE id = ?", (calibration_id,)).fetchone()
        return None if row is None else json.loads(row[0])

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

    Raises:
        ValueError: no database at ``path`` (or one that cannot be opened), or an ``expect_head`` that is not
            64 hex characters.
    """
    with read_connection(path) as conn:
        return verify_connection(conn, expect_head=expect_head)
