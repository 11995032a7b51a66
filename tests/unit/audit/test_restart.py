"""A real ``python -m core serve`` process on a tiny model saved to disk: audits survive ``kill -9`` and a restart,
the chain still verifies, and nothing is duplicated."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from core.audit.calibration import calibrate
from core.audit.store import verify_chain
from core.cli import main
from core.io import REPO_ROOT
from core.model.loading import load_model
from tests.unit.audit.conftest import AUTH, CLEAN_ROWS, PAIR, TOKEN


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "READ_OR_RECALL_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    with log.open("ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "core", "serve", *args], cwd=REPO_ROOT, env=env, stdout=fh, stderr=fh
        )


def _wait_healthy(proc: subprocess.Popen, url: str, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    pytest.fail(f"serve did not become healthy in {timeout:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def tiny_folder(tiny_handle, tmp_path) -> Path:
    """The tiny random Llama and its tokenizer saved as a local model folder (safetensors)."""
    folder = tmp_path / "tiny-model"
    tiny_handle.model.save_pretrained(folder, safe_serialization=True)
    tiny_handle.tokenizer.save_pretrained(folder)
    return folder


def test_audits_survive_kill_and_restart(tiny_folder, tmp_path):
    handle = load_model(str(tiny_folder), device="cpu")
    calib, _ = calibrate(handle, CLEAN_ROWS)
    calib_path = calib.save(tmp_path / "calib.npz")
    db, log = tmp_path / "audit.sqlite3", tmp_path / "serve.log"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["--model", str(tiny_folder), "--db", str(db), "--calibration", str(calib_path), "--port", str(port)]

    proc = _start(args, log)
    try:
        _wait_healthy(proc, url, log)
        ids = []
        for i in range(3):
            r = httpx.post(f"{url}/audit", json={**PAIR, "request_id": f"req-{i}"}, headers=AUTH, timeout=60)
            assert r.status_code == 200, r.text
            ids.append(r.json()["id"])
        batch = httpx.post(f"{url}/audit/batch", json={"items": [PAIR, PAIR]}, headers=AUTH, timeout=60).json()
        ids += [rec["id"] for rec in batch["records"]]
    finally:
        proc.send_signal(signal.SIGKILL)  # no shutdown hooks: what was answered must already be on disk
        proc.wait(timeout=30)

    proc = _start(args, log)
    try:
        _wait_healthy(proc, url, log)
        page = httpx.get(f"{url}/history?limit=50", headers=AUTH, timeout=30).json()
        assert page["total"] == 5 and sorted(r["id"] for r in page["records"]) == sorted(ids)
        replay = httpx.post(f"{url}/audit", json={**PAIR, "request_id": "req-1"}, headers=AUTH, timeout=60)
        assert replay.headers.get("x-audit-replay") == "true" and replay.json()["id"] == ids[1]
        after = httpx.post(f"{url}/audit", json=PAIR, headers=AUTH, timeout=60).json()
        assert after["seq"] == 6
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    report = verify_chain(db)
    assert report.ok and report.n_records == 6
    assert main(["audit", "verify", "--db", str(db)]) == 0
