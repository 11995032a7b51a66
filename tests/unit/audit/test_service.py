"""The audit API on the tiny model with FastAPI's TestClient: access, errors, records, paging, stats."""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pytest

from core.audit.auth import AuditLimits
from core.audit.calibration import fit_calibration
from core.audit.service import create_app
from core.audit.store import AuditStore, Entry, verify_chain
from tests.unit.audit.conftest import AUTH, PAIR, TOKEN


def _count(store) -> int:
    return store.history(limit=1)[0]


# -- access ---------------------------------------------------------------------------------------------------


def test_health_and_docs_are_open_everything_else_needs_the_token(client, store):
    assert client.get("/health").json() == {"status": "ok", "calibrated": True}
    assert client.get("/openapi.json").status_code == 200
    for method, path in (("get", "/history"), ("get", "/stats"), ("get", "/records/x"), ("get", "/calibration")):
        assert getattr(client, method)(path).status_code == 401, path
    assert client.get("/stats", headers=AUTH).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-0123456789"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": ""},
    ],
)
def test_a_missing_or_wrong_token_is_401_and_logs_only_the_attempt(client, store, headers, caplog):
    secret = "The secret context that must not be logged."
    with caplog.at_level(logging.INFO):
        r = client.post("/audit", json={"query": "q", "context": secret}, headers=headers)
        bad_json = client.post("/audit", content=b"{not json", headers=headers)
    assert r.status_code == bad_json.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert _count(store) == 0
    assert "Rejected POST /audit" in caplog.text
    assert secret not in caplog.text and "wrong-token" not in caplog.text and TOKEN not in caplog.text
    assert client.get("/stats", headers=AUTH).json()["since_start"]["rejected_unauthorized"] == 2


# -- errors ---------------------------------------------------------------------------------------------------


def test_bodies_over_the_size_limit_are_413(make_client, store):
    client = make_client(AuditLimits(max_body_bytes=2000))
    r = client.post("/audit", json={"query": "q", "context": "x" * 3000}, headers=AUTH)
    assert r.status_code == 413 and r.json()["field"] == "body"

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(5):
            yield b"x" * 1000

    r = client.post("/audit", content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413
    assert _count(store) == 0


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"query": "q"}, ["body", "context"]),
        ({"query": "q", "context": ""}, ["body", "context"]),
        ({"query": "q", "context": "   \n"}, ["body", "context"]),
        ({"query": 3, "context": "c"}, ["body", "query"]),
        ({"query": "q", "context": "c", "extra": 1}, ["body", "extra"]),
        ({"query": "q", "context": "c", "request_id": "has space"}, ["body", "request_id"]),
    ],
)
def test_malformed_requests_are_422_naming_the_field(client, store, body, loc):
    r = client.post("/audit", json=body, headers=AUTH)
    assert r.status_code == 422
    assert any(d["loc"] == loc for d in r.json()["detail"]), r.json()
    assert _count(store) == 0


def test_malformed_json_and_bad_batches_are_422(client, store):
    r = client.post(
        "/audit", content=b'{"query": "q", "context": ', headers={**AUTH, "Content-Type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid"
    assert client.post("/audit/batch", json={"items": []}, headers=AUTH).status_code == 422
    r = client.post("/audit/batch", json={"items": [PAIR, {"query": "q", "context": " "}]}, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "items", 1, "context"]
    r = client.post("/audit", json={**PAIR, "generate": True, "max_new_tokens": 10_000}, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "max_new_tokens"]
    assert client.get("/history?limit=0", headers=AUTH).status_code == 422
    assert client.get("/history?limit=100000", headers=AUTH).json()["detail"][0]["loc"] == ["query", "limit"]
    assert _count(store) == 0


def test_over_the_token_budget_is_a_clear_413(make_client, store):
    client = make_client(AuditLimits(max_prompt_tokens=150, max_batch_items=3))
    r = client.post("/audit", json={"query": "q", "context": "word " * 40}, headers=AUTH)
    assert r.status_code == 413
    detail = r.json()["detail"]
    assert detail["type"] == "token_budget" and detail["loc"] == ["body", "context"] and "150" in detail["msg"]
    r = client.post("/audit/batch", json={"items": [PAIR, {"query": "q", "context": "word " * 40}]}, headers=AUTH)
    assert r.status_code == 413 and r.json()["detail"]["loc"] == ["body", "items", 1, "context"]
    r = client.post("/audit/batch", json={"items": [PAIR] * 4}, headers=AUTH)
    assert r.status_code == 413 and r.json()["detail"]["type"] == "batch_size"
    assert _count(store) == 0


def test_without_a_calibration_audits_are_503(make_client):
    client = make_client(calibration=None)
    assert client.get("/health").json()["calibrated"] is False
    r = client.post("/audit", json=PAIR, headers=AUTH)
    assert r.status_code == 503 and "calibration" in r.json()["detail"].lower()


def test_a_calibration_for_another_model_is_refused(tiny_handle, store):
    rng = np.random.default_rng(0)
    other = fit_calibration(rng.normal(size=(10, 4, 32)), model="other", fingerprint="f" * 32, template="chat")
    with pytest.raises(ValueError, match="another model"):
        create_app(tiny_handle, store, other, TOKEN)


# -- audits and records -----------------------------------------------------------------------------------------


def test_an_audit_is_committed_before_the_response_with_the_papers_fields(client, store, tiny_calibration):
    r = client.post("/audit", json=PAIR, headers=AUTH)
    assert r.status_code == 200
    out = r.json()
    for key in ("anomaly_flag", "anomaly_score", "lts_trajectory", "flagged_layers", "latency_ms"):
        assert key in out
    assert out["generation"] is None and out["calibration_id"] == tiny_calibration.calibration_id
    stored = store.get(out["id"])  # already on disk when the response arrived
    assert stored["chain"]["hash"] == out["hash"] and stored["result"]["lts_trajectory"] == out["lts_trajectory"]
    assert stored["inputs"]["query"] == PAIR["query"]
    assert stored["inputs"]["context_sha256"] == hashlib.sha256(PAIR["context"].encode()).hexdigest()
    assert stored["model"]["name"] == "tiny-random-llama"
    assert client.get(f"/records/{out['id']}", headers=AUTH).json() == stored
    missing = client.get("/records/unknown-\u00e9t\u00e9", headers=AUTH)
    assert missing.status_code == 404 and "unknown" not in missing.text  # the id is not echoed


def test_no_store_text_keeps_only_hashes(tiny_handle, tiny_calibration, tmp_path):
    from fastapi.testclient import TestClient

    store = AuditStore(tmp_path / "h.sqlite3", store_text=False)
    client = TestClient(create_app(tiny_handle, store, tiny_calibration, TOKEN))
    rid = client.post("/audit", json=PAIR, headers=AUTH).json()["id"]
    inputs = store.get(rid)["inputs"]
    assert set(inputs) == {"query_sha256", "context_sha256"}
    assert PAIR["context"] not in (tmp_path / "h.sqlite3").read_bytes().decode("latin-1")
    store.close()


def test_a_batch_agrees_with_single_audits_and_shares_one_batch_id(client, store):
    items = [
        PAIR,
        {"query": "Who?", "context": "Nobody."},
        {"query": "When was it founded?", "context": "Marrowgate was founded in 1412 by salt traders from the south."},
    ]
    batch = client.post("/audit/batch", json={"items": items}, headers=AUTH).json()
    assert batch["n"] == 3 and len({r["batch_id"] for r in batch["records"]}) == 1
    for item, rec in zip(items, batch["records"]):
        single = client.post("/audit", json=item, headers=AUTH).json()
        np.testing.assert_allclose(rec["lts_trajectory"], single["lts_trajectory"], atol=1e-4)
        assert rec["flagged_layers"] == single["flagged_layers"]
        assert rec["first_token"]["kl"] == pytest.approx(single["first_token"]["kl"], abs=1e-5)
    assert [r["seq"] for r in batch["records"]] == [1, 2, 3]
    assert verify_chain(store.path).n_records == 6


def test_a_repeated_request_id_returns_the_stored_record(client, store):
    first = client.post("/audit", json={**PAIR, "request_id": "client-42"}, headers=AUTH)
    again = client.post("/audit", json={**PAIR, "request_id": "client-42"}, headers=AUTH)
    assert again.status_code == 200 and again.headers["x-audit-replay"] == "true"
    assert again.json()["id"] == first.json()["id"] and _count(store) == 1
    b1 = client.post("/audit/batch", json={"items": [PAIR, PAIR], "request_id": "b-1"}, headers=AUTH).json()
    b2 = client.post("/audit/batch", json={"items": [PAIR, PAIR], "request_id": "b-1"}, headers=AUTH).json()
    assert [r["id"] for r in b1["records"]] == [r["id"] for r in b2["records"]] and _count(store) == 3


def test_history_pages_and_filters(client, store):
    store.append(
        [
            Entry(
                body={
                    "result": {"anomaly_flag": i % 2 == 0, "anomaly_score": float(i), "latency_ms": 1.0},
                    "model": {"name": "m"},
                    "calibration": {"id": "c"},
                },
                anomaly_flag=i % 2 == 0,
                anomaly_score=float(i),
                latency_ms=1.0,
                model="m",
                calibration_id="c",
            )
            for i in range(7)
        ]
    )
    seen, offset = [], 0
    while offset is not None:
        page = client.get(f"/history?limit=3&offset={offset}", headers=AUTH).json()
        assert page["total"] == 7 and len(page["records"]) <= 3
        seen += [r["seq"] for r in page["records"]]
        offset = page["next_offset"]
    assert seen == [7, 6, 5, 4, 3, 2, 1]
    flagged = client.get("/history?flag=true", headers=AUTH).json()
    assert flagged["total"] == 4 and all(r["anomaly_flag"] for r in flagged["records"])
    assert client.get("/history?flag=false", headers=AUTH).json()["total"] == 3
    third = store.history(limit=1, offset=4)[1][0]  # seq 3
    since = client.get("/history", params={"since": third["created_at"]}, headers=AUTH).json()
    assert {r["seq"] for r in since["records"]} >= {3, 4, 5, 6, 7}
    assert client.get("/history", params={"since": "2999-01-01T00:00:00"}, headers=AUTH).json()["total"] == 0
    assert client.get("/history", params={"until": "2000-01-01T00:00:00Z"}, headers=AUTH).json()["total"] == 0
    assert client.get("/history?since=yesterday", headers=AUTH).status_code == 422


def test_stats_and_calibration(client, tiny_calibration, tiny_handle):
    for _ in range(2):
        client.post("/audit", json=PAIR, headers=AUTH)
    stats = client.get("/stats", headers=AUTH).json()
    assert stats["model"]["layers"] == tiny_handle.info.n_layers
    assert stats["log"]["records"] == 2 and stats["since_start"]["audits"] == 2
    assert stats["calibration"]["id"] == tiny_calibration.calibration_id
    last = client.get("/history?limit=1", headers=AUTH).json()["records"][0]
    assert (
        stats["log"]["chain"]["head_hash"] == client.get(f"/records/{last['id']}", headers=AUTH).json()["chain"]["hash"]
    )
    calib = client.get("/calibration", headers=AUTH).json()
    assert calib["id"] == tiny_calibration.calibration_id and len(calib["mu"]) == tiny_handle.info.n_layers + 1


# -- issue 25: the second audit's attacks on the service ----------------------------------------------------------


def _raw(client, path, text):
    return client.post(path, content=text.encode("utf-8"), headers={**AUTH, "Content-Type": "application/json"})


def test_a_reused_request_id_with_another_body_is_409_and_nothing_is_stored(client, store):
    """Item 3: two different questions under one request_id used to return the first one's result (200, replay)."""
    first = client.post("/audit", json={**PAIR, "request_id": "r1"}, headers=AUTH)
    other = {"query": "Who founded Marrowgate?", "context": "Salt traders founded Marrowgate in 1412."}
    r = client.post("/audit", json={**other, "request_id": "r1"}, headers=AUTH)
    assert first.status_code == 200 and r.status_code == 409 and "x-audit-replay" not in r.headers
    detail = r.json()["detail"]
    assert detail["type"] == "request_id_conflict" and detail["loc"] == ["body", "request_id"]
    assert "'r1'" in detail["msg"] and "POST /audit with 1 item" in detail["msg"] and "seq 1" in detail["msg"]
    # the same body with another setting is another request too
    assert (
        client.post("/audit", json={**PAIR, "request_id": "r1", "max_new_tokens": 8}, headers=AUTH).status_code == 409
    )
    again = client.post(
        "/audit", json={"context": PAIR["context"], "request_id": "r1", "query": PAIR["query"]}, headers=AUTH
    )
    assert again.status_code == 200 and again.headers["x-audit-replay"] == "true"  # same body, keys in another order
    assert again.json()["id"] == first.json()["id"] and _count(store) == 1
    assert store.get(first.json()["id"])["request"]["endpoint"] == "POST /audit"
    assert verify_chain(store.path).ok


def test_single_and_batch_requests_never_collide_on_one_id(client, store):
    """Item 3: a single after a batch got item 0; a 3-item batch after a single got ``n: 1``."""
    items = [PAIR, {"query": "Who?", "context": "Nobody."}, {"query": "When?", "context": "In 1412."}]
    assert client.post("/audit/batch", json={"items": items, "request_id": "b1"}, headers=AUTH).status_code == 200
    r = client.post("/audit", json={**PAIR, "request_id": "b1"}, headers=AUTH)
    assert r.status_code == 409 and "POST /audit/batch with 3 item(s)" in r.json()["detail"]["msg"]
    assert client.post("/audit", json={**PAIR, "request_id": "s1"}, headers=AUTH).status_code == 200
    r = client.post("/audit/batch", json={"items": items, "request_id": "s1"}, headers=AUTH)
    assert r.status_code == 409 and "POST /audit with 1 item(s)" in r.json()["detail"]["msg"]
    r = client.post("/audit/batch", json={"items": items[:2], "request_id": "b1"}, headers=AUTH)
    assert r.status_code == 409  # fewer items: another body
    replay = client.post("/audit/batch", json={"items": items, "request_id": "b1"}, headers=AUTH)
    assert replay.status_code == 200 and replay.json()["n"] == 3 and replay.headers["x-audit-replay"] == "true"
    assert _count(store) == 4


def test_ten_concurrent_requests_sharing_one_id_store_one_record(client, store):
    from concurrent.futures import ThreadPoolExecutor

    def send(_: int):
        r = client.post("/audit", json={**PAIR, "request_id": "burst"}, headers=AUTH)
        return r.status_code, r.json()["id"], r.headers.get("x-audit-replay")

    with ThreadPoolExecutor(max_workers=10) as pool:
        out = list(pool.map(send, range(10)))
    assert {code for code, _, _ in out} == {200}
    assert len({rid for _, rid, _ in out}) == 1 and _count(store) == 1
    assert sum(replay == "true" for _, _, replay in out) == 9
    assert verify_chain(store.path).ok


def test_a_log_missing_its_newest_records_refuses_new_audits(client, store, caplog):
    """Item 2: after a DELETE of the newest rows the next POST /audit reused their seq and the chain verified."""
    import sqlite3

    for i in range(4):
        assert client.post("/audit", json={**PAIR, "query": f"Question {i}?"}, headers=AUTH).status_code == 200
    conn = sqlite3.connect(store.path)
    conn.execute("DELETE FROM audits WHERE seq >= 2")
    conn.commit()
    conn.close()
    with caplog.at_level(logging.ERROR):
        r = client.post("/audit", json=PAIR, headers=AUTH)
    assert r.status_code == 503 and "audit verify" in r.json()["detail"]
    assert "Refusing to append" in caplog.text
    report = verify_chain(store.path)
    assert report.problem == "deleted" and "2–4" in report.message and report.n_records == 1


@pytest.mark.parametrize(
    ("text", "path", "loc"),
    [
        ('{"query": "q", "context": "c", "max_new_tokens": NaN}', "/audit", ["body", "max_new_tokens"]),
        ('{"query": "q", "context": "c", "max_new_tokens": Infinity}', "/audit", ["body", "max_new_tokens"]),
        ('{"query": "caf\\ud800?", "context": 5}', "/audit", ["body", "context"]),
        ('{"query": "caf\\ud800?", "context": "c"}', "/audit", ["body", "query"]),
        ('{"query": "q", "context": "c", "caf\\ud800": 1}', "/audit", ["body"]),  # a key pydantic cannot read
        ('{"items": [{"query": "caf\\ud800?", "context": "c"}]}', "/audit/batch", ["body", "items", 0, "query"]),
        (
            '{"query": "q", "context": "c", "generate": true, "max_new_tokens": 1e400}',
            "/audit",
            ["body", "max_new_tokens"],
        ),
        (
            '{"query": "q", "context": "c", "max_new_tokens": 99999999999999999999999}',
            "/audit",
            ["body", "max_new_tokens"],
        ),
    ],
)
def test_bad_numbers_and_lone_surrogates_are_422_never_500(client, store, text, path, loc):
    """Item 4: NaN, and an error that echoed a lone surrogate, were HTTP 500 with a traceback."""
    r = _raw(client, path, text)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"] == loc for d in detail), detail
    assert all(set(d) == {"loc", "msg", "type"} for d in detail)  # the input is never echoed
    assert _count(store) == 0


@pytest.mark.parametrize("query", ["offset=99999999999999999999", "offset=-1", "limit=99999999999999999999"])
def test_history_bounds_its_numbers(client, query):
    r = client.get(f"/history?{query}", headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][0] == "query"


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"query": "\u200b\u200b", "context": "c"}, ["body", "query"]),
        ({"query": "q", "context": "\u200b\u200c\u200d\u2060\ufeff \n"}, ["body", "context"]),
        ({**PAIR, "generate": "yes"}, ["body", "generate"]),
        ({**PAIR, "generate": 1}, ["body", "generate"]),
        ({**PAIR, "max_new_tokens": "8"}, ["body", "max_new_tokens"]),
        ({**PAIR, "max_new_tokens": 8.0}, ["body", "max_new_tokens"]),
    ],
)
def test_invisible_texts_and_loose_types_are_422(client, store, body, loc):
    """Item 12: zero-width-only texts and ``"generate": "yes"`` / ``"max_new_tokens": "8"`` were accepted."""
    r = client.post("/audit", json=body, headers=AUTH)
    assert r.status_code == 422, r.text
    assert any(d["loc"] == loc for d in r.json()["detail"]), r.json()
    r = client.post("/audit/batch", json={"items": [PAIR, {k: body[k] for k in ("query", "context")}]}, headers=AUTH)
    assert r.status_code == (422 if loc[1] in ("query", "context") else 200)
    assert _count(store) == (0 if loc[1] in ("query", "context") else 2)


def test_the_swagger_page_is_off_unless_asked(make_client, tiny_handle, tiny_calibration, store):
    """Item 11: /docs loads Swagger UI from a CDN without integrity; the service told users to paste the token there."""
    from fastapi.testclient import TestClient

    client = make_client()
    assert client.get("/docs").status_code in (401, 404) and client.get("/redoc").status_code in (401, 404)
    assert client.get("/openapi.json").status_code == 200
    described = client.get("/openapi.json").json()["info"]["description"]
    assert "Never paste the token" in described
    with_docs = TestClient(create_app(tiny_handle, store, tiny_calibration, TOKEN, docs=True))
    assert with_docs.get("/docs").status_code == 200


# -- issue 37: budgets, deadlines and shutdown ---------------------------------------------------------------------


def _holding_the_model(handle):
    """Start a thread that holds the model until the returned event is set (another client's long run)."""
    import threading

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with handle.session():
            held.set()
            release.wait(60)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(10)
    return release


def test_a_request_estimated_over_the_time_budget_is_413_before_any_model_work(tiny_handle, tiny_calibration, store):
    from fastapi.testclient import TestClient

    from core.audit.budget import WorkMeter

    slow = WorkMeter(seconds_per_unit=1.0)  # a server that measured one second per unit of work
    client = TestClient(create_app(tiny_handle, store, tiny_calibration, TOKEN, AuditLimits(), meter=slow))
    release = _holding_the_model(tiny_handle)  # nothing may queue for the model: the refusal comes first
    try:
        r = client.post("/audit/batch", json={"items": [PAIR, PAIR]}, headers=AUTH)
    finally:
        release.set()
    assert r.status_code == 413
    detail = r.json()["detail"]
    assert detail["type"] == "time_budget" and detail["loc"] == ["body", "items"] and "60 s" in detail["msg"]
    assert _count(store) == 0


def test_a_request_past_its_deadline_while_queued_is_503_and_stores_nothing(make_client, tiny_handle, store):
    """Item B: a request queued behind a long run waited for it, however long, while its client had given up."""
    from tests.helpers import call_in_time

    client = make_client(AuditLimits(request_budget_s=1.0))
    release = _holding_the_model(tiny_handle)
    try:
        box = call_in_time(lambda: client.post("/audit", json={**PAIR, "request_id": "late"}, headers=AUTH), 30)
    finally:
        release.set()
    r = box["value"]
    assert r.status_code == 503 and "time budget of 1 s" in r.json()["detail"] and r.headers["retry-after"]
    assert _count(store) == 0
    retry = client.post("/audit", json={**PAIR, "request_id": "late"}, headers=AUTH)
    assert retry.status_code == 200 and "x-audit-replay" not in retry.headers  # scored afresh, once
    assert client.get("/stats", headers=AUTH).json()["since_start"]["stopped_past_deadline"] == 1


def test_shutdown_stops_the_audits_in_flight_and_refuses_new_ones(tiny_handle, tiny_calibration, store):
    """Item B: SIGTERM waited for a batch of twenty minutes; ``serve`` now calls ``begin_shutdown`` first."""
    import threading

    from fastapi.testclient import TestClient

    app = create_app(tiny_handle, store, tiny_calibration, TOKEN)
    client = TestClient(app)
    release = _holding_the_model(tiny_handle)
    out = {}
    worker = threading.Thread(
        target=lambda: out.update(r=client.post("/audit/batch", json={"items": [PAIR, PAIR]}, headers=AUTH))
    )
    worker.start()
    try:
        for _ in range(100):  # until the batch waits for the model
            if tiny_handle.waiting():
                break
            threading.Event().wait(0.05)
        assert app.state.recorder.begin_shutdown() == 1
        worker.join(10)
    finally:
        release.set()
    worker.join(10)
    assert out["r"].status_code == 503 and "shutting down" in out["r"].json()["detail"]
    assert client.post("/audit", json=PAIR, headers=AUTH).status_code == 503
    assert _count(store) == 0


def test_noncharacters_alone_are_not_text(client, store):
    """Item F: a query of only U+FFFF / U+FFFE was accepted (200)."""
    r = client.post("/audit", json={"query": "\uffff\ufffe", "context": "c"}, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "query"]
    assert client.post("/audit", json={"query": "Who? \uffff", "context": "Nobody."}, headers=AUTH).status_code == 200


def test_a_request_that_would_not_fit_beside_an_accepted_one_is_503_up_front(tiny_handle, tiny_calibration, store):
    """Issue 43 C: admission counts the model time already promised, so the second of two requests that cannot
    both finish in their budget is refused before any model work (503, Retry-After), and the first finishes."""
    import re
    import threading

    from fastapi.testclient import TestClient

    from core.audit.budget import WorkMeter

    limits = AuditLimits(request_budget_s=10.0)
    trial = TestClient(create_app(tiny_handle, store, tiny_calibration, TOKEN, limits, meter=WorkMeter(1.0)))
    msg = trial.post("/audit", json=PAIR, headers=AUTH).json()["detail"]["msg"]  # one unit per second: 413
    units = float(re.search(r"about ([\d,.]+) s", msg).group(1).replace(",", ""))
    app = create_app(tiny_handle, store, tiny_calibration, TOKEN, limits, meter=WorkMeter(6.0 / units))  # 6 s each
    client, out = TestClient(app), {}
    release = _holding_the_model(tiny_handle)  # the first request is accepted, then waits for the model
    try:
        first = threading.Thread(target=lambda: out.update(a=client.post("/audit", json=PAIR, headers=AUTH)))
        first.start()
        for _ in range(200):
            if app.state.recorder.turns.promised() > 0:
                break
            threading.Event().wait(0.05)
        second = client.post("/audit", json={**PAIR, "request_id": "second"}, headers=AUTH)
    finally:
        release.set()
    first.join(60)
    assert second.status_code == 503 and "busy" in second.json()["detail"], second.text
    assert "nothing was run or stored" in second.json()["detail"] and int(second.headers["retry-after"]) >= 6
    assert out["a"].status_code == 200 and _count(store) == 1
    retry = client.post("/audit", json={**PAIR, "request_id": "second"}, headers=AUTH)  # the model is free again
    assert retry.status_code == 200 and _count(store) == 2
    assert client.get("/stats", headers=AUTH).json()["since_start"]["rejected_busy"] == 1
