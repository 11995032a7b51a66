"""Per-length FPR/FNR with Wilson intervals, the length-aware calibration of rows, and its refusal."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.cli import main
from core.engine.threshold import TAU_LENGTH, TAU_PAPER, LengthTau, Threshold
from core.evaluation.calibration import calibrate, calibrate_records
from core.evaluation.length_rates import length_report, length_table, rates_by_length, wilson_interval


def test_wilson_interval_known_values():
    # Wilson 95% intervals (z = 1.959964): 0/10 → [0, 0.2775]; 5/10 → [0.2366, 0.7634]; 1/20 → [0.0089, 0.2361]
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.27753), abs=1e-5)
    assert wilson_interval(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-5)
    assert wilson_interval(1, 20) == pytest.approx((0.00889, 0.23613), abs=1e-5)
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(0, 0) is None
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def _threshold() -> Threshold:
    """Constant τ = 5; τ(L) = L / 2 on lengths 4–40 with no bootstrap (the band is the point τ(L))."""
    lt = LengthTau(intercept=math.log(0.5), slope=1.0, alpha=0.05, L_min=4, L_max=40, n=100)
    return Threshold(tau=5.0, alpha=0.05, T=64, model="m", source="t", length_tau=lt)


def test_rates_by_length_counts_by_hand():
    #            L:   4    6    6   12   12   20   20   30   50     4   12   30
    z = np.array([1.0, 2.5, 4.0, 5.5, 7.0, 4.0, 12.0, 20.0, 30.0, 1.0, 5.5, 6.0])
    labels = ["grounded"] * 9 + ["memorized"] * 3
    n = np.array([4, 6, 6, 12, 12, 20, 20, 30, 50, 4, 12, 30])
    rows = rates_by_length(z, labels, n, _threshold())
    by = {(r["calibration"], r["bucket"]): r for r in rows}
    # constant τ = 5: grounded 1.0, 2.5, 4.0 (L ≤ 8) and 4.0 (L = 20) flagged
    assert by[(TAU_PAPER, "1–8")]["fpr"] == 1.0 and by[(TAU_PAPER, "1–8")]["n_grounded"] == 3
    assert by[(TAU_PAPER, "17–32")]["fpr"] == pytest.approx(1 / 3)
    assert by[(TAU_PAPER, "all")]["false_positives"] == 4 and by[(TAU_PAPER, "all")]["n_grounded"] == 9
    # constant: memorized 1.0 (flagged), 5.5 (missed), 6.0 (missed)
    assert by[(TAU_PAPER, "all")]["fnr"] == pytest.approx(2 / 3)
    # τ(L) = L/2: L=4 → 2 (1.0 flagged), L=6 → 3 (2.5 flagged, 4.0 not), L=12 → 6 (5.5 flagged), L=20 → 10 (4.0)
    assert by[(TAU_LENGTH, "1–8")]["fpr"] == pytest.approx(2 / 3)
    assert by[(TAU_LENGTH, "9–16")]["fpr"] == pytest.approx(1 / 2)
    assert by[(TAU_LENGTH, "33–64")]["n_grounded"] == 1 and by[(TAU_LENGTH, "33–64")]["fpr"] == 0.0
    # memorized under τ(L): 1.0 < 2 flagged, 5.5 < 6 flagged, 6.0 < 15 flagged
    assert by[(TAU_LENGTH, "all")]["fnr"] == 0.0
    # L = 50 is outside 4–40: inconclusive under τ(L), decided under the constant τ
    assert by[(TAU_LENGTH, "33–64")]["inconclusive_grounded"] == 1.0
    assert by[(TAU_PAPER, "33–64")]["inconclusive_grounded"] == 0.0
    assert by[(TAU_LENGTH, "all")]["fpr_ci"] == pytest.approx(list(wilson_interval(4, 9)))
    assert by[(TAU_LENGTH, "65+")]["fpr"] is None and by[(TAU_LENGTH, "65+")]["fpr_ci"] is None
    assert len(length_table(rows)) > 1


def _synthetic(n_clean: int, n_mem: int, seed: int):
    """Z ∝ L for clean rows (Z = L · Gamma(4, 0.5)) and small Z for memorized rows."""
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([rng.integers(4, 65, n_clean), rng.integers(4, 65, n_mem)])
    z = np.concatenate([lengths[:n_clean] * rng.gamma(4.0, 0.5, n_clean), rng.uniform(0.05, 0.5, n_mem)])
    return z, np.array([0] * n_clean + [1] * n_mem), lengths


def test_calibrate_fits_tau_of_length_and_reports_both():
    z, y, lengths = _synthetic(400, 60, seed=0)
    mask = np.zeros(z.size, dtype=bool)
    mask[:200] = True
    rep = calibrate(z, y, np.ones(z.size), mask, T=64, model="m", n_scored=lengths)
    assert rep.mode == TAU_LENGTH and rep.threshold.length_tau is not None
    tau_rows = np.exp(rep.threshold.length_tau.intercept + rep.threshold.length_tau.slope * np.log(lengths[200:]))
    held_clean = y[200:] == 0
    assert rep.fpr_heldout == pytest.approx(np.mean(z[200:][held_clean] < tau_rows[held_clean]))
    assert rep.fpr_heldout_constant == pytest.approx(np.mean(z[200:][held_clean] < rep.tau))
    short = [r for r in rep.rates_by_length if r["bucket"] == "1–8"]
    by = {r["calibration"]: r for r in short}
    # the constant τ over-flags short answers (≈ 18 held-out rows of L ≤ 8 here)
    assert by[TAU_PAPER]["fpr"] > 0.2 and by[TAU_LENGTH]["fpr"] < by[TAU_PAPER]["fpr"] / 2
    assert rep.inconclusive_heldout is not None and set(rep.inconclusive_heldout) == {"grounded", "memorized"}
    lt = rep.threshold.length_tau
    bands = [lt.band(int(n)) for n in lengths[200:]]
    unsure = np.array(
        [not lt.covers(int(n)) or lo <= zi <= hi for zi, n, (lo, hi) in zip(z[200:], lengths[200:], bands)]
    )  # outside the calibration's lengths, or inside the band: withheld
    for name, label in (("grounded", 0), ("memorized", 1)):
        assert rep.inconclusive_heldout[name] == pytest.approx(unsure[y[200:] == label].mean())
    json.dumps(rep.to_dict(), allow_nan=False)
    # without lengths, or in the paper's setting: the constant τ alone
    assert calibrate(z, y, np.ones(z.size), mask, T=64, model="m").mode == TAU_PAPER
    paper = calibrate(z, y, np.ones(z.size), mask, T=64, model="m", n_scored=lengths, mode=TAU_PAPER)
    assert paper.threshold.length_tau is None and paper.fpr_heldout == paper.fpr_heldout_constant
    with pytest.raises(ValueError, match="number of scored answer tokens"):
        calibrate(z, y, np.ones(z.size), mask, T=64, model="m", mode=TAU_LENGTH)


def test_calibrate_refuses_too_few_clean_rows_per_length_bucket():
    z, y, lengths = _synthetic(30, 10, seed=1)
    mask = np.zeros(z.size, dtype=bool)
    mask[:24] = True
    with pytest.raises(ValueError, match=r"at least 20 clean rows .* 12 rows .* Add at least 16 clean rows"):
        calibrate(z, y, np.ones(z.size), mask, T=64, model="m", n_scored=lengths)
    rep = calibrate(z, y, np.ones(z.size), mask, T=64, model="m", n_scored=lengths, alpha=0.2)  # 12 ≥ ⌈1/0.2⌉
    assert rep.threshold.length_tau is not None


def _records(z, y, lengths):
    return [
        {
            "row": i + 1,
            "label": "memorized" if yy else "grounded",
            "repcs_score": float(zz),
            "max_abs_log_ratio": 1.0,
            "n_tokens": int(n),
        }
        for i, (zz, yy, n) in enumerate(zip(z, y, lengths))
    ]


def test_records_use_the_scored_length_and_the_report_entry():
    z, y, lengths = _synthetic(120, 30, seed=2)
    records = _records(z, y, lengths + 100)  # answers longer than T: L = T for every row
    rep = calibrate_records(records, T=64, model="m", alpha=0.1)
    lt = rep.threshold.length_tau
    assert lt.L_min == lt.L_max == 64 and lt.slope == 0.0  # one length only: the constant fit
    report = length_report(records, rep.threshold, 64)
    assert report["tau_mode"] == TAU_LENGTH and report["buckets"][-1] == "65+"
    assert "boot_slope" not in report["length_tau"]
    assert {r["bucket"] for r in report["rows"] if r["n_grounded"]} == {"33–64", "all"}
    assert length_report(records, None, 64) is None
    old = [{k: v for k, v in r.items() if k != "n_tokens"} for r in records]
    assert calibrate_records(old, T=64, model="m").mode == TAU_PAPER


def test_cli_calibrate_refuses_and_names_the_rows_needed(tmp_path, capsys):
    z, y, lengths = _synthetic(30, 10, seed=3)
    report = tmp_path / "ev.json"
    report.write_text(
        json.dumps(
            {"model": "m", "settings": {"score_window": 64, "template": "auto"}, "rows": _records(z, y, lengths)}
        )
    )
    assert main(["calibrate", str(report)]) == 2
    err = capsys.readouterr().err
    assert "at least 20 clean rows" in err and "Add at least" in err
    out = tmp_path / "tau.json"
    assert main(["calibrate", str(report), "--tau-mode", "paper", "--write-threshold", str(out)]) == 0
    assert Threshold.load(out).length_tau is None
    assert main(["calibrate", str(report), "--alpha", "0.2", "--write-threshold", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "τ(L) =" in printed and "by length" in printed and Threshold.load(out).length_tau is not None


def test_page_figures_of_the_length_rates():
    from figures.calibration import length_rates_figure, length_rates_frame, length_tau_figure

    z = np.array([1.0, 2.5, 4.0, 5.5, 7.0, 4.0, 12.0, 1.0, 5.5])
    labels = ["grounded"] * 7 + ["memorized"] * 2
    n = np.array([4, 6, 6, 12, 12, 20, 20, 4, 12])
    th = _threshold()
    rows = rates_by_length(z, labels, n, th)
    frame = length_rates_frame(rows)
    assert set(frame["τ"]) == {"constant τ (RePCS, paper)", "length-aware τ(L)"}
    assert "65+" not in set(frame["scored tokens L"])  # empty buckets are left out
    first = frame[(frame["τ"] == "constant τ (RePCS, paper)") & (frame["scored tokens L"] == "1–8")].iloc[0]
    assert first["FPR [95% CI]"].startswith("100%") and first["grounded rows"] == 3
    fig = length_rates_figure(rows, 0.05)
    assert {t.name for t in fig.data} == {"constant τ (RePCS, paper)", "length-aware τ(L)"}
    curve = length_tau_figure(z, n, labels, th.length_tau, th.tau)
    names = {t.name for t in curve.data}
    assert {"grounded", "memorized", "τ(L)"} <= names
