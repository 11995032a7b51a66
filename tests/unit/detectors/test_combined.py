"""The combined detector: stacked logistic regression over the cheap detectors, τ at α on out-of-fold clean
rows, stored as JSON (issue 11)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from core.detectors import DetectorInput, available, get, keys
from core.detectors.combined import (
    CV_FEATURES,
    CV_NAME,
    FEATURES,
    NAME,
    CombinedModel,
    bundled_model_path,
    cache_model_path,
    fit_combined,
    raw_features,
)
from core.engine import DualPathSettings, run_dual_path
from core.methods.baselines import context_token_stats, min_k_prob, zlib_ratio


def _synthetic(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.array([0, 1] * (n // 2))
    X = rng.normal(size=(n, 3))
    X[:, 0] += 1.5 * y
    X[:, 1] -= 0.8 * y
    return X, y


def test_fit_is_out_of_fold_and_tau_is_set_on_clean_rows():
    X, y = _synthetic()
    names = ["z", "kl_mean", "log_ppl"]
    model, oof = fit_combined(X, y, names, model="m", model_slug="m", template="chat", alpha=0.1, n_boot=100)
    # the same out-of-fold probabilities from an independent pipeline
    pipe = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=5000))
    want = cross_val_predict(pipe, X, y, cv=StratifiedKFold(5, shuffle=True, random_state=42), method="predict_proba")
    np.testing.assert_allclose(oof, want[:, 1], rtol=1e-6, atol=1e-9)
    assert model.tau == pytest.approx(np.quantile(want[y == 0, 1], 0.9))
    assert model.fpr_oof == pytest.approx(np.mean(want[y == 0, 1] > model.tau)) and model.fpr_oof <= 0.1 + 1e-9
    assert model.fnr_oof == pytest.approx(np.mean(want[y == 1, 1] <= model.tau))
    # the stored parameters reproduce the final pipeline fitted on every row
    full = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=5000)).fit(X, y)
    for i in range(0, 120, 17):
        assert model.probability(X[i]) == pytest.approx(full.predict_proba(X[i : i + 1])[0, 1], rel=1e-6)


def test_model_json_roundtrip_and_checks(tmp_path):
    X, y = _synthetic()
    model, _ = fit_combined(X, y, ["z", "kl_mean", "log_ppl"], model="m", model_slug="m", template="chat", n_boot=50)
    path = model.save(tmp_path / "c.json")
    text = path.read_text()
    assert json.loads(text)["features"] == ["z", "kl_mean", "log_ppl"]
    again = CombinedModel.load(path)
    assert again.probability(X[0]) == pytest.approx(model.probability(X[0]))
    bad = json.loads(text)
    bad["scale"][0] = 0.0
    with pytest.raises(ValueError, match="scale"):
        CombinedModel.from_dict(bad)
    bad = json.loads(text)
    bad["features"][0] = "nope"
    with pytest.raises(ValueError, match="unknown"):
        CombinedModel.from_dict(bad)


def test_registered_next_to_every_detector():
    reg = available()
    assert NAME in reg and CV_NAME in reg
    assert reg[NAME].cost == reg[CV_NAME].cost == "forward"  # so `--detectors cheap` includes both
    assert reg[CV_NAME].needs_fit and reg[CV_NAME].features is not None
    assert reg[NAME].higher_means == reg[CV_NAME].higher_means == "memorized"
    assert reg[CV_NAME].label == "Combined (cross-validated on this data)"


def test_features_on_the_tiny_model_match_the_base_computations(tiny_handle):
    settings = DualPathSettings(max_new_tokens=6, score_window=3)
    ctx = "The lighthouse of Orrin was built in 1802 from grey granite."
    res = run_dual_path(tiny_handle, "Who built it?", ctx, settings, free_parametric=False)
    inp = DetectorInput(handle=tiny_handle, result=res, settings=settings)
    names = ["z", "kl_max", "log_ppl", "zlib", "min_k_20"]
    x = raw_features(inp, names, T=64)  # the combined model's own T, not the run's window of 3
    kl = np.asarray(res.token_kl, dtype=np.float64)
    lp = context_token_stats(tiny_handle, ctx)["logprob"]
    want = [math.log1p(kl.sum()), math.log1p(kl.max()), -lp.mean(), zlib_ratio(lp, ctx), min_k_prob(lp, 20)]
    np.testing.assert_allclose(x, want, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="unknown"):
        raw_features(inp, ["nope"])


def test_combined_score_uses_a_cached_model(tiny_handle, tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    X, y = _synthetic()
    names = ["z", "kl_mean", "log_ppl"]
    model, _ = fit_combined(X, y, names, model=tiny_handle.info.name, model_slug=tiny_handle.slug, template="chat")
    model.save(cache_model_path(tiny_handle, "chat"))
    settings = DualPathSettings(max_new_tokens=4, score_window=4)
    res = run_dual_path(tiny_handle, "Who built it?", "Orrin built it in 1802.", settings, free_parametric=False)
    inp = DetectorInput(handle=tiny_handle, result=res, settings=settings)
    p = get(NAME).score(inp)
    assert p == pytest.approx(model.probability(raw_features(inp, names, model.T)))
    details = inp.cache[keys.COMBINED_DETAILS]
    assert details["verdict"] == ("recalled" if p > model.tau else "read") and details["tau"] == model.tau
    assert set(details["contributions"]) == set(names)


def test_no_model_for_another_model_says_how_to_build_one(tiny_handle, tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    settings = DualPathSettings(max_new_tokens=2, score_window=2)
    res = run_dual_path(tiny_handle, "Q?", "Ada.", settings, free_parametric=False)
    with pytest.raises(ValueError, match="calibrate-model"):
        get(NAME).score(DetectorInput(handle=tiny_handle, result=res, settings=settings))


def test_bundled_model_is_trained_on_the_calibration_sets_not_the_probes():
    model = CombinedModel.load(bundled_model_path("chat"))
    assert model.features == list(FEATURES) and model.T == 64 and model.template == "chat"
    paths = [t["path"] for t in model.trained_on]
    assert paths == ["assets/calibration/clean.csv", "assets/calibration/memorized.csv"]
    assert not any("probes" in p for p in paths)
    assert 0.0 < model.tau < 1.0 and model.fpr_oof <= model.alpha + 0.02
    assert model.n_grounded == 87 and model.n_memorized == 59


def test_bundled_model_is_the_fit_of_its_stored_table():
    """The stored training table (with both lenses' columns) refits to the bundled model, number for number."""
    import csv

    model = CombinedModel.load(bundled_model_path("chat"))
    with bundled_model_path("chat").with_suffix(".features.csv").open(encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert {"lookback", "lookback_mean", "redeep_ecs", "redeep_pks"} <= set(table[0])
    X = np.array([[float(r[f]) for f in model.features] for r in table])
    X = np.where(np.isnan(X), np.nanmean(X, axis=0), X)  # a one-token answer's lookback cells, as the build does
    y = np.array([int(r["label"] == "memorized") for r in table])
    refit, _ = fit_combined(X, y, model.features, model=model.model, model_slug=model.model_slug, template="chat")
    np.testing.assert_allclose(refit.coef, model.coef, rtol=1e-9)
    np.testing.assert_allclose(refit.mean, model.mean, rtol=1e-9)
    assert refit.tau == pytest.approx(model.tau) and refit.auc_oof == pytest.approx(model.auc_oof)


def test_threshold_hook_gives_the_models_tau(tiny_handle, tmp_path, monkeypatch):
    from core.detectors.agreement import detector_threshold

    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    X, y = _synthetic()
    model, _ = fit_combined(
        X, y, ["z", "kl_mean", "log_ppl"], model=tiny_handle.info.name, model_slug=tiny_handle.slug, template="chat"
    )
    model.save(cache_model_path(tiny_handle, "chat"))
    settings = DualPathSettings(max_new_tokens=2, score_window=2)
    res = run_dual_path(tiny_handle, "Q?", "Ada.", settings, free_parametric=False)
    found = detector_threshold(get(NAME), DetectorInput(handle=tiny_handle, result=res, settings=settings))
    assert found.value == pytest.approx(model.tau) and "out-of-fold" in found.source


def test_lookback_features_reuse_the_rows_map_and_a_missing_one_adds_nothing(tiny_handle, tmp_path, monkeypatch):
    from core.methods.lookback import LookbackMap, fit_lookback, lookback_map
    from core.methods.lookback import cache_model_path as lookback_cache
    from core.model import artifacts

    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    artifacts.forget()
    settings = DualPathSettings(max_new_tokens=6, score_window=6, force_length=True)
    res = run_dual_path(tiny_handle, "Who built it?", "Orrin built it in 1802.", settings, free_parametric=False)
    L, H = tiny_handle.info.n_layers, tiny_handle.info.n_heads
    rng = np.random.default_rng(1)
    classifier, _ = fit_lookback(
        rng.uniform(size=(40, L * H)), np.array([0, 1] * 20), n_layers=L, n_heads=H, model=tiny_handle.info.name,
        model_slug=tiny_handle.slug, template="chat", n_boot=20,
    )  # fmt: skip
    classifier.save(lookback_cache(tiny_handle, "chat"))
    inp = DetectorInput(handle=tiny_handle, result=res, settings=settings)
    m = lookback_map(tiny_handle, res)
    inp.cache[keys.LOOKBACK_MAP] = m  # as if the agreement view had run the lookback detectors
    x = raw_features(inp, ["lookback", "lookback_mean"])
    span = np.nanmean(m.lr[:, :, 1:].astype(np.float64), axis=-1).ravel()  # by hand: every head's mean, t >= 1
    np.testing.assert_allclose(x, [classifier.probability(span), span.mean()], rtol=1e-5)
    assert inp.cache[keys.LOOKBACK_MAP] is m  # no second forward
    assert "lookback" not in CV_FEATURES and "lookback_mean" in CV_FEATURES
    # a one-token answer has no ratio: NaN, which the bundled model replaces by the training mean
    inp.cache[keys.LOOKBACK_MAP] = LookbackMap(lr=m.lr[:, :, :1], answer_tokens=m.answer_tokens[:1], prompt_len=3)
    assert np.isnan(raw_features(inp, ["z", "lookback", "lookback_mean"])[1:]).all()
    X, y = _synthetic()
    names = ["z", "lookback", "lookback_mean"]
    model, _ = fit_combined(X, y, names, model="m", model_slug="m", template="chat", n_boot=20)
    assert model.probability(np.array([X[0, 0], np.nan, np.nan])) == pytest.approx(
        model.probability(np.array([X[0, 0], *model.mean[1:]]))
    )
    artifacts.forget()
