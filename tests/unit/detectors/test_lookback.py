"""The Lookback Lens detectors on the tiny random Llama and the embedded model."""

from __future__ import annotations

import numpy as np
import pytest

from core.detectors import DetectorInput, get, keys
from core.detectors.agreement import detector_threshold
from core.detectors.registry import CONTEXT_RELIANCE, GROUNDED_HIGH, MEMORIZED_HIGH, available
from core.engine import DualPathSettings, run_dual_path
from core.methods.lookback import cache_model_path, fit_lookback, lookback_map, span_features
from core.methods.lookback.maths import head_mean_curve
from core.model import artifacts
from core.model.prompts import resolve_template

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = DualPathSettings(max_new_tokens=8, score_window=8, top_k=3, force_length=True)
Q, C = "Where is the tower?", "The tower stands in Quillmere, by the river."


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    artifacts.forget()
    yield tmp_path / "cache"
    artifacts.forget()


@pytest.fixture(scope="module")
def result(tiny_handle):
    return run_dual_path(tiny_handle, Q, C, SETTINGS)


def test_registered_with_their_direction_group_and_cost() -> None:
    names = available()
    assert {"lookback", "lookback_cv", "lookback_mean"} <= set(names)
    assert get("lookback").higher_means == MEMORIZED_HIGH and get("lookback_mean").higher_means == GROUNDED_HIGH
    assert get("lookback_cv").needs_fit and get("lookback_cv").features is not None
    for name in ("lookback", "lookback_cv", "lookback_mean"):
        assert get(name).group == CONTEXT_RELIANCE and get(name).cost == "forward"


def test_without_a_classifier_lookback_refuses_and_the_others_run(tiny_handle, result, cache) -> None:
    inp = DetectorInput(tiny_handle, result, SETTINGS)
    with pytest.raises(ValueError, match="calibrate-model"):
        get("lookback").score(inp)
    m = lookback_map(tiny_handle, result)
    mean = get("lookback_mean").score(inp)
    assert mean == pytest.approx(float(np.nanmean(head_mean_curve(m.lr))), abs=1e-6)
    x = get("lookback_cv").features(inp)
    L, H = tiny_handle.info.n_layers, tiny_handle.info.n_heads
    assert x.shape == (L * H,) and np.all(np.isfinite(x))
    np.testing.assert_allclose(x, span_features(m.lr), atol=1e-6)
    assert inp.cache[keys.LOOKBACK_MAP].lr.shape == (L, H, result.n_tokens)  # one forward, shared by the three
    assert detector_threshold(get("lookback"), inp).value is None
    assert detector_threshold(get("lookback_mean"), inp).value is None


def test_with_a_cached_classifier_lookback_scores_and_gives_its_tau(tiny_handle, result, cache) -> None:
    L, H = tiny_handle.info.n_layers, tiny_handle.info.n_heads
    rng = np.random.default_rng(0)
    y = np.array([0, 1] * 20)
    X = rng.normal(0.5, 0.1, size=(40, L * H)) - 0.1 * y[:, None] * (np.arange(L * H) == 0)
    key = resolve_template(result.template, tiny_handle.tokenizer).key
    model, _ = fit_lookback(
        X, y, n_layers=L, n_heads=H, model=tiny_handle.info.name, model_slug=tiny_handle.slug, template=key, n_boot=20
    )
    model.save(cache_model_path(tiny_handle, key))
    inp = DetectorInput(tiny_handle, result, SETTINGS)
    p = get("lookback").score(inp)
    assert p == pytest.approx(model.probability(span_features(lookback_map(tiny_handle, result).lr)), abs=1e-9)
    details = inp.cache[keys.LOOKBACK_DETAILS]
    assert details["verdict"] == ("recalled" if p > model.tau else "read") and len(details["top_heads"]) == 5
    threshold = detector_threshold(get("lookback"), inp)
    assert threshold.value == pytest.approx(model.tau) and "quantile" in threshold.source
    mean_tau = detector_threshold(get("lookback_mean"), inp)
    assert mean_tau.value == pytest.approx(np.quantile(X[y == 0].mean(axis=1), 0.05)) and "read" in mean_tau.source


def test_a_classifier_of_another_shape_is_not_used(tiny_handle, result, cache) -> None:
    key = resolve_template(result.template, tiny_handle.tokenizer).key
    y = np.array([0, 1] * 10)
    X = np.random.default_rng(1).normal(size=(20, 2)) + y[:, None]
    model, _ = fit_lookback(
        X, y, n_layers=1, n_heads=2, model=tiny_handle.info.name, model_slug=tiny_handle.slug, template=key, n_boot=20
    )
    model.save(cache_model_path(tiny_handle, key))
    with pytest.raises(ValueError, match="No Lookback Lens classifier"):
        get("lookback").score(DetectorInput(tiny_handle, result, SETTINGS))


def test_a_one_token_answer_has_no_lookback_score(tiny_handle) -> None:
    one = run_dual_path(tiny_handle, Q, C, DualPathSettings(max_new_tokens=1, score_window=1, force_length=True))
    inp = DetectorInput(tiny_handle, one, SETTINGS)
    with pytest.raises(ValueError, match="one-token answer"):
        get("lookback_mean").score(inp)
    with pytest.raises(ValueError, match="at least two tokens"):
        get("lookback_cv").features(inp)


@pytest.mark.slow
def test_the_embedded_model_has_a_bundled_classifier(embedded_handle) -> None:
    settings = DualPathSettings(max_new_tokens=12, score_window=12)
    result = run_dual_path(
        embedded_handle, "Who wrote Hamlet?", "Hamlet was written by Christopher Marlowe in 1601.", settings
    )
    inp = DetectorInput(embedded_handle, result, settings)
    p = get("lookback").score(inp)
    assert 0.0 <= p <= 1.0
    assert inp.cache[keys.LOOKBACK_MAP].lr.shape == (30, 9, result.n_tokens)
    assert 0.0 < get("lookback_mean").score(inp) < 1.0
    assert detector_threshold(get("lookback"), inp).value == pytest.approx(inp.cache[keys.LOOKBACK_DETAILS]["tau"])
