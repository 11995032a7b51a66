"""The audit service as a real ``python -m core serve`` process, under the third audit's probes (issue 37):
request ids that differ only in case (A), a body that never arrives (B), operational faults of the database —
a lock held by another connection, a column added, the file deleted, a damaged index page — each a 503 that a
retry gets past once the fault is gone (D), and the validation leftovers (F): noncharacter-only text, JSON
nested thousands deep, a token file saved with a byte-order mark.

One server serves the module (tiny random Llama, ``--db-timeout 0.5``, ``--body-timeout 1``, its token in a
file that starts with a BOM); each fault is undone before the test ends.
"""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from core.audit.store import verify_chain
from core.io import REPO_ROOT
from tests.unit.audit.conftest import AUTH, PAIR, TOKEN
from tests.unit.audit.live import LiveServer, calibration_file, model_folder

OTHER = {"query": "Who founded Marrowgate?", "context": "Salt traders founded Marrowgate in 1412."}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("live")
    folder = model_folder(root / "model")
    token_file = root / "token.txt"
    token_file.write_bytes("\ufeff".encode() + TOKEN.encode() + b"\n")  # saved by an editor that adds a BOM
    server = LiveServer(
        folder,
        calibration_file(folder, root / "calib.npz"),
        root / "audit.sqlite3",
        root / "serve.log",
        ["--token-file", str(token_file), "--db-timeout", "0.5", "--body-timeout", "1"],
    )
    server.start()
    yield server
    server.kill()


def _sql(db: Path, *statements: str) -> None:
    conn = sqlite3.connect(db)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def _no_500(response: httpx.Response) -> httpx.Response:
    assert response.status_code != 500 and "Traceback" not in response.text, response.text
    return response


def _unavailable(response: httpx.Response, reason: str) -> None:
    assert response.status_code == 503, response.text
    assert reason in response.json()["detail"] and int(response.headers["retry-after"]) > 0


# -- A: request ids are exact strings ----------------------------------------------------------------------------


def test_request_ids_that_differ_only_in_case_are_different_requests(live):
    first = live.post("/audit/batch", {"items": [PAIR, OTHER], "request_id": "CaseX"})
    assert first.status_code == 200, first.text
    lower = live.post("/audit/batch", {"items": [PAIR, OTHER], "request_id": "casex"})
    assert lower.status_code == 200 and "x-audit-replay" not in lower.headers  # scored, not CaseX's records
    assert {r["id"] for r in lower.json()["records"]}.isdisjoint(r["id"] for r in first.json()["records"])
    assert live.post("/audit/batch", {"items": [OTHER], "request_id": "CASEX"}).status_code == 200  # not a 409
    assert live.post("/audit", {**PAIR, "request_id": "cAsEx"}).status_code == 200  # not a 409
    again = live.post("/audit/batch", {"items": [PAIR, OTHER], "request_id": "CaseX"})
    assert again.headers.get("x-audit-replay") == "true"
    assert [r["id"] for r in again.json()["records"]] == [r["id"] for r in first.json()["records"]]
    assert live.post("/audit", {**PAIR, "request_id": "casex"}).status_code == 409  # a batch's id, exactly


# -- B: a body that never arrives --------------------------------------------------------------------------------


def test_a_body_shorter_than_its_content_length_times_out_with_408(live):
    head = (
        f"POST /audit HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", live.port), timeout=60) as sock:
        sock.sendall(head.encode() + b'{"query": "q", ')  # 15 of the 1,000 bytes promised, then nothing
        answer = b""
        while chunk := sock.recv(65536):  # the server answers, then closes the connection
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"did not arrive within 1 s" in answer and b"1,000 bytes" in answer
    assert live.get("/stats").json()["since_start"]["rejected_body_timeout"] >= 1


# -- F: validation leftovers ---------------------------------------------------------------------------------------


def test_a_token_file_starting_with_a_bom_holds_the_token_without_it(live):
    assert live.get("/stats").status_code == 200  # the server was started with a BOM-prefixed token file
    bom = httpx.get(f"{live.url}/stats", headers={"Authorization": b"Bearer \xef\xbb\xbf" + TOKEN.encode()}, timeout=30)
    assert bom.status_code == 401  # the BOM was not made part of the token


@pytest.mark.parametrize("text", ["\uffff\ufffe", "\ufffe", "\ufdd0 \U0010ffff\u200b"])
def test_a_query_of_noncharacters_only_is_422(live, text):
    r = _no_500(live.post("/audit", {"query": text, "context": "The capital of Veltria is Marrowgate."}))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "query"]
    r = _no_500(live.post("/audit/batch", {"items": [PAIR, {"query": "q?", "context": text}]}))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "items", 1, "context"]


def test_json_nested_thousands_deep_is_422_not_400(live):
    body = '{"query": "q", "context": "c", "extra": ' + "[" * 5000 + "]" * 5000 + "}"
    r = _no_500(
        httpx.post(f"{live.url}/audit", content=body, headers={**AUTH, "Content-Type": "application/json"}, timeout=30)
    )
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body"] and "levels deep" in r.json()["detail"][0]["msg"]


# -- D: operational faults of the database ------------------------------------------------------------------------


def test_a_database_locked_by_another_connection_is_503_and_a_retry_succeeds(live):
    holder = sqlite3.connect(live.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # held past the server's --db-timeout of 0.5 s
    try:
        _unavailable(live.post("/audit", PAIR), "locked")
        _unavailable(live.post("/audit/batch", {"items": [PAIR, OTHER]}), "locked")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert live.post("/audit", PAIR).status_code == 200


def test_a_column_added_to_the_log_is_503_and_a_retry_succeeds_once_it_is_gone(live):
    before = live.get("/history?limit=1").json()["total"]
    _sql(live.db, "ALTER TABLE audits ADD COLUMN note TEXT")
    try:
        _unavailable(live.post("/audit", PAIR), "column(s) added: note")
        _unavailable(live.post("/audit/batch", {"items": [PAIR, OTHER]}), "column(s) added: note")
        assert live.get("/history?limit=1").json()["total"] == before  # nothing was written
    finally:
        _sql(live.db, "ALTER TABLE audits DROP COLUMN note")
    assert live.post("/audit/batch", {"items": [PAIR, OTHER]}).status_code == 200
    assert verify_chain(live.db).ok


def test_a_deleted_database_is_503_everywhere_and_the_restored_file_is_used(live, tmp_path):
    backup = tmp_path / "backup.sqlite3"
    src, dst = sqlite3.connect(live.db), sqlite3.connect(backup)
    src.backup(dst)
    src.close()
    dst.close()
    n = live.get("/history?limit=1").json()["total"]
    for suffix in ("", "-wal", "-shm"):
        Path(f"{live.db}{suffix}").unlink(missing_ok=True)
    try:
        _unavailable(live.post("/audit", PAIR), "deleted")  # never written into the deleted file
        for path in ("/history", "/stats", "/history?flag=true"):
            _unavailable(live.get(path), "No audit database")
    finally:
        shutil.copy(backup, live.db)
    after = live.post("/audit", PAIR)
    assert after.status_code == 200 and after.json()["seq"] == n + 1
    assert live.get("/history?limit=1").json()["total"] == n + 1 and verify_chain(live.db).ok


def test_a_damaged_index_page_is_503_verify_says_damaged_and_a_retry_succeeds_once_it_is_repaired(live):
    assert live.post("/audit", {**PAIR, "query": "A flagged-or-not question?"}).status_code == 200
    conn = sqlite3.connect(live.db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the main file
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'audits_flag'").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with live.db.open("r+b") as fh:
        fh.seek((root - 1) * size)
        page = fh.read(size)
        fh.seek((root - 1) * size)
        fh.write(bytes(size))
    try:
        verify = subprocess.run(
            [sys.executable, "-m", "core", "audit", "verify", "--db", str(live.db)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert verify.returncode == 3 and verify.stdout.startswith("DAMAGED"), verify.stdout + verify.stderr
        _unavailable(live.get("/history?flag=true"), "damaged")
        r = _no_500(live.post("/audit", PAIR))
        assert r.status_code in (200, 503)
    finally:
        with live.db.open("r+b") as fh:
            fh.seek((root - 1) * size)
            fh.write(page)
    assert live.get("/history?flag=true").status_code == 200
    assert live.post("/audit", PAIR).status_code == 200
