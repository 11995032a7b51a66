"""On the embedded model: ``/audit``'s trajectory is the one the Layer trajectories page computes for the same input."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from core.audit.calibration import resolve_calibration
from core.audit.service import create_app
from core.audit.store import AuditStore
from core.engine import DualPathSettings, run_dual_path
from core.methods.crm import PC1, load_basis
from core.methods.internals import analyze
from tests.unit.audit.conftest import AUTH, TOKEN

QUERY = "What is the capital of Veltria?"
CONTEXT = "The capital of the Republic of Veltria is Marrowgate, a port city founded in 1412 by salt traders."


@pytest.mark.slow
def test_audit_matches_the_layer_trajectories_page(embedded_handle, tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))  # no audit calibration file: the CRM basis
    handle = embedded_handle
    # What pages/3_Layer_Trajectories.py draws: the dual-path run, its internals, the basis, LTS at position 0.
    result = run_dual_path(handle, QUERY, CONTEXT, DualPathSettings(max_new_tokens=4, score_window=4))
    internals = analyze(handle, result)
    basis = load_basis(handle, result.template)
    assert basis is not None
    d0 = internals.displacement[:, 0]
    page_lts = basis.lts(d0, PC1)
    page_flagged = basis.flagged(page_lts, PC1)
    page_score = basis.anomaly_score(page_lts, PC1)

    calibration, note = resolve_calibration(handle, result.template)
    assert calibration is not None and "CRM basis" in note
    store = AuditStore(tmp_path / "audit.sqlite3")
    client = TestClient(create_app(handle, store, calibration, TOKEN, calibration_note=note))
    out = client.post("/audit", json={"query": QUERY, "context": CONTEXT}, headers=AUTH).json()
    store.close()

    np.testing.assert_allclose(out["lts_trajectory"], page_lts, rtol=1e-4, atol=2e-3)
    assert out["flagged_layers"] == page_flagged
    assert out["anomaly_score"] == pytest.approx(page_score, rel=1e-4, abs=1e-4)
    assert len(out["lts_trajectory"]) == handle.info.n_layers + 1 == 31
    # the first answer token's KL is the engine's KL_1 (same two distributions, no generation in the audit)
    assert out["first_token"]["kl"] == pytest.approx(float(result.token_kl[0]), rel=1e-3, abs=1e-4)
