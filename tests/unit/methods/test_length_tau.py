"""The length-aware τ(L): the quantile fit, FPR per length on synthetic Z ∝ L, the band, the refusal, old files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.engine.tau_resolution import threshold_for
from core.engine.threshold import EMBEDDED_THRESHOLD, TAU_LENGTH, TAU_PAPER, LengthTau, Threshold
from core.engine.verdict import INCONCLUSIVE, NEITHER, READ, RECALLED, UNCALIBRATED, VERDICTS, decide
from core.methods.repcs import fit_length_tau, fit_threshold
from core.methods.repcs_length import check_length_calibration, fit_quantile_line, min_rows_per_bucket
from core.model.loading import EMBEDDED_NAME

ALPHA = 0.05
BUCKETS = ((4, 8), (9, 16), (17, 32), (33, 64))


def _check_loss(a: float, b: float, x: np.ndarray, y: np.ndarray, q: float) -> float:
    u = y - a - b * x
    return float(np.sum(np.where(u >= 0, q * u, (q - 1) * u)))


def _proportional(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Clean rows whose Z is proportional to L: Z = L · g, g ~ Gamma(4, 0.5) (the α-quantile of Z/L is fixed)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 65, n)
    return lengths * rng.gamma(4.0, 0.5, n), lengths


def test_quantile_line_reaches_the_optimum_of_an_lp_solver():
    from sklearn.linear_model import QuantileRegressor

    rng = np.random.default_rng(3)
    x = np.log(rng.integers(3, 80, 150).astype(float))
    y = 0.4 + 0.6 * x + rng.normal(0, 0.5, 150)
    a, b = fit_quantile_line(x, y, 0.1)
    ref = QuantileRegressor(quantile=0.1, alpha=0.0, solver="highs").fit(x[:, None], y)
    assert 0.0 < ref.coef_[0] < 1.0  # inside the bounds: the constrained fit is the unconstrained one
    assert _check_loss(a, b, x, y, 0.1) == pytest.approx(_check_loss(ref.intercept_, ref.coef_[0], x, y, 0.1), rel=1e-7)
    assert b == pytest.approx(ref.coef_[0], abs=1e-3)
    # at most ⌈nα⌉ − 1 points lie strictly below the fitted line
    assert int(np.sum(y < a + b * x - 1e-9)) <= math.ceil(150 * 0.1) - 1


def test_slope_is_clipped_to_zero_and_one():
    rng = np.random.default_rng(0)
    x = np.log(rng.integers(3, 80, 200).astype(float))
    falling = 5.0 - 2.0 * x + rng.normal(0, 0.1, 200)
    a, b = fit_quantile_line(x, falling, 0.05)
    assert b == pytest.approx(0.0, abs=1e-9)
    # with b = 0 the line is the constant: the ⌈nα⌉-th smallest value
    assert a == pytest.approx(np.sort(falling)[math.ceil(200 * 0.05) - 1])
    steep = 1.0 + 3.0 * x + rng.normal(0, 0.1, 200)
    assert fit_quantile_line(x, steep, 0.05)[1] == pytest.approx(1.0, abs=1e-9)


def test_length_aware_tau_holds_fpr_in_every_bucket_and_the_constant_does_not():
    z_cal, l_cal = _proportional(600, seed=1)
    lt = fit_length_tau(z_cal, l_cal, ALPHA, n_boot=50)
    assert lt.slope == pytest.approx(1.0, abs=0.12)  # Z ∝ L is recovered
    constant = float(np.quantile(z_cal, ALPHA))
    z, lengths = _proportional(40_000, seed=2)  # fresh clean rows
    tau_l = np.exp(lt.intercept + lt.slope * np.log(lengths))  # τ(L) by hand
    for lo, hi in BUCKETS:
        inside = (lengths >= lo) & (lengths <= hi)
        fpr_length = float(np.mean(z[inside] < tau_l[inside]))
        fpr_constant = float(np.mean(z[inside] < constant))
        assert abs(fpr_length - ALPHA) < 0.035, (lo, hi, fpr_length)
        if hi <= 8:
            assert fpr_constant > 0.3, (lo, hi, fpr_constant)  # short answers: flagged far more often than α
        if lo >= 33:
            assert fpr_constant < 0.01, (lo, hi, fpr_constant)  # long answers: almost never


def _hand_made(boots: int = 9) -> LengthTau:
    """τ(L) = 0.5 · L (a = ln 0.5, b = 1) on lengths 10–40, with bootstrap fits a_j = ln 0.5 ± small steps."""
    offsets = np.linspace(-0.2, 0.2, boots)
    return LengthTau(
        intercept=math.log(0.5),
        slope=1.0,
        alpha=ALPHA,
        L_min=10,
        L_max=40,
        n=100,
        band_level=0.8,
        boot_intercept=tuple(math.log(0.5) + offsets),
        boot_slope=tuple([1.0] * boots),
    )


def test_band_is_the_percentile_interval_of_the_bootstrap_fits():
    lt = _hand_made()
    for n in (10, 20, 40):
        taus = 0.5 * n * np.exp(np.linspace(-0.2, 0.2, 9))
        low, high = np.percentile(taus, [10, 90])
        assert lt.tau(n) == pytest.approx(0.5 * n)
        assert lt.band(n) == pytest.approx((low, high))
        assert low < lt.tau(n) < high
    no_boot = LengthTau(intercept=0.0, slope=0.5, alpha=ALPHA, L_min=1, L_max=9, n=30)
    assert no_boot.band(4) == (2.0, 2.0)


def test_decide_band_range_and_sides():
    th = Threshold(tau=6.0, alpha=ALPHA, T=64, model="m", source="t", length_tau=_hand_made())
    low, high = th.length_tau.band(20)  # τ(20) = 10
    below = decide(low - 0.5, 20, th)
    assert below.verdict == RECALLED and below.tau == pytest.approx(10.0) and below.band == pytest.approx((low, high))
    assert below.mode == TAU_LENGTH and "below" in below.reason
    above = decide(high + 0.5, 20, th)
    assert above.verdict == READ and "above" in above.reason
    for z in (low, 9.9, 10.0, high):
        near = decide(z, 20, th)
        assert near.verdict == INCONCLUSIVE and "uncertainty band" in near.reason
    short = decide(0.01, 9, th)  # far below any τ, but shorter than every calibration answer
    assert short.verdict == INCONCLUSIVE and "shorter" in short.reason and "10–40" in short.reason
    long = decide(1000.0, 41, th)
    assert long.verdict == INCONCLUSIVE and "longer" in long.reason
    assert decide(0.0, 0, th).verdict == INCONCLUSIVE
    assert decide(1.0, 20, None).verdict == UNCALIBRATED
    paper = th.for_mode(TAU_PAPER)
    assert paper.length_tau is None and paper.extra["tau_mode"] == TAU_PAPER and th.length_tau is not None
    assert decide(5.9, 20, paper).verdict == RECALLED and decide(6.0, 20, paper).verdict == READ
    assert decide(0.01, 9, paper).verdict == RECALLED and decide(5.9, 20, paper).mode == TAU_PAPER
    assert th.for_mode(TAU_LENGTH) is th
    with pytest.raises(ValueError, match="unknown"):
        th.for_mode("other")


def test_every_verdict_is_one_of_the_vocabulary():
    th = Threshold(tau=6.0, alpha=ALPHA, T=64, model="m", source="t", length_tau=_hand_made())
    thresholds = (th, None, th.for_mode("paper"))
    seen = {decide(z, n, t).verdict for z in (0.1, 10.0, 99.0) for n in (0, 5, 20) for t in thresholds}
    assert seen <= set(VERDICTS) and seen == set(VERDICTS) - {NEITHER}  # neither: the two-axis headline only


def test_too_few_rows_per_length_bucket_are_refused_with_the_number_needed():
    assert min_rows_per_bucket(0.05) == 20 and min_rows_per_bucket(0.1) == 10 and min_rows_per_bucket(0.2) == 5
    z, lengths = _proportional(30, seed=4)
    with pytest.raises(ValueError, match=r"at least 20 clean rows") as info:
        fit_length_tau(z, lengths, 0.05)
    message = str(info.value)
    assert (
        "15 rows" in message and "Add at least 10 clean rows (40 in all)" in message and "--tau-mode paper" in message
    )
    check_length_calibration(lengths, 0.1)  # 15 per half ≥ ⌈1/0.1⌉ = 10: accepted
    lt = fit_length_tau(z, lengths, 0.1, n_boot=20)
    assert lt.n == 30 and lt.L_min == lengths.min() and lt.L_max == lengths.max() and len(lt.boot_slope) == 20
    with pytest.raises(ValueError, match="scored answer token"):
        fit_length_tau(np.ones(50), np.zeros(50), 0.05)


def test_threshold_file_round_trip_and_strict_length_fields(tmp_path):
    z, lengths = _proportional(120, seed=5)
    th = fit_threshold(z, np.array([1.0, 2.0]), 3.0, T=64, model="m", n_scored_clean=lengths, n_boot=30)
    assert th.length_tau is not None and th.mode == TAU_LENGTH
    path = tmp_path / "tau.json"
    th.save(path)
    back = Threshold.load(path)
    assert back == th and back.length_tau.band(30) == th.length_tau.band(30)
    data = json.loads(path.read_text())
    for bad, match in (
        ({"slope": 1.5}, "slope"),
        ({"L_min": 50, "L_max": 10}, "L_min"),
        ({"boot_slope": [0.1]}, "differ in length"),
        ({"alpha": 2}, "alpha"),
    ):
        broken = {**data, "length_tau": {**data["length_tau"], **bad}}
        with pytest.raises(ValueError, match=match):
            Threshold.from_dict(broken)
    with pytest.raises(ValueError, match="needs a 'intercept'"):
        Threshold.from_dict({**data, "length_tau": {"slope": 0.5}})


def test_a_threshold_file_written_before_length_tau_loads_as_a_constant(tmp_path):
    old = {  # the bundled file as it was before this change
        "T": 64,
        "alpha": 0.05,
        "delta": 22.522858,
        "epsilon": 0.05,
        "extra": {"max_new_tokens": 64, "template": "auto"},
        "fnr": 0.305085,
        "fpr": 0.057471,
        "gamma": 24.178278,
        "mean_z_clean": 28.494092,
        "mean_z_memorized": 5.971234,
        "model": "m",
        "n_clean": 87,
        "n_memorized": 59,
        "n_required": 2177,
        "source": "scripts/calibrate_threshold.py on assets/calibration/",
        "tau": 6.711706,
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    th = Threshold.load(path)
    assert th.length_tau is None and th.mode == TAU_PAPER and th.tau == 6.711706
    assert th.tau_at(3) == th.tau_at(60) == 6.711706
    d = decide(6.7, 3, th)
    assert d.verdict == RECALLED and d.band is None and d.mode == TAU_PAPER


def test_bundled_threshold_is_length_aware_and_consistent():
    th, source = threshold_for(EMBEDDED_NAME)
    assert th is not None and th.length_tau is not None and "length-aware" in source
    lt = th.length_tau
    assert 0.0 <= lt.slope <= 1.0 and lt.n == th.n_clean and lt.L_min >= 1 and lt.L_max <= th.T
    assert len(lt.boot_intercept) == len(lt.boot_slope) >= 100
    assert [lt.tau(n) for n in (8, 16, 32, 64)] == sorted(lt.tau(n) for n in (8, 16, 32, 64))  # monotone
    paper, paper_source = threshold_for(EMBEDDED_NAME, mode=TAU_PAPER)
    assert paper.length_tau is None and paper.tau == th.tau and "paper" in paper_source
    raw = json.loads(EMBEDDED_THRESHOLD.read_text())
    assert raw["length_tau"]["slope"] == lt.slope


def test_bundled_threshold_refit_from_its_scores_reproduces_it():
    """The bundled τ(L) from the bundled per-prompt scores, refitted here (the script's --from-scores path)."""
    import csv

    rows = list(csv.DictReader(EMBEDDED_THRESHOLD.with_name("embedded_scores.csv").open(encoding="utf-8")))
    th = Threshold.load(EMBEDDED_THRESHOLD)
    clean = [r for r in rows if r["set"] == "clean"]
    z = np.array([float(r["z"]) for r in clean])
    lengths = np.array([min(th.T, int(r["n_tokens"])) for r in clean])
    assert float(np.quantile(z, th.alpha)) == pytest.approx(th.tau, abs=1e-6)
    lt = fit_length_tau(z, lengths, th.alpha, n_boot=0)
    assert lt.intercept == pytest.approx(th.length_tau.intercept, abs=1e-5)
    assert lt.slope == pytest.approx(th.length_tau.slope, abs=1e-5)
    assert (lt.L_min, lt.L_max) == (th.length_tau.L_min, th.length_tau.L_max)
