"""The audit calibration: PC1, μ/σ and the flag's threshold against independent numpy, files, model checks, CSVs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.audit.calibration import (
    AuditCalibration,
    calibrate,
    fit_calibration,
    parse_clean_csv,
    resolve_calibration,
)
from core.audit.forward import model_fingerprint
from core.evaluation.data import DataError
from tests.unit.audit.conftest import CLEAN_ROWS


def _random_displacements(n=20, rows=4, dim=6, seed=3):
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(n, rows, dim)) * np.array([0.0, 1.0, 2.0, 5.0])[None, :, None]
    D[:, 2] += np.array([1.0, 0.5, 0, 0, 0, 0])  # a mean shift, so the sign rule has something to fix
    return D


def test_fit_matches_an_independent_pca_and_statistics():
    D = _random_displacements()
    calib = fit_calibration(D, model="m", fingerprint="f", template="chat", alpha=0.1)
    n = D.shape[0]
    for layer in range(1, D.shape[1]):
        x = D[:, layer]
        cov = np.cov(x, rowvar=False)
        w, V = np.linalg.eigh(cov)
        v = V[:, np.argmax(w)]
        if x.mean(axis=0) @ v < 0:
            v = -v
        np.testing.assert_allclose(calib.pc1[layer], v, atol=1e-5)
        lts = x @ v
        assert calib.mu[layer] == pytest.approx(sum(lts) / n, abs=1e-5)
        sd = math.sqrt(sum((t - lts.mean()) ** 2 for t in lts) / (n - 1))
        assert calib.sigma[layer] == pytest.approx(sd, rel=1e-5)
    assert calib.audited_layers == [1, 2, 3]  # row 0 has no variance
    # s_α: the ceil((n − 1)(1 − α))-th smallest calibration score
    lts_all = np.einsum("nld,ld->nl", D, calib.pc1.astype(np.float64))
    mu, sd = lts_all.mean(0), lts_all.std(0, ddof=1)
    scores = sorted(np.mean(np.abs(lts_all[:, 1:] - mu[1:]) / sd[1:], axis=1))
    assert calib.score_threshold == pytest.approx(scores[math.ceil((n - 1) * 0.9)], rel=1e-5)


def test_evaluate_applies_the_two_sigma_rule_and_the_threshold():
    calib = fit_calibration(_random_displacements(), model="m", fingerprint="f", template="chat")
    mu, sd = calib.mu.astype(np.float64), calib.sigma.astype(np.float64)
    lts = mu.copy()
    lts[2] = mu[2] + 2.5 * sd[2]  # outside the band
    lts[3] = mu[3] - 1.5 * sd[3]  # inside
    out = calib.evaluate(lts)
    assert out["flagged_layers"] == [2]
    assert out["anomaly_score"] == pytest.approx((0 + 2.5 + 1.5) / 3, rel=1e-5)
    assert out["anomaly_flag"] == (out["anomaly_score"] > calib.score_threshold)
    with pytest.raises(ValueError, match="shape"):
        calib.evaluate(lts[:2])


def test_too_few_rows_are_refused():
    with pytest.raises(ValueError, match="at least 8"):
        fit_calibration(_random_displacements(n=5), model="m", fingerprint="f", template="chat")


def test_save_load_round_trip_and_bad_files(tmp_path):
    calib = fit_calibration(_random_displacements(), model="m", fingerprint="f", template="chat", source="s")
    path = calib.save(tmp_path / "c.npz")
    back = AuditCalibration.load(path)
    assert back.calibration_id == calib.calibration_id
    np.testing.assert_array_equal(back.mu, calib.mu)
    assert (back.model, back.template, back.source) == ("m", "chat", "s")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not an audit calibration"):
        AuditCalibration.load(tmp_path / "junk.npz")


def test_a_calibration_for_another_model_or_template_is_refused(tiny_handle, tiny_calibration):
    fp = model_fingerprint(tiny_handle)
    tiny_calibration.check_for(tiny_handle, fp, tiny_calibration.template)
    with pytest.raises(ValueError, match="another model"):
        tiny_calibration.check_for(tiny_handle, "0" * 32, tiny_calibration.template)
    with pytest.raises(ValueError, match="template"):
        tiny_calibration.check_for(tiny_handle, fp, "A")


def test_fingerprint_follows_the_weights_not_the_name(tiny_handle):
    from core.model.loading import handle_from_model
    from tests.conftest import make_tiny_llama

    same = handle_from_model(tiny_handle.model, tiny_handle.tokenizer, name="renamed")
    other = handle_from_model(make_tiny_llama(len(tiny_handle.tokenizer), seed=1), tiny_handle.tokenizer, name="x")
    assert model_fingerprint(same) == model_fingerprint(tiny_handle)
    assert model_fingerprint(other) != model_fingerprint(tiny_handle)


def test_resolve_prefers_the_given_file_and_reports_none_without_any(
    tiny_handle, tiny_calibration, tmp_path, monkeypatch
):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    calib, note = resolve_calibration(tiny_handle, tiny_calibration.template)
    assert calib is None and "audit calibrate" in note
    path = tiny_calibration.save(tmp_path / "mine.npz")
    calib, note = resolve_calibration(tiny_handle, tiny_calibration.template, path)
    assert calib.calibration_id == tiny_calibration.calibration_id and "mine.npz" in note
    other = fit_calibration(_random_displacements(), model="m", fingerprint="f", template="chat")
    with pytest.raises(ValueError, match="another model"):
        resolve_calibration(tiny_handle, "chat", other.save(tmp_path / "other.npz"))


def test_calibrate_with_the_model_reports_held_out_rates(tiny_handle):
    calib, report = calibrate(tiny_handle, CLEAN_ROWS * 2, holdout=0.25)
    assert report["n_rows"] == 18 and report["held_out_rows"] == 6
    assert 0.0 <= report["held_out_flag_rate"] <= 1.0
    assert report["in_sample_flag_rate"] <= 0.1  # ≈ α by construction (ties aside)
    assert calib.pc1.shape == (tiny_handle.info.n_layers + 1, tiny_handle.info.hidden_size)


def test_clean_csv_parsing():
    rows, note = parse_clean_csv("query,context,source\nq1,c1,x\nq2,c2,y\n")
    assert rows == [("q1", "c1"), ("q2", "c2")] and note == "2 rows"
    rows, note = parse_clean_csv("query,context,label\nq1,c1,grounded\nq2,c2,memorized\n")
    assert rows == [("q1", "c1")] and "1 memorized rows skipped" in note
    with pytest.raises(DataError, match="context"):
        parse_clean_csv("query\nq1\n")
    with pytest.raises(DataError, match="Row 2, column 'context'"):
        parse_clean_csv("query,context\nq1,c1\nq2,  \n")
    with pytest.raises(DataError, match="no data rows"):
        parse_clean_csv("query,context\n")
