"""``python -m core serve`` under a batch that would hold the model for minutes (issue 37, B): refused up front by
the work budget with the default limits; with the limits raised by the operator, other clients still get their
turn while it runs, and SIGTERM stops the server at the batch's next forward pass — every answered record kept,
nothing of the stopped batch stored.

The model is a small random Llama with 4,096 positions: one forward pass of a ~3,900-token prompt takes seconds
on a CPU, so a 64-item batch of such prompts is minutes of work (the third audit's 64 × 2,400 words, scaled to
the test model). No timing is asserted: the server must answer or stop at all before that work could be done.
"""

from __future__ import annotations

import signal
import threading

import httpx
import pytest

from core.audit.store import AuditReader, verify_chain
from tests.unit.audit.conftest import PAIR
from tests.unit.audit.live import LiveServer, calibration_file, model_folder

LONG = "word " * 760  # 3,800 bytes: ~3,900 prompt tokens with the byte tokenizer and the template
BATCH = {"items": [{"query": f"What does passage {i} say?", "context": LONG} for i in range(64)]}


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("long-model")
    folder = model_folder(root / "model", max_positions=4096, hidden=64, layers=2)
    return folder, calibration_file(folder, root / "calib.npz")


def test_a_batch_over_the_work_budget_is_refused_before_any_model_work(long_model, tmp_path):
    folder, calib = long_model
    server = LiveServer(folder, calib, tmp_path / "audit.sqlite3", tmp_path / "serve.log").start()
    try:
        r = server.post("/audit/batch", BATCH, timeout=120)  # before: accepted, then minutes of forward passes
        assert r.status_code == 413, r.text
        detail = r.json()["detail"]
        assert detail["type"] == "work_budget" and detail["loc"] == ["body", "items"]
        assert "65,536" in detail["msg"] and "of 64 already ask" in detail["msg"]  # counting stopped early
        assert server.post("/audit", PAIR).status_code == 200  # the server is free for the next client
        stats = server.get("/stats").json()
        assert stats["log"]["records"] == 1 and stats["since_start"]["rejected_over_budget"] == 1
    finally:
        server.kill()


def test_sigterm_stops_a_long_batch_and_keeps_every_answered_record(long_model, tmp_path):
    folder, calib = long_model
    db = tmp_path / "audit.sqlite3"
    raised = ["--max-request-tokens", "10000000", "--request-budget", "3600"]  # the operator allows the batch
    raised += ["--shutdown-timeout", "2"]  # shorter than one forward pass of the test model: the hard stop too
    server = LiveServer(folder, calib, db, tmp_path / "serve.log", raised).start()
    outcome: dict[str, object] = {}

    def send_batch() -> None:
        try:
            outcome["response"] = server.post("/audit/batch", BATCH, timeout=600)
        except httpx.HTTPError as exc:  # the connection closed by the stopping server
            outcome["error"] = exc

    batch = threading.Thread(target=send_batch, daemon=True)
    try:
        batch.start()
        for _ in range(200):  # until the batch holds the model
            if server.get("/stats").json()["since_start"]["model_busy"]:
                break
            threading.Event().wait(0.1)
        answered = []
        for i in range(2):  # another client's audits get their turn between the batch's forward passes
            r = server.post("/audit", {**PAIR, "request_id": f"single-{i}"}, timeout=300)
            assert r.status_code == 200, r.text
            answered.append(r.json()["id"])
        assert batch.is_alive(), "the batch finished: the test's batch is too short to show anything"
        server.signal(signal.SIGTERM)
        server.proc.wait(timeout=60)  # before: the server went on until the whole batch was done (minutes)
    finally:
        server.kill()
    batch.join(timeout=60)
    response = outcome.get("response")
    if response is not None:  # answered before the connection closed: a 503 that says why (never a 500)
        assert response.status_code == 503 and "shutting down" in response.json()["detail"], response.text
    reader = AuditReader(db)
    total, records = reader.history(limit=100)
    assert sorted(r["id"] for r in records) == sorted(answered) and total == 2  # every answered record kept
    assert verify_chain(db).ok
    assert "stopping" in server.output()
