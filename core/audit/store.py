"""The audit log: SQLite (WAL), one row per audited pair, committed before the response, in a hash chain.

Every record is a JSON object (its inputs' SHA-256 and, unless the server runs with ``--no-store-text``, the
texts; the result; the model and its fingerprint; the calibration it was scored against with its content hash;
the request it answers; its place in the chain). The chain, its canonical JSON and :func:`verify_chain`'s walk
are in :mod:`core.audit.chain`: ``hash_n = SHA-256(prev_hash_n ‖ canonical_json_n)``, the ``meta`` table keeps
the head (last ``seq`` and ``hash``) updated in the same transaction as each append, and **an append first
checks that the last row is that stored head** — after deleted newest records it refuses
(:class:`~core.audit.chain.ChainHeadError`), so a sequence number is never given out twice and the deletion
stays visible to ``verify``.

What a hash chain can and cannot prove: anyone who can rewrite the whole file can also recompute every hash
after the record they changed. Publish the head hash (``GET /stats`` → ``chain.head_hash``) somewhere the
server cannot write — a ticket, a signed e-mail, another machine — and check it with
``python -m core audit verify --db … --expect-head HASH``: then a rewritten history is caught too.

Retries: a client's ``request_id`` is bound to the request it came with (:meth:`AuditStore.append_request`):
the same id with the same request fingerprint returns the stored records; with another fingerprint it is a
:class:`RequestConflict`. The check and the insert run in one write transaction, so concurrent requests
sharing an id store one set of records.

Writes: one connection per store guarded by the store's own lock (SQLite has one writer at a time anyway),
``BEGIN IMMEDIATE`` … ``COMMIT`` with ``synchronous=FULL``, so a record is on disk when :meth:`AuditStore.append`
returns — the service sends its response only after that. Reads use their own read-only connections (WAL lets
them run while a write is in progress); a database in a folder the reader cannot write is opened immutable.

Operational faults are refused, never half-done: before each write the store checks that its file is still
the one it opened (deleted → :class:`~core.audit.reader.AuditDatabaseError` ``missing``; replaced, e.g. by a
restored copy → it reopens the new file, and the head checks below decide whether it may continue), that the
``audits`` table has exactly the columns it writes (``schema``), and that the last record it wrote is still in
the log. A lock held by another connection past the busy timeout is ``locked``; a malformed page ``damaged``.
Each leaves as ``AuditDatabaseError`` after a rollback — the service answers 503 with the reason, and a retry
succeeds once the fault is gone.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import stat
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.audit.chain import (
    GENESIS,
    TABLE_COLUMNS,
    ChainHeadError,
    VerifyReport,
    canonical_json,
    chain_hash,
    check_head,
    schema_problem,
)
from core.audit.reader import (
    BUSY_TIMEOUT_S,
    DB_ENV,
    LOCKED,
    MISSING,
    SCHEMA,
    AuditDatabaseError,
    AuditReader,
    _connect,
    _full,
    database_error,
    default_db_path,
    read_connection,
    utc_iso,
    verify_chain,
)

__all__ = [
    "DB_ENV",
    "GENESIS",
    "AuditDatabaseError",
    "AuditReader",
    "AuditStore",
    "ChainHeadError",
    "Entry",
    "RequestConflict",
    "VerifyReport",
    "canonical_json",
    "chain_hash",
    "conflict_message",
    "default_db_path",
    "read_connection",
    "text_sha256",
    "utc_iso",
    "verify_chain",
]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS audits (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    ts REAL NOT NULL,
    request_id TEXT UNIQUE,
    batch_id TEXT,
    anomaly_flag INTEGER NOT NULL,
    anomaly_score REAL NOT NULL,
    latency_ms REAL NOT NULL,
    model TEXT NOT NULL,
    calibration_id TEXT NOT NULL,
    record TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audits_ts ON audits (ts);
CREATE INDEX IF NOT EXISTS audits_flag ON audits (anomaly_flag, seq);
CREATE TABLE IF NOT EXISTS calibrations (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    description TEXT NOT NULL,
    content_hash TEXT NOT NULL
);
"""
_INSERT = f"INSERT INTO audits ({', '.join(TABLE_COLUMNS['audits'])}) VALUES ({', '.join('?' * 14)})"


def text_sha256(text: str) -> str:
    """SHA-256 (hex) of a text as UTF-8: what a record keeps of its inputs when texts are not stored."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Entry:
    """What the service hands the store for one audited pair (the store adds seq, id, time and the chain).

    Attributes:
        body: the record's content (inputs, result, model, calibration …), JSON-ready.
        anomaly_flag, anomaly_score, latency_ms: copied into indexed columns (checked against the body by
            :func:`verify_chain`).
        model, calibration_id: likewise.
        request_id: the client's idempotency key, unique in the store (``None``: none).
        batch_id: shared by the records of one ``/audit/batch`` call.
    """

    body: dict[str, Any]
    anomaly_flag: bool
    anomaly_score: float
    latency_ms: float
    model: str
    calibration_id: str
    request_id: str | None = None
    batch_id: str | None = None


class AuditStore(AuditReader):
    """The service's writable audit log (creates the file, the tables and WAL mode on first use).

    Args:
        path: the SQLite file (created with its folder when missing; an existing path must be a regular file).
        store_text: keep the query and context texts in the records (else only their SHA-256).
        busy_timeout: seconds a write waits for another connection's lock before it fails as ``locked``.

    Raises:
        ValueError: the path is a folder or a special file, or an audit log of another schema version.
        AuditDatabaseError: SQLite cannot open or set up the file (the message says why).
    """

    def __init__(self, path: str | Path, *, store_text: bool = True, busy_timeout: float = BUSY_TIMEOUT_S) -> None:
        super().__init__(path)
        self.store_text = store_text
        self.busy_timeout = float(busy_timeout)
        if not self.busy_timeout > 0:
            raise ValueError(f"busy_timeout must be > 0 seconds, got {busy_timeout}")
        self._lock = threading.Lock()
        self._written: tuple[int, str] | None = None  # the last (seq, hash) this store appended
        self._halted = False
        try:
            info = self.path.stat()
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise ValueError(f"The audit database {self.path} cannot be used: {exc.strerror or exc}.") from None
        if info is not None and not stat.S_ISREG(info.st_mode):
            what = "a folder" if stat.S_ISDIR(info.st_mode) else "a special file (device, pipe or socket)"
            raise ValueError(f"The audit database {self.path} is {what}, not a regular file: give a file name.")
        try:
            self._conn = self._open()
            self._identity = self._file_identity()
            with self._transaction() as conn:
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    conn.execute(statement)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('created_at', ?)", (utc_iso(time.time()),))
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('head_seq', '0')")
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('head_hash', ?)", (GENESIS,))
                version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        except sqlite3.Error as exc:
            raise database_error(exc, self.path) from None
        if str(version) != str(SCHEMA_VERSION):
            raise ValueError(f"{self.path}: audit schema version {version}, this server writes {SCHEMA_VERSION}")

    def _open(self) -> sqlite3.Connection:
        conn = _connect(self.path, readonly=False, timeout=self.busy_timeout)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        return conn

    def _file_identity(self) -> tuple[int, int]:
        info = os.stat(self.path)
        return info.st_dev, info.st_ino

    def _check_file(self) -> None:
        """Before a write: the file at ``path`` must still be the one this store writes to (caller holds the lock).

        Raises:
            AuditDatabaseError: the file was deleted (``missing``): writing on would put records into a file
                nobody can open again. A file replaced at the path (a restored copy) is reopened instead; the
                head checks of :meth:`_append` then decide whether the log may go on.
        """
        try:
            identity = self._file_identity()
        except FileNotFoundError:
            message = (
                f"The audit database {self.path} was deleted while the service runs; nothing was stored. Put the "
                "file back (the service then goes on) or restart the service to begin a new log."
            )
            logger.error(message)
            raise AuditDatabaseError(message, MISSING) from None
        except OSError as exc:
            raise AuditDatabaseError(f"The audit database {self.path} cannot be used: {exc}.", MISSING) from None
        if identity == self._identity:
            return
        logger.warning("The audit database %s was replaced by another file; reopening it.", self.path)
        with suppress(sqlite3.Error):
            self._conn.close()
        self._conn = self._open()
        self._identity = identity

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` under the store's lock; on any error a rollback, and an SQLite error
        leaves as :class:`AuditDatabaseError` (its kind says which fault)."""
        with self._lock:
            if self._halted:
                raise AuditDatabaseError(
                    "The audit service is stopping: nothing more is recorded. Retry once it is back.", MISSING, 5
                )
            try:
                self._check_file()
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                self._rollback()
                raise self._fault(exc) from None
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                if isinstance(exc, sqlite3.Error):
                    raise self._fault(exc) from None
                raise

    def _fault(self, exc: sqlite3.Error) -> AuditDatabaseError:
        """An SQLite error of a write as :class:`AuditDatabaseError`; after anything but a lock the connection is
        replaced, so pages it cached from a damaged or altered file are not reused once the file is repaired."""
        error = database_error(exc, self.path)
        if error.kind != LOCKED:
            with suppress(sqlite3.Error):
                self._conn.close()
            with suppress(sqlite3.Error):
                self._conn = self._open()
        return error

    def _rollback(self) -> None:
        with suppress(sqlite3.Error):  # no transaction open (BEGIN failed), or the connection is gone
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        """Close the writer connection."""
        with self._lock:
            self._conn.close()

    def stop_writes(self) -> bool:
        """Refuse every write that has not started yet, without waiting (safe on the event loop).

        Returns:
            ``True`` when no write was in progress (nothing more will be committed), ``False`` when one was (it
            may still commit).
        """
        idle = self._lock.acquire(blocking=False)
        self._halted = True
        if idle:
            self._lock.release()
        return idle

    def halt(self, timeout: float = 1.0) -> bool:
        """Stop writing: wait up to ``timeout`` s for a write in progress to commit, then refuse every later one.

        For a process about to exit (the service's forced stop): no commit is cut short, none starts after.

        Returns:
            Whether the store's lock was obtained in time (``False``: a write is still in progress).
        """
        if not self._lock.acquire(timeout=timeout):
            return False
        self._halted = True
        self._lock.release()
        return True

    def register_calibration(self, description: dict[str, Any]) -> str:
        """Keep a calibration's description (μ, σ, layers …) so the dashboard can draw a record's band.

        Returns:
            The stored description's content hash (SHA-256), which each record scored with it carries in the
            chain — so deleting or changing the calibration row breaks ``verify``.
        """
        text = canonical_json(description)
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO calibrations VALUES (?, ?, ?, ?)",
                (description["id"], utc_iso(time.time()), text, hashlib.sha256(text.encode("utf-8")).hexdigest()),
            )
            row = conn.execute("SELECT content_hash FROM calibrations WHERE id = ?", (description["id"],)).fetchone()
        return str(row[0])

    def find_request(self, request_id: str) -> list[dict[str, Any]]:
        """The full records stored under a client's ``request_id`` (or its batch items ``<id>#<i>``), in order."""
        with read_connection(self.path) as conn:
            return _request_records(conn, request_id)

    def append(self, entries: Sequence[Entry]) -> list[dict[str, Any]]:
        """Append records in one transaction, committed (and fsynced) before this returns.

        Returns:
            The stored records (as :meth:`get` returns them), in order.

        Raises:
            ChainHeadError: the last row is not the stored head (newest records deleted …): nothing is written.
            ValueError: a ``request_id`` already stored.
        """
        with self._transaction() as conn:
            out = self._append(conn, entries)
        self._committed(out)
        return out

    def append_request(
        self, request_id: str, fingerprint: dict[str, Any], entries: Sequence[Entry]
    ) -> tuple[list[dict[str, Any]], bool]:
        """Append the records of one client request, or return those already stored under its ``request_id``.

        The lookup and the insert run in one write transaction, so concurrent requests sharing an id store one
        set of records. ``fingerprint`` (``{"endpoint", "sha256", "items"}``) is each entry's ``request`` field.

        Returns:
            ``(records, replayed)``: ``replayed`` when the id was stored with the same fingerprint.

        Raises:
            RequestConflict: the id was stored for another endpoint or body.
            ChainHeadError: see :meth:`append`.
        """
        with self._transaction() as conn:
            found = _request_records(conn, request_id)
            if found:
                stored = [r.get("request") for r in found]
                if all(s == fingerprint for s in stored) and len(found) == int(fingerprint.get("items", 0)):
                    return found, True
                raise RequestConflict(conflict_message(request_id, found))
            out = self._append(conn, entries)
        self._committed(out)
        return out, False

    def _append(self, conn: sqlite3.Connection, entries: Sequence[Entry]) -> list[dict[str, Any]]:
        altered = schema_problem(conn)
        if altered is not None:
            message = (
                f"Refusing to append to {self.path}: {altered[1]} Nothing was written; run `python -m core audit "
                "verify` and restore the log's tables."
            )
            logger.error(message)
            raise AuditDatabaseError(message, SCHEMA)
        seq, prev = check_head(conn, self.path)  # refuses when the newest rows are gone
        mine = None
        if self._written is not None:
            row = conn.execute("SELECT hash FROM audits WHERE seq = ?", (self._written[0],)).fetchone()
            mine = None if row is None else row[0]
        if self._written is not None and (
            seq < self._written[0] or (seq == self._written[0] and prev != self._written[1]) or mine != self._written[1]
        ):  # rows and head rolled back together while this store runs (an edit, a restored copy, a lost -wal)
            message = (
                f"Refusing to append to {self.path}: this server wrote seq {self._written[0]} but the log now ends "
                f"at seq {seq}{' with another hash' if seq == self._written[0] else ''} (records deleted and the head "
                "edited, or an older copy restored). Nothing was written; run `python -m core audit verify`."
            )
            logger.error(message)
            raise ChainHeadError(message)
        out: list[dict[str, Any]] = []
        for entry in entries:
            seq += 1
            ts = time.time()
            record = {
                "seq": seq,
                "id": uuid.uuid4().hex,
                "created_at": utc_iso(ts),
                "request_id": entry.request_id,
                "batch_id": entry.batch_id,
                **entry.body,
            }
            text = canonical_json(record)
            digest = chain_hash(prev, text)
            try:
                conn.execute(
                    _INSERT,
                    (
                        seq,
                        record["id"],
                        record["created_at"],
                        ts,
                        entry.request_id,
                        entry.batch_id,
                        int(entry.anomaly_flag),
                        float(entry.anomaly_score),
                        float(entry.latency_ms),
                        entry.model,
                        entry.calibration_id,
                        text,
                        prev,
                        digest,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise ValueError(f"request_id {entry.request_id!r} is already stored") from exc
            record["chain"] = {"seq": seq, "prev_hash": prev, "hash": digest}
            out.append(record)
            prev = digest
        conn.execute("UPDATE meta SET value = ? WHERE key = 'head_seq'", (str(seq),))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'head_hash'", (prev,))
        return out

    def _committed(self, records: list[dict[str, Any]]) -> None:
        """Remember the newest (seq, hash) this store committed (the check in :meth:`_append`)."""
        if records:
            chain = records[-1]["chain"]
            if self._written is None or chain["seq"] > self._written[0]:
                self._written = (int(chain["seq"]), str(chain["hash"]))


class RequestConflict(ValueError):
    """A ``request_id`` already stored for another request (endpoint or body): the service answers 409."""


def _request_records(conn: sqlite3.Connection, request_id: str) -> list[dict[str, Any]]:
    """The records stored under ``request_id`` itself or its batch items ``<request_id>#<i>``, matched as exact
    strings: ``CaseX`` never finds ``casex#0`` (SQLite's ``LIKE`` ignores ASCII case), and ``_`` or ``%`` in an
    id are plain characters. The range ``<id>#`` ≤ x < ``<id>$`` holds exactly the texts that start with
    ``<id>#`` in SQLite's binary order (``$`` follows ``#``), and uses the ``request_id`` index."""
    rows = conn.execute(
        "SELECT seq, record, prev_hash, hash FROM audits "
        "WHERE request_id = ? OR (request_id >= ? AND request_id < ?) ORDER BY seq",
        (request_id, request_id + "#", request_id + "$"),
    ).fetchall()
    return [_full(r) for r in rows]


def conflict_message(request_id: str, found: list[dict[str, Any]]) -> str:
    request = found[0].get("request") or {}
    endpoint = request.get("endpoint", "an earlier request")
    first, last = found[0]["chain"]["seq"], found[-1]["chain"]["seq"]
    where = f"seq {first}" if first == last else f"seq {first}–{last}"
    return (
        f"request_id {request_id!r} was already used for a different request ({endpoint} with {len(found)} "
        f"item(s), stored as record(s) {where}). A retry must send the same body to the same endpoint; use a new "
        "request_id for a new request."
    )
