"""The audit log: SQLite (WAL), one row per audited pair, committed before the response, in a hash chain.

Every record is a JSON object (its inputs' SHA-256 and, unless the server runs with ``--no-store-text``, the
texts; the result; the model and its fingerprint; the calibration it was scored against; its place in the
chain). Its **canonical JSON** is ``json.dumps(record, sort_keys=True, separators=(",", ":"),
ensure_ascii=False, allow_nan=False)`` encoded as UTF-8, and

    hash_n = SHA-256( prev_hash_n ‖ canonical_json_n ),   prev_hash_n = hash_{n−1},   prev_hash_1 = "0" × 64

where ``prev_hash`` enters as its 64 lowercase hex characters (ASCII) and ``‖`` is byte concatenation. The
record holds its own sequence number ``seq`` (1, 2, 3 … without gaps) and ``id``, so moving a record to
another place breaks the chain too. The ``meta`` table keeps the chain's head (last ``seq`` and ``hash``),
updated in the same transaction as each append, so deleting the newest records is detected as well.
:func:`verify_chain` walks the chain and names the first record that was changed, deleted or re-ordered.

What a hash chain can and cannot prove: anyone who can rewrite the whole file can also recompute every hash
after the record they changed. Publish the head hash (``GET /stats`` → ``chain.head_hash``) somewhere the
server cannot write — a ticket, a signed e-mail, another machine — and check it with
``python -m core audit verify --db … --expect-head HASH``: then a rewritten history is caught too.

Writes: one connection per store guarded by the store's own lock (SQLite has one writer at a time anyway),
``BEGIN IMMEDIATE`` … ``COMMIT`` with ``synchronous=FULL``, so a record is on disk when :meth:`AuditStore.append`
returns — the service sends its response only after that. Reads use their own read-only connections (WAL lets
them run while a write is in progress).
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.io import cache_dir

SCHEMA_VERSION = 1
GENESIS = "0" * 64
"""``prev_hash`` of the first record."""
DB_ENV = "READ_OR_RECALL_AUDIT_DB"
"""Environment variable naming the audit database (``serve``'s default ``--db`` and the Audit log page's)."""

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
_COLUMNS = (
    "seq, id, created_at, ts, request_id, batch_id, anomaly_flag, anomaly_score, latency_ms, model, calibration_id"
)


def default_db_path() -> Path:
    """``$READ_OR_RECALL_AUDIT_DB``, else ``<cache_dir>/audit/audit.sqlite3`` (:func:`core.io.cache_dir`)."""
    env = os.environ.get(DB_ENV)
    if env:
        return Path(env).expanduser()
    return cache_dir() / "audit" / "audit.sqlite3"


def canonical_json(record: dict[str, Any]) -> str:
    """The one serialization that is hashed: sorted keys, no spaces, UTF-8 text, no NaN."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def chain_hash(prev_hash: str, canonical: str) -> str:
    """SHA-256 (hex) of ``prev_hash`` (64 hex characters) followed by the record's canonical JSON (UTF-8)."""
    return hashlib.sha256(prev_hash.encode("ascii") + canonical.encode("utf-8")).hexdigest()


def text_sha256(text: str) -> str:
    """SHA-256 (hex) of a text as UTF-8: what a record keeps of its inputs when texts are not stored."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def utc_iso(ts: float) -> str:
    """``2025-01-31T12:34:56.789Z`` for a Unix time."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1000):03d}Z"


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


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of walking the chain.

    Attributes:
        ok: every record is intact, in place, and the head matches.
        n_records: records read.
        head_seq, head_hash: the last record's, as found.
        problem: ``None``, or ``"changed"``, ``"deleted"``, ``"reordered"``, ``"inserted"``, ``"head"``.
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    if readonly:
        if not path.is_file():
            raise ValueError(f"No audit database at {path}.")
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0, check_same_thread=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=10.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    return conn


@contextmanager
def read_connection(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to an audit database (closed on exit).

    Raises:
        ValueError: no file there, or not an audit database.
    """
    conn = _connect(Path(path), readonly=True)
    try:
        try:
            conn.execute("SELECT seq FROM audits LIMIT 1")
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
            head = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('head_seq', 'head_hash')").fetchall())
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
            "chain": {"head_seq": int(head.get("head_seq", 0)), "head_hash": head.get("head_hash", GENESIS)},
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


class AuditStore(AuditReader):
    """The service's writable audit log (creates the file, the tables and WAL mode on first use)."""

    def __init__(self, path: str | Path, *, store_text: bool = True) -> None:
        super().__init__(path)
        self.store_text = store_text
        self._lock = threading.Lock()
        self._conn = _connect(self.path, readonly=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA busy_timeout=10000")
        with self._transaction() as conn:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('created_at', ?)", (utc_iso(time.time()),))
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('head_seq', '0')")
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('head_hash', ?)", (GENESIS,))
            version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        if int(version) != SCHEMA_VERSION:
            raise ValueError(f"{self.path}: audit schema version {version}, this server writes {SCHEMA_VERSION}")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def close(self) -> None:
        """Close the writer connection."""
        with self._lock:
            self._conn.close()

    def register_calibration(self, description: dict[str, Any]) -> None:
        """Keep a calibration's description (μ, σ, layers …) so the dashboard can draw a record's band."""
        text = canonical_json(description)
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO calibrations VALUES (?, ?, ?, ?)",
                (description["id"], utc_iso(time.time()), text, hashlib.sha256(text.encode("utf-8")).hexdigest()),
            )

    def find_request(self, request_id: str) -> list[dict[str, Any]]:
        """The full records stored under a client's ``request_id`` (or its batch items ``<id>#<i>``), in order."""
        with read_connection(self.path) as conn:
            rows = conn.execute(
                "SELECT seq, record, prev_hash, hash FROM audits WHERE request_id = ? OR request_id LIKE ? ESCAPE '\\' "
                "ORDER BY seq",
                (request_id, request_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "#%"),
            ).fetchall()
        return [_full(r) for r in rows]

    def append(self, entries: Sequence[Entry]) -> list[dict[str, Any]]:
        """Append records in one transaction, committed (and fsynced) before this returns.

        Returns:
            The stored records (as :meth:`get` returns them), in order.

        Raises:
            ValueError: a ``request_id`` already stored (the caller returns the stored records instead).
        """
        out: list[dict[str, Any]] = []
        with self._transaction() as conn:
            head = conn.execute("SELECT seq, hash FROM audits ORDER BY seq DESC LIMIT 1").fetchone()
            seq, prev = (int(head[0]), str(head[1])) if head else (0, GENESIS)
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
                        "INSERT INTO audits VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        if isinstance(value, float) or isinstance(stored, float):
            if value is None or stored is None or abs(float(stored) - float(value)) > 1e-9 * max(1.0, abs(value)):
                return column
        elif stored != value:
            return column
    if abs(float(row["ts"]) - _parse_iso(record.get("created_at", ""))) > 0.002:
        return "ts"
    return None


def _parse_iso(text: str) -> float:
    try:
        base, frac = text.rstrip("Z").split(".")
        return calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S")) + int(frac) / 1000
    except (ValueError, TypeError, AttributeError):
        return float("nan")


def verify_chain(path: str | Path, *, expect_head: str | None = None) -> VerifyReport:
    """Walk the hash chain and name the first record that was changed, deleted, inserted or re-ordered.

    Checks, record by record in ``seq`` order: the stored JSON parses and names its own place (``seq``,
    ``id``) — else the record was moved (**reordered**); ``seq`` follows the previous one without a gap —
    else records were **deleted**; ``prev_hash`` is the previous record's hash — else a record was
    **deleted** or **inserted** before it; SHA-256(prev_hash ‖ JSON) is the stored hash and the indexed
    columns agree with the JSON — else it was **changed**. Then the last record must be the head the store
    recorded (newest records deleted → **deleted**) and, with ``expect_head``, the hash published earlier must
    be on the chain (**head**). Every calibration description must match its content hash (**changed**).

    Raises:
        ValueError: no database at ``path``.
    """
    with read_connection(path) as conn:
        conn.execute("BEGIN")  # one snapshot: a record the server commits meanwhile is not half-seen
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        calibrations = conn.execute("SELECT id, description, content_hash FROM calibrations").fetchall()
        cursor = conn.execute(f"SELECT {_COLUMNS}, record, prev_hash, hash FROM audits ORDER BY seq")
        prev_hash, prev_seq, n = GENESIS, 0, 0
        seen_hashes: set[str] = set()

        def bad(problem: str, row: sqlite3.Row | None, message: str) -> VerifyReport:
            return VerifyReport(
                False,
                n,
                prev_seq,
                prev_hash,
                problem,
                None if row is None else int(row["seq"]),
                None if row is None else str(row["id"]),
                message,
            )

        for row in cursor:
            seq, rid = int(row["seq"]), str(row["id"])
            try:
                record = json.loads(row["record"])
                claimed_seq, claimed_id = int(record["seq"]), str(record["id"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                return bad("changed", row, f"record {rid} at seq {seq}: its stored JSON is unreadable (changed).")
            if claimed_seq != seq or claimed_id != rid:
                return bad(
                    "reordered",
                    row,
                    f"record {claimed_id} (written as seq {claimed_seq}) sits at seq {seq}: the log was re-ordered.",
                )
            if seq != prev_seq + 1:
                return bad(
                    "deleted",
                    row,
                    f"records {prev_seq + 1}–{seq - 1} are missing before record {rid} (seq {seq}): deleted.",
                )
            if row["prev_hash"] != prev_hash:
                return bad(
                    "deleted",
                    row,
                    f"record {rid} (seq {seq}) does not follow the record before it (prev_hash differs): a record "
                    "before it was deleted, replaced or inserted.",
                )
            text = row["record"]
            if canonical_json(record) != text or chain_hash(prev_hash, text) != row["hash"]:
                return bad("changed", row, f"record {rid} (seq {seq}) was changed after it was written.")
            column = _column_mismatch(row, record)
            if column is not None:
                return bad("changed", row, f"record {rid} (seq {seq}): column {column!r} was changed.")
            prev_hash, prev_seq = row["hash"], seq
            seen_hashes.add(prev_hash)
            n += 1
    head_seq, head_hash = int(meta.get("head_seq", 0)), meta.get("head_hash", GENESIS)
    if (head_seq, head_hash) != (prev_seq, prev_hash):
        if head_seq > prev_seq:
            message = f"records {prev_seq + 1}–{head_seq} were deleted (the log ends at seq {prev_seq})."
            problem = "deleted"
        else:
            message = f"the recorded head (seq {head_seq}) does not match the last record (seq {prev_seq})."
            problem = "changed"
        return VerifyReport(False, n, prev_seq, prev_hash, problem, prev_seq + 1, None, message)
    if expect_head is not None and expect_head not in seen_hashes | {GENESIS}:
        return VerifyReport(
            False, n, prev_seq, prev_hash, "head", None, None,
            f"the published head {expect_head[:16]}… is not on this chain: the history was rewritten.",
        )  # fmt: skip
    for cid, description, content_hash in calibrations:
        if hashlib.sha256(description.encode("utf-8")).hexdigest() != content_hash:
            return VerifyReport(
                False, n, prev_seq, prev_hash, "changed", None, None, f"calibration {cid} was changed."
            )  # fmt: skip
    return VerifyReport(True, n, prev_seq, prev_hash, None, None, None, f"{n} records, chain intact.")
