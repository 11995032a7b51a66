"""Fixtures of the audit service's tests: a calibration of the tiny random Llama, a fresh store, a TestClient."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from core.audit.auth import AuditLimits
from core.audit.calibration import calibrate
from core.audit.service import create_app
from core.audit.store import AuditStore

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

CLEAN_ROWS = [
    (
        f"What does record {i} say about the harbor?",
        f"Record {i} says the harbor of Esk held {i * 7} boats in {1800 + i}.",
    )
    for i in range(12)
]
"""Clean (query, context) rows the tiny model is calibrated on."""

PAIR = {"query": "What is the capital of Veltria?", "context": "The capital of Veltria is Marrowgate, a port city."}


@pytest.fixture(autouse=True)
def _one_torch_thread(one_thread):
    """One torch thread for every audit test (the box is shared)."""


@pytest.fixture(scope="session")
def tiny_calibration(tiny_handle):
    """An audit calibration of the tiny model on :data:`CLEAN_ROWS` (no held-out rows)."""
    calib, _ = calibrate(tiny_handle, CLEAN_ROWS, source="tests/unit/audit CLEAN_ROWS")
    return calib


@pytest.fixture
def store(tmp_path):
    s = AuditStore(tmp_path / "audit.sqlite3")
    yield s
    s.close()


@pytest.fixture
def make_client(tiny_handle, tiny_calibration, store):
    """``make_client(limits=None, calibration=…, store=…)`` → a TestClient on a fresh app."""

    def make(limits: AuditLimits | None = None, calibration=tiny_calibration, db=store) -> TestClient:
        return TestClient(create_app(tiny_handle, db, calibration, TOKEN, limits))

    return make


@pytest.fixture
def client(make_client):
    return make_client()
