"""The audit log: WAL, the hash chain recomputed independently, and tampering found by editing the SQLite file."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from core.audit.store import GENESIS, AuditDatabaseError, AuditReader, AuditStore, ChainHeadError, Entry, verify_chain
from core.cli import main

ROOT = Path(__file__).resolve().parents[3]


def entry(i: int, flag: bool = False) -> Entry:
    result = {"anomaly_flag": flag, "anomaly_score": 0.5 + i, "lts_trajectory": [0.0, i * 0.1], "latency_ms": 10.0 + i}
    return Entry(
        body={
            "inputs": {"query_sha256": "q", "context_sha256": "c"},
            "result": result,
            "model": {"name": "m"},
            "calibration": {"id": "cal"},
        },
        anomaly_flag=flag,
        anomaly_score=0.5 + i,
        latency_ms=10.0 + i,
        model="m",
        calibration_id="cal",
        request_id=f"r{i}",
    )


@pytest.fixture
def filled(tmp_path):
    path = tmp_path / "log.sqlite3"
    store = AuditStore(path)
    records = store.append([entry(0), entry(1, True)]) + store.append([entry(2), entry(3), entry(4, True)])
    store.close()
    return path, records


def _edit(path, sql, params=()):
    conn = sqlite3.connect(path)
    conn.execute(sql, params)
    conn.commit()
    conn.close()


def test_wal_and_the_chain_recomputed_independently(filled):
    path, records = filled
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    rows = conn.execute("SELECT seq, record, prev_hash, hash FROM audits ORDER BY seq").fetchall()
    conn.close()
    prev = "0" * 64
    for (seq, text, prev_hash, digest), rec in zip(rows, records):
        body = json.loads(text)
        assert body["seq"] == seq and body["id"] == rec["id"]
        assert text == json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert prev_hash == prev
        assert digest == hashlib.sha256((prev + text).encode()).hexdigest() == rec["chain"]["hash"]
        prev = digest
    report = verify_chain(path)
    assert report.ok and report.n_records == 5 and report.head_hash == prev and report.head_seq == 5


def test_a_changed_record_is_named(filled):
    path, records = filled
    _edit(
        path,
        "UPDATE audits SET record = replace(record, '\"anomaly_score\":2.5', '\"anomaly_score\":0.1') WHERE seq = 3",
    )
    report = verify_chain(path)
    assert not report.ok and report.problem == "changed" and report.record_id == records[2]["id"] and report.seq == 3


def test_a_changed_indexed_column_is_named(filled):
    path, records = filled
    _edit(path, "UPDATE audits SET anomaly_flag = 0 WHERE seq = 2")
    report = verify_chain(path)
    assert report.problem == "changed" and report.record_id == records[1]["id"] and "anomaly_flag" in report.message


def test_a_deleted_record_is_found(filled):
    path, records = filled
    _edit(path, "DELETE FROM audits WHERE seq = 2")
    report = verify_chain(path)
    assert report.problem == "deleted" and report.seq == 3 and report.record_id == records[2]["id"]
    assert "2–2" in report.message


def test_a_deleted_and_renumbered_record_is_found(filled):
    path, records = filled
    _edit(path, "DELETE FROM audits WHERE seq = 2")
    for seq in (3, 4, 5):  # close the gap, JSON and all: the prev_hash link still breaks
        _edit(
            path,
            "UPDATE audits SET seq = ?, record = replace(record, ?, ?) WHERE seq = ?",
            (seq - 1, f'"seq":{seq}', f'"seq":{seq - 1}', seq),
        )
    report = verify_chain(path)
    assert not report.ok and report.seq == 2 and report.record_id == records[2]["id"]


def test_the_newest_records_deleted_are_found(filled):
    path, _ = filled
    _edit(path, "DELETE FROM audits WHERE seq >= 4")
    report = verify_chain(path)
    assert report.problem == "deleted" and "4–5" in report.message


def test_reordered_records_are_named(filled):
    path, records = filled
    _edit(path, "UPDATE audits SET seq = -1 WHERE seq = 2")
    _edit(path, "UPDATE audits SET seq = 2 WHERE seq = 3")
    _edit(path, "UPDATE audits SET seq = 3 WHERE seq = -1")
    report = verify_chain(path)
    assert report.problem == "reordered" and report.seq == 2 and report.record_id == records[2]["id"]


def test_an_expected_head_catches_a_rewritten_history(filled, tmp_path):
    path, records = filled
    head = records[-1]["chain"]["hash"]
    assert verify_chain(path, expect_head=head).ok
    other = AuditStore(tmp_path / "other.sqlite3")
    other.append([entry(9)])
    other.close()
    report = verify_chain(tmp_path / "other.sqlite3", expect_head=head)
    assert report.problem == "head"


def test_a_changed_calibration_description_is_found(tmp_path):
    store = AuditStore(tmp_path / "c.sqlite3")
    store.register_calibration({"id": "cal", "mu": [0.0, 1.0], "sigma": [0.0, 1.0]})
    store.close()
    assert verify_chain(tmp_path / "c.sqlite3").ok
    _edit(tmp_path / "c.sqlite3", "UPDATE calibrations SET description = replace(description, '1.0', '9.0')")
    assert verify_chain(tmp_path / "c.sqlite3").problem == "changed"


def test_request_ids_are_unique_and_found(tmp_path):
    store = AuditStore(tmp_path / "r.sqlite3")
    store.append([entry(1)])
    with pytest.raises(ValueError, match="already stored"):
        store.append([entry(1)])
    assert [r["request_id"] for r in store.find_request("r1")] == ["r1"]
    assert verify_chain(tmp_path / "r.sqlite3").n_records == 1  # the failed append left nothing behind
    store.close()


def test_reader_paging_filters_and_stats(filled):
    path, records = filled
    reader = AuditReader(path)
    total, page = reader.history(limit=2, offset=0)
    assert total == 5 and [r["seq"] for r in page] == [5, 4]
    total, page = reader.history(limit=10, flag=True)
    assert total == 2 and {r["seq"] for r in page} == {2, 5}
    total, _ = reader.history(since=1e12)
    assert total == 0
    stats = reader.stats()
    assert stats["records"] == 5 and stats["anomalies"] == 2 and stats["anomaly_rate"] == pytest.approx(0.4)
    assert stats["latency_ms"]["p50"] == 12.0 and stats["chain"]["head_hash"] == records[-1]["chain"]["hash"]
    assert reader.get(records[0]["id"])["chain"]["prev_hash"] == GENESIS
    assert reader.get("nope") is None


def test_verify_command_exit_codes(filled, capsys):
    path, records = filled
    assert main(["audit", "verify", "--db", str(path)]) == 0
    assert "5 records, chain intact" in capsys.readouterr().out
    _edit(
        path,
        "UPDATE audits SET record = replace(record, '\"lts_trajectory\":[0.0,0.1]', '\"lts_trajectory\":[0.0,0.2]')",
    )
    assert main(["audit", "verify", "--db", str(path)]) == 1
    out = capsys.readouterr().out
    assert "BROKEN (changed)" in out and records[1]["id"] in out
    assert main(["audit", "verify", "--db", str(path.parent / "missing.sqlite3")]) == 2


def test_concurrent_appends_and_verifies_stay_consistent(tmp_path):
    import threading

    path = tmp_path / "busy.sqlite3"
    store = AuditStore(path)
    reports = []

    def writer(k: int) -> None:
        for i in range(15):
            store.append([Entry(**{**entry(i).__dict__, "request_id": f"w{k}-{i}"})])

    def checker() -> None:
        for _ in range(10):
            reports.append(verify_chain(path))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)] + [threading.Thread(target=checker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    assert all(r.ok for r in reports), [r.message for r in reports if not r.ok]
    final = verify_chain(path)
    assert final.ok and final.n_records == 45 and final.head_seq == 45


# -- issue 25: the second audit's attacks on the chain -------------------------------------------------------------


def test_deleting_the_newest_records_is_not_hidden_by_the_next_append(filled, caplog):
    """Item 2: DELETE the last three rows while the server runs; the next append used to reuse seq 3–5 and
    leave a chain that verified as intact. Now the append is refused, logged, and verify still says deleted."""
    import logging

    path, _ = filled
    store = AuditStore(path)  # the running server's store
    _edit(path, "DELETE FROM audits WHERE seq >= 3")
    assert verify_chain(path).problem == "deleted"
    with caplog.at_level(logging.ERROR), pytest.raises(ChainHeadError, match="Refusing to append"):
        store.append([entry(7)])
    assert "records 3–5 were deleted" in caplog.text
    store.close()
    report = verify_chain(path)
    assert not report.ok and report.problem == "deleted" and "3–5" in report.message
    conn = sqlite3.connect(path)
    assert [r[0] for r in conn.execute("SELECT seq FROM audits ORDER BY seq")] == [1, 2]  # nothing reused
    conn.close()


def test_rows_and_head_rolled_back_together_are_refused_by_the_running_store(tmp_path):
    """Item 2: deleting the newest rows *and* fixing ``meta`` leaves a chain that verifies, but the running server
    remembers what it wrote and still refuses to reuse the sequence numbers."""
    path = tmp_path / "log.sqlite3"
    store = AuditStore(path)
    kept = store.append([entry(0), entry(1)])
    store.append([entry(2), entry(3)])
    _edit(path, "DELETE FROM audits WHERE seq >= 3")
    _edit(path, "UPDATE meta SET value = '2' WHERE key = 'head_seq'")
    _edit(path, "UPDATE meta SET value = ? WHERE key = 'head_hash'", (kept[-1]["chain"]["hash"],))
    assert verify_chain(path).ok  # consistent on its own: only a published head would show it
    with pytest.raises(ChainHeadError, match="this server wrote seq 4 but the log now ends at seq 2"):
        store.append([entry(5)])
    store.close()
    assert verify_chain(path).n_records == 2


def test_an_edited_head_refuses_appends_and_breaks_verify(filled):
    path, _ = filled
    _edit(path, "UPDATE meta SET value = 'x' WHERE key = 'head_seq'")
    report = verify_chain(path)  # used to raise ValueError (exit 2, "no database")
    assert not report.ok and report.problem == "changed" and "head_seq" in report.message
    store = AuditStore(path)
    with pytest.raises(ChainHeadError):
        store.append([entry(8)])
    store.close()
    assert main(["audit", "verify", "--db", str(path)]) == 1


@pytest.mark.parametrize(
    ("sql", "column"),
    [
        ("UPDATE audits SET ts = 'yesterday' WHERE seq = 2", "ts"),
        ("UPDATE audits SET anomaly_score = 'high' WHERE seq = 2", "anomaly_score"),
        ("UPDATE audits SET latency_ms = NULL WHERE seq = 2", None),  # NOT NULL: refused by SQLite itself
    ],
)
def test_text_in_numeric_columns_is_reported_as_changed(filled, sql, column, capsys):
    """Item 8: text in ts or anomaly_score made verify raise and the CLI exit 2 ("no database")."""
    path, records = filled
    if column is None:
        with pytest.raises(sqlite3.IntegrityError):
            _edit(path, sql)
        return
    _edit(path, sql)
    report = verify_chain(path)
    assert report.problem == "changed" and report.record_id == records[1]["id"] and column in report.message
    assert main(["audit", "verify", "--db", str(path)]) == 1
    assert "BROKEN (changed)" in capsys.readouterr().out


def test_a_deleted_calibration_row_is_found_through_the_chain(tmp_path):
    """Item 8: a record carries its calibration's content hash, so deleting the calibration row breaks verify."""
    store = AuditStore(tmp_path / "c.sqlite3")
    content_hash = store.register_calibration({"id": "cal", "mu": [0.0, 1.0], "sigma": [0.0, 1.0]})
    base = entry(1)
    store.append(
        [Entry(**{**base.__dict__, "body": {**base.body, "calibration": {"id": "cal", "content_hash": content_hash}}})]
    )
    store.close()
    assert verify_chain(tmp_path / "c.sqlite3").ok
    _edit(tmp_path / "c.sqlite3", "DELETE FROM calibrations")
    report = verify_chain(tmp_path / "c.sqlite3")
    assert report.problem == "deleted" and "calibration cal" in report.message and report.seq == 1


@pytest.mark.parametrize("head", ["", "   ", "abc", "g" * 64])
def test_a_malformed_expected_head_is_a_usage_error_not_a_rewritten_history(filled, head, capsys):
    """Item 8: ``--expect-head ""`` was reported as "history rewritten"."""
    path, _ = filled
    with pytest.raises(ValueError, match="64 hex"):
        verify_chain(path, expect_head=head)
    assert main(["audit", "verify", "--db", str(path), "--expect-head", head]) == 2
    captured = capsys.readouterr()
    assert "64 hex" in captured.err and "rewritten" not in captured.out + captured.err


def test_an_older_copy_restored_is_caught_by_the_published_head(filled, tmp_path):
    """Item 2: restoring an older backup leaves a consistent chain; only a head kept elsewhere catches it."""
    import shutil

    path, _ = filled
    backup = tmp_path / "backup.sqlite3"
    shutil.copy(path, backup)
    store = AuditStore(path)
    head = store.append([entry(5)])[-1]["chain"]["hash"]
    store.close()
    shutil.copy(backup, path)
    assert verify_chain(path).ok  # consistent on its own …
    report = verify_chain(path, expect_head=head.upper())
    assert report.problem == "head" and "older copy" in report.message  # … but not the published head


def _verify_without_write_access(path) -> tuple[int, str]:
    """``verify_chain`` in a process that cannot write the database's folder (the folder made read-only; as root,
    the process also loses the capabilities that override file permissions)."""
    import os
    import shutil
    import subprocess
    import sys

    code = (
        "import json, sys; from core.audit.store import verify_chain; r = verify_chain(sys.argv[1]); "
        "print(json.dumps(r.to_dict()))"
    )
    command = [sys.executable, "-c", code, str(path)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot take away write access")
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", *command]
    os.chmod(path.parent, 0o555)
    try:
        out = subprocess.run(
            command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False
        )
    finally:
        os.chmod(path.parent, 0o755)
    if out.returncode != 0 and out.stderr.startswith("setpriv"):
        pytest.skip(f"setpriv cannot drop capabilities here: {out.stderr.strip()}")
    return out.returncode, out.stdout + out.stderr


def test_the_read_only_open_needs_no_write_access_to_the_folder(filled):
    """Item 7: with no -wal/-shm and a folder this user cannot write, verify failed with "not an audit database"."""
    path, _ = filled
    assert not (path.parent / f"{path.name}-shm").exists()
    code, out = _verify_without_write_access(path)
    assert code == 0, out
    assert '"ok": true' in out and '"n_records": 5' in out


# -- issue 37: the third audit ------------------------------------------------------------------------------------


def _zero_page(path: Path, table_or_index: str | None = None) -> None:
    """Checkpoint the WAL, then overwrite one page of the main file with zeros: the root page of
    ``table_or_index``, else the last page (a data leaf of ``audits``)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    if table_or_index is None:
        page = conn.execute("PRAGMA page_count").fetchone()[0]
    else:
        page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table_or_index,)).fetchone()[0]
    conn.close()
    with path.open("r+b") as fh:
        fh.seek((page - 1) * size)
        fh.write(bytes(size))


def test_request_ids_are_matched_as_exact_strings(tmp_path):
    """Item A: ``LIKE '<id>#%'`` ignored ASCII case, so a batch "CaseX" answered for "casex"."""
    store = AuditStore(tmp_path / "ids.sqlite3")
    fingerprint = {"endpoint": "POST /audit/batch", "sha256": "f" * 64, "items": 2}
    items = [Entry(**{**entry(i).__dict__, "request_id": f"CaseX#{i}"}) for i in range(2)]
    store.append_request("CaseX", fingerprint, items)
    store.append([Entry(**{**entry(5).__dict__, "request_id": "CaseXY#0"})])
    assert [r["request_id"] for r in store.find_request("CaseX")] == ["CaseX#0", "CaseX#1"]
    assert store.find_request("casex") == [] and store.find_request("CASEX") == []
    assert [r["request_id"] for r in AuditReader(store.path).requests_with_prefix("CaseX")] == [
        "CaseX#0",
        "CaseX#1",
        "CaseXY#0",
    ]
    assert AuditReader(store.path).requests_with_prefix("casex") == []
    store.close()


@pytest.mark.parametrize("target", ["audits_flag", "audits_ts", None], ids=["flag-index", "ts-index", "data-page"])
def test_a_damaged_file_is_its_own_outcome_never_ok(filled, target, capsys):
    """Item E: a zeroed index page verified "ok: chain intact"; a zeroed data page was "unexpected DatabaseError"."""
    path, _ = filled
    _zero_page(path, target)
    assert all(r[0] != "ok" for r in sqlite3.connect(path).execute("PRAGMA quick_check"))  # SQLite rejects it
    report = verify_chain(path)
    assert not report.ok and report.problem == "damaged" and "damaged" in report.message
    assert main(["audit", "verify", "--db", str(path)]) == 3
    out, err = capsys.readouterr()
    assert out.startswith("DAMAGED: ") and "unexpected" not in err


def test_a_dropped_table_and_an_added_column_are_reported_not_raised(filled, capsys):
    """Item E: ``DROP TABLE calibrations`` was "unexpected OperationalError", exit 2 ("no database")."""
    path, _ = filled
    _edit(path, "DROP TABLE calibrations")
    report = verify_chain(path)
    assert report.problem == "deleted" and "calibrations table" in report.message
    assert main(["audit", "verify", "--db", str(path)]) == 1
    assert "BROKEN (deleted)" in capsys.readouterr().out
    _edit(path, "CREATE TABLE calibrations (id TEXT PRIMARY KEY, created_at TEXT NOT NULL, description TEXT NOT NULL, "
                "content_hash TEXT NOT NULL)")  # fmt: skip
    _edit(path, "ALTER TABLE audits ADD COLUMN note TEXT")
    report = verify_chain(path)
    assert report.problem == "changed" and "column(s) added: note" in report.message


def test_stored_text_that_is_not_utf8_is_a_changed_record_not_an_error(filled, capsys):
    """Item E: flipped bytes inside a record were "unexpected OperationalError: Could not decode to UTF-8"."""
    path, records = filled
    _edit(path, "UPDATE audits SET record = CAST(X'7B22FF223A317D' AS TEXT) WHERE seq = 2")
    _edit(path, "UPDATE audits SET created_at = CAST(X'C328' AS TEXT) WHERE seq = 4")
    report = verify_chain(path)
    assert report.problem == "changed" and report.record_id == records[1]["id"]
    assert main(["audit", "verify", "--db", str(path)]) == 1
    reader = AuditReader(path)  # the dashboard's reads go on
    assert reader.stats()["records"] == 5 and len(reader.timeline()) == 5 and reader.history()[0] == 5
    assert reader.get(records[1]["id"])["chain"]["seq"] == 2  # shown as found (verify names it)
    _edit(path, "UPDATE audits SET record = 'not json' WHERE seq = 3")
    with pytest.raises(ValueError, match="not readable JSON"):
        reader.get(records[2]["id"])


def test_a_store_refuses_a_folder_or_a_device(tmp_path):
    with pytest.raises(ValueError, match="is a folder"):
        AuditStore(tmp_path)
    if Path("/dev/null").exists():
        with pytest.raises(ValueError, match="special file"):
            AuditStore("/dev/null")


def test_writes_under_operational_faults_are_refused_with_a_reason_and_go_on_once_the_fault_is_gone(tmp_path):
    """Item D: a held lock, an added column, a deleted file and a damaged page each raised a raw SQLite error
    (HTTP 500); a deleted file was even written to (records lost in an unlinked inode)."""
    path = tmp_path / "faults.sqlite3"
    store = AuditStore(path, busy_timeout=0.2)
    store.append([entry(0)])

    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(AuditDatabaseError, match="locked") as locked:
        store.append([entry(1)])
    assert locked.value.kind == "locked"
    holder.execute("ROLLBACK")
    holder.close()
    store.append([entry(1)])

    _edit(path, "ALTER TABLE audits ADD COLUMN note TEXT")
    with pytest.raises(AuditDatabaseError, match="column\\(s\\) added: note") as altered:
        store.append([entry(2)])
    assert altered.value.kind == "schema"
    _edit(path, "ALTER TABLE audits DROP COLUMN note")
    store.append([entry(2)])

    backup = tmp_path / "backup.sqlite3"
    src, dst = sqlite3.connect(path), sqlite3.connect(backup)
    src.backup(dst)
    src.close()
    dst.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(AuditDatabaseError, match="was deleted") as missing:
        store.append([entry(3)])
    assert missing.value.kind == "missing" and not path.exists()  # nothing written into the unlinked file
    shutil.copy(backup, path)
    assert store.append([entry(3)])[0]["chain"]["seq"] == 4  # the restored file is reopened and goes on

    _zero_page(path, "audits_flag")
    with pytest.raises(AuditDatabaseError) as damaged:
        store.append([entry(4)])
    assert damaged.value.kind == "damaged"
    store.close()


def test_a_restored_older_copy_is_refused_by_the_running_store(tmp_path):
    path = tmp_path / "old.sqlite3"
    store = AuditStore(path)
    store.append([entry(0)])
    older = tmp_path / "older.sqlite3"
    src, dst = sqlite3.connect(path), sqlite3.connect(older)
    src.backup(dst)
    src.close()
    dst.close()
    store.append([entry(1)])
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    older.replace(path)  # the older copy put in the log's place: it lacks the record this store wrote last
    with pytest.raises(ChainHeadError, match="this server wrote seq 2"):
        store.append([entry(2)])
    store.close()
