"""The fourth audit's service cases (issue 43) against a real ``python -m core serve`` process.

C. An accepted batch was killed by the sharing it promises: accepted up front (its own model time well inside
   the budget), it got 503 "ran past its time budget" at the deadline because another client's single audits
   took their turns. Now admission reserves the model time an accepted request needs and the turns keep it on
   schedule, so it finishes while the other clients keep being served.
D. A request head sent one byte at a time was never timed out (105 s open, no response). Now a head not complete
   within ``--header-timeout`` gets 408 and the connection is closed.

One server serves the module: a small random Llama whose forward passes cost about what their tokens say (hidden
128, so per-token time does not drift between short and long passes), ``--request-budget 10``,
``--header-timeout 2``. No test asserts a timing: each waits for an outcome, under a generous limit.
"""

from __future__ import annotations

import re
import socket
import threading
import time

import httpx
import pytest

from core.audit.store import verify_chain
from tests.unit.audit.conftest import AUTH, TOKEN
from tests.unit.audit.live import LiveServer, calibration_file, model_folder

BUDGET_S = 10.0
HEAD_TIMEOUT_S = 2.0
SINGLE_CLIENTS = 3
SERVE_FLAGS = ["--request-budget", f"{BUDGET_S:g}", "--header-timeout", f"{HEAD_TIMEOUT_S:g}", "--max-batch", "256"]
SERVE_FLAGS += ["--max-request-tokens", "1000000"]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharing")
    folder = model_folder(root / "model", hidden=128, layers=4)
    server = LiveServer(
        folder,
        calibration_file(folder, root / "calib.npz"),
        root / "audit.sqlite3",
        root / "serve.log",
        SERVE_FLAGS,
    )
    server.start()
    yield server
    server.kill()


def _items(n: int) -> list[dict[str, str]]:
    return [
        {
            "query": f"What does record {i} say about the harbor?",
            "context": f"Record {i} says the harbor of Esk held {i * 7} boats in {1800 + i}. " * 4,
        }
        for i in range(n)
    ]


def _sized(live: LiveServer, share: float) -> int:
    """Items of a batch the server estimates at about ``share`` of its budget: the estimate of 256 items is in
    the 413 that refuses them ("would need about X s"), and grows with the items."""
    r = live.post("/audit/batch", {"items": _items(256)}, timeout=120)
    assert r.status_code == 413 and r.json()["detail"]["type"] == "time_budget", r.text
    estimate = float(re.search(r"about ([\d,.]+) s", r.json()["detail"]["msg"]).group(1).replace(",", ""))
    return max(2, min(int(256 * share * BUDGET_S / estimate), 256))


def _singles(live: LiveServer, stop: threading.Event, out: list[tuple[float, int]]) -> None:
    """One client: single audits back to back until ``stop`` (each: when it was answered, its status)."""
    with httpx.Client(timeout=120) as client:
        i = 0
        while not stop.is_set():
            body = {"query": f"Who kept ledger {i}?", "context": f"Ledger {i} was kept by the harbor master."}
            r = client.post(f"{live.url}/audit", json=body, headers=AUTH)
            out.append((time.monotonic(), r.status_code))
            i += 1


def test_an_accepted_batch_finishes_while_other_clients_send_single_audits(live):
    """Issue 43 C: 503 "ran past its time budget … nothing stored" at the deadline, under another client's singles."""
    stop, answers = threading.Event(), [[] for _ in range(SINGLE_CLIENTS)]
    clients = [threading.Thread(target=_singles, args=(live, stop, out), daemon=True) for out in answers]
    for t in clients:
        t.start()
    try:
        deadline = time.monotonic() + 120
        while not all(answers) and time.monotonic() < deadline:  # every client is sending
            time.sleep(0.05)
        # Sized while the singles run, from the pace the server measures under them: an estimate of 35 % of the
        # budget leaves the batch room for the machine to run well below that pace (the CI run on record: sized
        # before the singles started, the estimate had doubled by the time the batch was sent, 8.5 s of 10 s).
        k = _sized(live, 0.35)
        batch = None
        while k >= 2:
            started = time.monotonic()
            batch = live.post("/audit/batch", {"items": _items(k)}, timeout=300)
            refused = batch.status_code == 413 or (batch.status_code == 503 and "busy" in batch.text)
            if not refused:  # refused up front (over the budget, or not beside the singles as estimated under
                break  # load, which the meter may put well above the batch's time alone): a smaller batch
            k //= 2
        ended = time.monotonic()
    finally:
        stop.set()
        for t in clients:
            t.join(120)
    assert batch is not None and batch.status_code == 200, batch.text if batch is not None else "no batch sent"
    assert batch.json()["n"] == k and len({r["batch_id"] for r in batch.json()["records"]}) == 1
    during = [status for out in answers for when, status in out if started <= when <= ended]
    assert 200 in during  # the other clients were served while the batch ran
    assert all(status in (200, 503) for out in answers for _, status in out)  # 503: refused up front, never a 500
    stats = live.get("/stats").json()["since_start"]
    assert stats["stopped_past_deadline"] == 0 and stats["model_promised"] == 0.0
    assert verify_chain(live.db).ok


def _dribble(port: int, head: bytes, *, every_s: float, limit_s: float) -> tuple[bytes, float]:
    """Send ``head`` one byte every ``every_s`` (then nothing) until the server answers or closes; what it sent
    back and the seconds it took (``limit_s`` at most)."""
    start = time.monotonic()
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=limit_s) as sock:
        sock.settimeout(every_s)
        sent = 0
        while time.monotonic() - start < limit_s:
            if sent < len(head):
                try:
                    sock.sendall(head[sent : sent + 1])
                except OSError:  # closed by the server
                    break
                sent += 1
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
    return answer, time.monotonic() - start


def test_a_request_head_sent_one_byte_at_a_time_gets_408_and_is_closed(live):
    """Issue 43 D: a request line, then one header byte a second, stayed open 105 s with no response."""
    head = (
        f"POST /audit HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n".encode()
        + b"X-Slow: "
        + (b"a" * 500)
    )
    answer, took = _dribble(live.port, head, every_s=0.25, limit_s=90)
    assert answer.startswith(b"HTTP/1.1 408"), (answer[:300], took)
    assert b"did not arrive within 2 s" in answer and b"connection: close" in answer.lower()
    assert live.get("/stats").json()["since_start"]["rejected_header_timeout"] >= 1


def test_a_silent_connection_is_closed_too_and_a_prompt_head_with_a_slow_body_is_not(live):
    """The head's bound starts when the connection opens; a body slower than it (within ``--body-timeout``) is
    the body's business, so that request is answered."""
    answer, _ = _dribble(live.port, b"", every_s=0.25, limit_s=90)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    body = b'{"query": "Who kept the ledger?", "context": "The harbor master kept the ledger."}'
    head = (
        f"POST /audit HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", live.port), timeout=90) as sock:
        sock.sendall(head)
        for i in range(0, len(body), 8):  # the body over about 2.5 s: past the head's bound, inside the body's
            time.sleep(HEAD_TIMEOUT_S / 8)
            sock.sendall(body[i : i + 8])
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    with httpx.Client(timeout=60) as client:  # a kept-alive connection serves a second request after a pause
        first = client.get(f"{live.url}/health")
        time.sleep(HEAD_TIMEOUT_S * 0.75)
        assert first.status_code == 200 and client.get(f"{live.url}/health").status_code == 200


@pytest.mark.parametrize("seconds", [0, -2, float("nan"), float("inf")])
def test_the_head_timeout_protocol_refuses_a_bound_that_is_not_a_positive_time(seconds):
    from core.audit.protocol import head_timeout_protocol

    with pytest.raises(ValueError, match="positive number of seconds"):
        head_timeout_protocol(seconds)
    assert head_timeout_protocol(1.5).head_timeout_s == 1.5
