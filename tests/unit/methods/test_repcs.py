"""RePCS scoring, calibration and the PAC sample size (RePCS eq. 2, Alg. 1, Thm III.4)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from core.engine.tau_resolution import threshold_for, user_threshold_path
from core.engine.threshold import EMBEDDED_THRESHOLD, Threshold, repcs_score
from core.engine.verdict import repcs_verdict as verdict
from core.methods.repcs import calibrate_tau, fit_threshold, pac_sample_size


def test_score_sums_first_T_positions():
    kl = np.array([0.5, 1.0, 2.0, 4.0], dtype=np.float32)
    assert repcs_score(kl, 2) == pytest.approx(1.5)
    assert repcs_score(kl, 64) == pytest.approx(7.5)
    with pytest.raises(ValueError):
        repcs_score(kl, 0)


def test_verdict_is_strict_lower_tail():
    assert verdict(0.9, 1.0) == "recalled"
    assert verdict(1.0, 1.0) == "read"


def test_tau_is_alpha_quantile():
    z = np.arange(1, 101, dtype=float)
    assert calibrate_tau(z, 0.05) == pytest.approx(np.quantile(z, 0.05))
    assert calibrate_tau(z, 0.5) == pytest.approx(50.5)
    with pytest.raises(ValueError):
        calibrate_tau(z, 1.5)
    with pytest.raises(ValueError):
        calibrate_tau(np.array([]), 0.05)


def test_pac_sample_size_known_values():
    # n >= 8 γ² T Δ⁻² log(2/ε): γ=1, T=64, Δ=4, ε=0.05 → 8·64/16·log(40) = 32·3.6889 = 118.04 → 119
    assert pac_sample_size(1.0, 64, 4.0, 0.05) == math.ceil(32 * math.log(40))
    assert pac_sample_size(1.0, 64, 4.0, 0.05) == 119
    assert pac_sample_size(2.0, 64, 4.0, 0.05) == math.ceil(4 * 32 * math.log(40))
    with pytest.raises(ValueError, match="gap"):
        pac_sample_size(1.0, 64, 0.0, 0.05)
    with pytest.raises(ValueError):
        pac_sample_size(1.0, 64, 1.0, 1.0)


def test_fit_threshold_reports_rates_and_gap(tmp_path):
    rng = np.random.default_rng(0)
    clean, mem = rng.normal(20, 3, 200), rng.normal(5, 1, 50)
    th = fit_threshold(clean, mem, 3.0, T=64, model="m", alpha=0.05, epsilon=0.05)
    assert th.tau == pytest.approx(np.quantile(clean, 0.05))
    assert th.fpr == pytest.approx((clean < th.tau).mean())
    assert th.fnr == pytest.approx((mem >= th.tau).mean())
    assert th.delta == pytest.approx(clean.mean() - mem.mean())
    assert th.n_required == pac_sample_size(3.0, 64, th.delta, 0.05)
    path = tmp_path / "t.json"
    th.save(path)
    assert Threshold.load(path) == th
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="tau"):
        Threshold.load(tmp_path / "bad.json")


def test_threshold_lookup_prefers_user_file(tmp_path):
    th = Threshold(tau=1.25, alpha=0.05, T=64, model="some/model", source="test")
    th.save(user_threshold_path(tmp_path, "some/model"))
    found, why = threshold_for("some/model", tmp_path)
    assert found is not None and found.tau == 1.25 and "calibrated by you" in why


def test_user_threshold_file_is_named_by_the_one_model_slug(tmp_path):
    from core.io import model_slug
    from core.model.loading import EMBEDDED_NAME

    assert user_threshold_path(tmp_path, "some/model").name == f"{model_slug('some/model', '')}.json"
    assert user_threshold_path(tmp_path, EMBEDDED_NAME).name == "embedded.json"


def test_threshold_save_is_atomic_and_exactly_to_json(tmp_path, monkeypatch):
    th = Threshold(tau=1.5, alpha=0.05, T=8, model="m", source="test")
    path = tmp_path / "sub" / "tau.json"
    th.save(path)
    assert path.read_text(encoding="utf-8") == th.to_json()
    assert [p.name for p in path.parent.iterdir()] == ["tau.json"]  # no temporary file left behind

    def boom(fh):
        raise OSError("disk full")

    import core.io

    real = core.io.atomic_write
    monkeypatch.setattr(core.io, "atomic_write", lambda p, write: real(p, boom))
    with pytest.raises(OSError, match="disk full"):
        Threshold(tau=9.0, alpha=0.05, T=8, model="m", source="x").save(path)
    assert Threshold.load(path) == th  # the old file is intact
    assert [p.name for p in path.parent.iterdir()] == ["tau.json"]


def test_bundled_threshold_file_is_consistent():
    data = json.loads(EMBEDDED_THRESHOLD.read_text())
    assert data["alpha"] == 0.05 and data["n_clean"] >= 60
    assert data["delta"] > 0 and data["n_required"] == pac_sample_size(
        data["gamma"], data["T"], data["delta"], data["epsilon"]
    )
    assert data["fpr"] <= 0.1


def test_threshold_json_round_trip_and_strict_checks():
    good = Threshold.load(EMBEDDED_THRESHOLD)
    assert Threshold.from_json_bytes(good.to_json().encode()) == good
    minimal = Threshold.from_json_bytes(b'{"tau": 3, "T": 16, "model": "m"}')
    assert (minimal.tau, minimal.T, minimal.alpha, minimal.source) == (3.0, 16, 0.05, "threshold file")
    assert isinstance(minimal.tau, float)
    base = {"tau": 6.7, "T": 64, "model": "m"}
    bad = [
        (b"\xff\xfe", "not UTF-8"),
        (b"{tau: 1}", "not JSON"),
        (b"[1, 2]", "one JSON object"),
        (json.dumps({"T": 64, "model": "m"}).encode(), "'tau'"),
        (json.dumps({"tau": 1.0, "model": "m"}).encode(), "'T'"),
        (b'{"tau": Infinity, "T": 64, "model": "m"}', "finite"),
        (json.dumps({**base, "tau": "6.7"}).encode(), "finite"),
        (json.dumps({**base, "tau": True}).encode(), "finite"),
        (json.dumps({**base, "T": 0}).encode(), "positive integer"),
        (json.dumps({**base, "T": 6.5}).encode(), "positive integer"),
        (json.dumps({**base, "model": ""}).encode(), "'model'"),
        (json.dumps({**base, "alpha": 1.5}).encode(), "(0, 1)"),
        (json.dumps({**base, "n_clean": -1}).encode(), "'n_clean'"),
        (json.dumps({**base, "extra": [1]}).encode(), "'extra'"),
        (b" " * 70_000, "limit"),
    ]
    for data, message in bad:
        with pytest.raises(ValueError, match=re.escape(message)):
            Threshold.from_json_bytes(data)


def test_threshold_file_errors_name_the_file(tmp_path):
    path = tmp_path / "tau.json"
    path.write_text('{"tau": 1.0}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"tau\.json.*'T'"):
        Threshold.load(path)
    with pytest.raises(ValueError, match=r"missing\.json does not exist"):
        Threshold.load(tmp_path / "missing.json")
