"""τ calibration, held-out rates, the PAC sample size, the threshold file and the `calibrate` command."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.cli import main
from core.engine.threshold import Threshold
from core.evaluation.calibration import achieved_rates, calibrate, calibrate_records, calibration_split, check_threshold
from core.methods.repcs import pac_sample_size


def _data(n_clean: int = 40, n_mem: int = 30, seed: int = 0):
    rng = np.random.default_rng(seed)
    z = np.concatenate([rng.normal(10.0, 2.0, n_clean), rng.normal(3.0, 1.0, n_mem)])
    y = np.array([0] * n_clean + [1] * n_mem)
    g = np.concatenate([rng.uniform(1, 4, n_clean), rng.uniform(0, 2, n_mem)])
    return z, y, g


def test_tau_is_the_alpha_quantile_of_the_chosen_clean_rows():
    z, y, g = _data()
    mask = calibration_split(y, 0.5, seed=1)
    assert mask.sum() == 20 and not np.any(y[mask] == 1)
    for alpha in (0.05, 0.1, 0.25):
        rep = calibrate(z, y, g, mask, T=32, model="m", alpha=alpha)
        assert rep.tau == pytest.approx(np.quantile(z[mask], alpha))  # numpy's default (linear) quantile
        # by hand: the α-quantile with linear interpolation between order statistics
        s = np.sort(z[mask])
        pos = alpha * (s.size - 1)
        lo = math.floor(pos)
        assert rep.tau == pytest.approx(s[lo] + (pos - lo) * (s[min(lo + 1, s.size - 1)] - s[lo]))


def test_held_out_rates_use_only_rows_not_used_for_tau():
    z = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 0.5, 5.0, 0.2])
    y = np.array([0, 0, 0, 0, 0, 1, 1, 1])
    g = np.ones_like(z)
    mask = np.array([True, True, True, False, False, False, False, False])
    rep = calibrate(z, y, g, mask, T=8, model="m", alpha=0.5)
    assert rep.tau == pytest.approx(2.0)
    # held-out grounded: 4.0, 10.0 → none below τ; memorized: 0.5, 5.0, 0.2 → 5.0 missed
    assert rep.fpr_heldout == 0.0 and rep.fnr_heldout == pytest.approx(1 / 3)
    assert rep.n_heldout_clean == 2 and rep.n_heldout_memorized == 3 and rep.n_calibration == 3
    assert rep.fpr_calibration == pytest.approx(1 / 3)  # in-sample: 1.0 < 2.0
    assert achieved_rates(z[~mask], y[~mask], rep.tau) == (rep.fpr_heldout, rep.fnr_heldout)
    assert rep.threshold.fpr == rep.fpr_heldout and rep.threshold.fnr == rep.fnr_heldout


def test_pac_sample_size_known_values():
    # n = ceil(8 γ² T log(2/ε) / Δ²)
    assert pac_sample_size(1.0, 1, 1.0, 0.5) == math.ceil(8 * math.log(4))  # 11.09 → 12
    assert pac_sample_size(2.0, 64, 4.0, 0.05) == math.ceil(8 * 4 * 64 * math.log(40) / 16)  # 472.2 → 473
    assert pac_sample_size(0.5, 32, 1.0, 0.01) == math.ceil(8 * 0.25 * 32 * math.log(200))  # 339.1 → 340
    with pytest.raises(ValueError):
        pac_sample_size(1.0, 1, 0.0, 0.1)


def test_pac_figures_estimated_from_data_and_warning():
    z, y, g = _data()
    mask = calibration_split(y, 0.5, seed=1)
    rep = calibrate(z, y, g, mask, T=32, model="m", epsilon=0.05)
    assert rep.gamma == pytest.approx(g.max())
    assert rep.delta == pytest.approx(z[y == 0].mean() - z[y == 1].mean())
    assert rep.n_required == pac_sample_size(g.max(), 32, rep.delta, 0.05)
    assert rep.n_required > 20 and rep.enough is False
    assert any("fewer than the PAC n" in w for w in rep.warnings)
    # a tiny γ makes 20 rows enough: no warning
    rep2 = calibrate(z, y, np.full_like(g, 0.05), mask, T=32, model="m", epsilon=0.05)
    assert rep2.enough is True and not any("PAC" in w for w in rep2.warnings)


def test_no_gap_and_bad_inputs():
    z = np.array([1.0, 2.0, 5.0, 6.0])
    y = np.array([0, 0, 1, 1])
    rep = calibrate(z, y, np.ones(4), np.array([True, False, False, False]), T=4, model="m")
    assert rep.delta < 0 and rep.n_required is None and any("No influence gap" in w for w in rep.warnings)
    with pytest.raises(ValueError, match="must be clean"):
        calibrate(z, y, np.ones(4), np.array([True, False, True, False]), T=4, model="m")
    with pytest.raises(ValueError, match="at least one"):
        calibrate(z, y, np.ones(4), np.zeros(4, dtype=bool), T=4, model="m")
    with pytest.raises(ValueError):
        calibration_split(np.array([1, 1]), 0.5)


def test_threshold_json_round_trip_and_records(tmp_path):
    z, y, g = _data(10, 10)
    records = [
        {
            "row": i + 1,
            "label": "memorized" if yy else "grounded",
            "repcs_score": float(zz),
            "max_abs_log_ratio": float(gg),
        }
        for i, (zz, yy, gg) in enumerate(zip(z, y, g))
    ]
    rep = calibrate_records(records, {1, 2, 3, 4}, T=16, model="m", template="A")
    assert rep.threshold.extra["calibration_rows"] == [1, 2, 3, 4]
    assert rep.tau == pytest.approx(np.quantile(z[:4], 0.05))
    path = tmp_path / "tau.json"
    rep.threshold.save(path)
    back = Threshold.load(path)
    assert back.tau == rep.tau and back.T == 16 and back.extra["template"] == "A" and back.fnr == rep.fnr_heldout
    checked = check_threshold(back, records[4:])
    assert checked["fpr"] == rep.fpr_heldout and checked["fnr"] == rep.fnr_heldout
    json.dumps(rep.to_dict(), allow_nan=False)


def test_cli_calibrate_from_csv_writes_threshold(tmp_path, cli_model, facts_csv, capsys):
    data = facts_csv(9, step=3, memorized=lambda i: i % 3 == 0)
    tau_path = tmp_path / "tau.json"
    out = tmp_path / "cal.json"
    assert (
        main(
            [
                "calibrate",
                str(data),
                "--write-threshold",
                str(tau_path),
                "--out",
                str(out),
                "--max-new-tokens",
                "3",
                "--alpha",
                "0.2",
                "--tau-mode",
                "paper",  # 3 clean calibration rows: the length-aware τ would refuse them
            ]
        )
        == 0
    )
    th = Threshold.load(tau_path)
    report = json.loads(out.read_text())
    assert th.T == 3 and th.alpha == 0.2 and report["tau"] == th.tau
    assert report["n_calibration"] == 3 and report["n_heldout_clean"] == 3 and report["n_heldout_memorized"] == 3
    assert "τ =" in capsys.readouterr().out
    # reading it back: the same rows from an evaluate report, with --threshold-file compared side by side
    ev = tmp_path / "ev.json"
    assert (
        main(["evaluate", str(data), "--out", str(ev), "--max-new-tokens", "3", "--threshold-file", str(tau_path)]) == 0
    )
    assert json.loads(ev.read_text())["threshold"] == pytest.approx(th.tau)
    argv = ["calibrate", str(ev), "--threshold-file", str(tau_path), "--out", str(out), "--alpha", "0.2"]
    assert main([*argv, "--tau-mode", "paper"]) == 0
    again = json.loads(out.read_text())
    # same rows, same split, same α; evaluate batches each row's two prompts together (the headline reads the answer
    # without the context), so its Z rounds like that batch: within float32 noise of a sum of tiny KLs (≈ 1e-8 nats)
    assert again["tau"] == pytest.approx(th.tau, rel=1e-5, abs=1e-7)
    assert again["given_threshold"]["tau"] == th.tau


def test_cli_calibrate_rejects_a_non_report_json(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"rows": 3}')
    assert main(["calibrate", str(bad)]) == 2
    assert "not a result" in capsys.readouterr().err
