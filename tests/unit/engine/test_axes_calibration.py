"""The headline's calibration file (core.engine.axes_calibration): round trips, the checks that name a bad field,
the joint resolver's stored coefficients against scikit-learn, and the bundled file."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from core.engine.axes_calibration import AGREEMENT_FEATURES, JOINT_FEATURES, AxesCalibration, JointModel, bundled_axes
from core.methods.axes_fit import MIN_AGREEMENT_ROWS, PRIOR_BAND, fit_agreement, fit_joint
from tests.unit.engine.conftest import CAL

N = len(JOINT_FEATURES)
JOINT = JointModel(mean=(0.0,) * N, scale=(1.0,) * N, coef=(0.5,) * N, intercept=0.1, threshold=0.5, band=(0.3, 0.7))


def test_calibration_file_round_trip_and_checks(tmp_path):
    path = tmp_path / "axes.json"
    path.write_text(json.dumps(CAL.to_dict()), encoding="utf-8")
    assert AxesCalibration.load(path) == CAL
    assert "joint" not in CAL.to_dict()  # a file without a resolver stays as it was
    bad = CAL.to_dict() | {"reliance_band": [0.6, 0.7]}
    with pytest.raises(ValueError, match="must contain its threshold"):
        AxesCalibration.from_dict(bad)
    with pytest.raises(ValueError, match="'coef' must be a list of 2"):
        AxesCalibration.from_dict(CAL.to_dict() | {"coef": [1.0]})
    with pytest.raises(ValueError, match="needs a 'support_threshold'"):
        AxesCalibration.from_dict({k: v for k, v in CAL.to_dict().items() if k != "support_threshold"})
    for change, message in [
        ({"version": 1}, "made before the answer span"),
        ({"features": ["span_llr", "nope"]}, "must be distinct names of"),
        ({"features": ["span_llr", "span_llr"]}, "must be distinct names of"),
        ({"span_level": -1.0}, "'span_level' is a KL in nats"),
        ({"span_level": float("nan")}, "'span_level' must be a finite number"),
        ({"support_feature": "x"}, "'support_feature' must be one of"),
        ({"provenance": []}, "'provenance' must be a JSON object"),
    ]:
        with pytest.raises(ValueError, match=message):
            AxesCalibration.from_dict(CAL.to_dict() | change)
    old = {k: v for k, v in CAL.to_dict().items() if k != "version"}  # a file of version 1 has no "version"
    with pytest.raises(ValueError, match="recalibrate"):
        AxesCalibration.from_dict(old)


def test_joint_round_trip_and_checks(tmp_path):
    cal = replace(CAL, joint=JOINT)
    path = tmp_path / "axes.json"
    path.write_text(json.dumps(cal.to_dict()), encoding="utf-8")
    assert AxesCalibration.load(path) == cal
    joint = JOINT.to_dict()
    for change, message in [
        ({"features": ["nope"] * N}, "'joint.features' must be"),
        ({"coef": [1.0]}, f"'coef' must be a list of {N}"),
        ({"scale": [0.0] * N}, "'joint.scale' must be positive"),
        ({"band": [0.6, 0.7]}, "must contain its threshold"),
        ({"threshold": 1.5}, "'joint.threshold' is a probability"),
    ]:
        with pytest.raises(ValueError, match=message):
            AxesCalibration.from_dict(CAL.to_dict() | {"joint": joint | change})
    with pytest.raises(ValueError, match="'joint' needs a 'intercept'"):
        AxesCalibration.from_dict(CAL.to_dict() | {"joint": {k: v for k, v in joint.items() if k != "intercept"}})


def test_agreement_resolver_round_trip_and_checks(tmp_path):
    cal = replace(CAL, joint=JOINT, agreement=JOINT)
    path = tmp_path / "axes.json"
    path.write_text(json.dumps(cal.to_dict()), encoding="utf-8")
    assert AxesCalibration.load(path) == cal and "agreement" not in CAL.to_dict()
    with pytest.raises(ValueError, match=r"'agreement\.threshold' is a probability"):
        AxesCalibration.from_dict(CAL.to_dict() | {"agreement": JOINT.to_dict() | {"threshold": 0.0}})


def test_fitted_joint_reproduces_sklearn_probabilities():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=(200, 3)), rng.integers(0, 2, size=(200, 3))]).astype(np.float64)
    y = (X[:, 0] + 0.5 * X[:, 3] - X[:, 4] + rng.normal(scale=0.5, size=200)) > 0
    joint = fit_joint(X, y)
    assert joint.band[0] <= joint.threshold <= joint.band[1]
    mean, scale = X.mean(axis=0), X.std(axis=0)
    reference = LogisticRegression(C=1.0, max_iter=1000).fit((X - mean) / scale, y)
    want = reference.predict_proba((X - mean) / scale)[:, 1]
    got = [joint.probability(dict(zip(JOINT_FEATURES, row, strict=True))) for row in X]
    np.testing.assert_allclose(got, want, atol=1e-4)  # the stored coefficients are rounded to 6 decimals
    with pytest.raises(ValueError, match="joint_X needs 6 columns"):
        fit_joint(X[:, :3], y)


def test_bundled_calibration_loads():
    cal = bundled_axes()
    assert cal is not None and cal.model.startswith("SmolLM2-135M-Instruct")
    assert cal.reliance_band[0] <= cal.reliance_threshold <= cal.reliance_band[1]
    assert cal.span_level is not None and cal.joint is not None and cal.joint.features == JOINT_FEATURES
    assert cal.joint.band[0] <= cal.joint.threshold <= cal.joint.band[1]
    assert cal.agreement is not None and cal.agreement.features == AGREEMENT_FEATURES  # chosen on calibration rows


def test_the_agreement_resolver_is_the_rows_base_rate_where_too_few_kept_their_own_answer(tmp_path):
    """Gemma 3 270M's agreeing calibration rows: 14 of 17 followed a swapped context, too few kept the model's own
    answer to fit a regression; the resolver is their base rate (one P for every run), decisive outside its band."""
    rng = np.random.default_rng(1)
    k = len(AGREEMENT_FEATURES)
    prior = fit_agreement(rng.normal(size=(17, k)), np.array([True] * 14 + [False] * 3))
    assert prior is not None and prior.prior == (14, 17) and prior.band == PRIOR_BAND
    for row in rng.normal(size=(5, k)):  # whatever the observations
        assert prior.probability(dict(zip(AGREEMENT_FEATURES, row, strict=True))) == pytest.approx(15 / 19, abs=1e-6)
    cal = replace(CAL, agreement=prior)
    path = tmp_path / "axes.json"
    path.write_text(json.dumps(cal.to_dict()), encoding="utf-8")
    assert AxesCalibration.load(path) == cal and cal.to_dict()["agreement"]["prior"] == [14, 17]
    for bad in ([15, 14], [1], "14/17", [0, 0]):
        with pytest.raises(ValueError, match=r"'agreement\.prior' is"):
            AxesCalibration.from_dict(cal.to_dict() | {"agreement": prior.to_dict() | {"prior": bad}})
    balanced = np.array([True] * MIN_AGREEMENT_ROWS + [False] * MIN_AGREEMENT_ROWS)
    fitted = fit_agreement(rng.normal(size=(balanced.size, k)), balanced)
    assert fitted is not None and fitted.prior is None  # enough of each behavior: the regression
    assert fit_agreement(rng.normal(size=(MIN_AGREEMENT_ROWS - 1, k)), np.ones(MIN_AGREEMENT_ROWS - 1, bool)) is None
    even = fit_agreement(rng.normal(size=(12, k)), np.array([True] * 6 + [False] * 6))
    assert even is not None and PRIOR_BAND[0] < even.probability(dict.fromkeys(AGREEMENT_FEATURES, 0.0)) < PRIOR_BAND[1]
