"""RADAR's bundled prompt sets, feature tables, the on-disk cache, the test-set evaluation and the detector."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from core.methods import radar
from core.methods.radar import store


def test_bundled_sets_follow_the_paper_design():
    prompts = radar.load_prompt_sets()
    train = [p for p in prompts if p.split == radar.TRAIN]
    test = [p for p in prompts if p.split == radar.TEST]
    assert len(train) == 30 and sum(p.label == radar.RECALL for p in train) == 15
    assert len(test) == 100
    counts = {c: sum(p.category == c for p in test) for c in radar.TEST_CATEGORIES}
    assert counts == {"clear_recall": 20, "clear_reasoning": 20, "ambiguous": 30, "complex_reasoning": 30}
    assert all(p.label == radar.RECALL for p in test if p.category == "clear_recall")
    assert all(p.label == radar.REASONING for p in test if p.category in ("clear_reasoning", "complex_reasoning"))
    assert not {p.prompt for p in train} & {p.prompt for p in test}
    assert "What is the sum of 10 and 15?" in {p.prompt for p in test}  # the paper's own examples


def _synthetic_table() -> radar.FeatureTable:
    prompts = radar.load_prompt_sets()
    rng = np.random.default_rng(7)
    X = rng.normal(size=(len(prompts), 37))
    X[[p.label == radar.RECALL for p in prompts], :4] += 3.0
    return radar.FeatureTable(prompts, X, {"model": "synthetic"})


def test_feature_table_csv_roundtrip(tmp_path):
    table = _synthetic_table()
    path = tmp_path / "t.csv"
    radar.save_feature_table(table, path)
    back = radar.read_feature_table(path, table.prompts)
    np.testing.assert_array_equal(back.X, table.X)  # repr() floats are lossless
    assert back.meta == table.meta
    assert (tmp_path / "t.json").is_file()
    with pytest.raises(ValueError):
        radar.read_feature_table(path, table.prompts[:-1])


def test_evaluate_table_reports_each_category():
    table = _synthetic_table()
    # token counts that carry the label perfectly (recall prompts short) and one that carries nothing
    counts = [4 if p.label == radar.RECALL else 20 for p in table.prompts]
    report = radar.evaluate_table(table, cv=False, token_counts=counts)
    assert [c["category"] for c in report["categories"]] == list(radar.TEST_CATEGORIES)
    assert [c["n"] for c in report["categories"]] == [20, 20, 30, 30]
    assert report["overall"]["n"] == 100 and report["overall"]["accuracy"] >= 0.9
    assert report["categories"][2]["paper"] == pytest.approx(23 / 30)
    assert report["recall_tasks"]["n"] + report["reasoning_tasks"]["n"] == 100
    assert len(report["rows"]) == 100 and report["train_cv"]["paper"] == 0.967
    assert report["overall"]["length_accuracy"] == 1.0
    manual = sum(r["correct"] for r in report["rows"] if r["category"] == "ambiguous") / 30
    assert report["categories"][2]["accuracy"] == pytest.approx(manual)
    flat = radar.length_baseline(table, [10] * len(table.prompts))
    assert len(set(flat.tolist())) == 1  # no length signal: one constant prediction
    with pytest.raises(ValueError):
        radar.length_baseline(table, [10] * 3)


def test_the_length_control_probability_is_the_logistic_fit_on_log_length():
    table = _synthetic_table()
    counts = [4 + i % 7 if p.label == radar.RECALL else 9 + i % 11 for i, p in enumerate(table.prompts)]
    train = [i for i, p in enumerate(table.prompts) if p.split == radar.TRAIN]
    # independently: P(recall) = expit(w log n + b) of scikit-learn's fit on the training rows' log lengths
    from scipy.special import expit
    from sklearn.linear_model import LogisticRegression

    fit = LogisticRegression(random_state=0).fit(np.log([[float(counts[i])] for i in train]), table.labels(radar.TRAIN))
    for n in (1, 6, 12, 50):
        expected = float(expit(fit.coef_[0, 0] * np.log(n) + fit.intercept_[0]))
        assert radar.length_control_probability(table, counts, n) == pytest.approx(expected, rel=1e-9)
    assert (
        radar.length_control_probability(table, counts, 4) > 0.5 > radar.length_control_probability(table, counts, 20)
    )
    with pytest.raises(ValueError):
        radar.length_control_probability(table, counts, 0)
    with pytest.raises(ValueError):
        radar.length_control_probability(table, counts[:-1], 5)


def test_features_are_extracted_once_and_cached(tiny_handle, tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    full = radar.load_prompt_sets()
    # a smaller set keeps the test short: 6 + 6 training prompts and the first 4 test prompts
    subset = [p for p in full if p.split == radar.TRAIN and p.id[-2:] <= "06"]
    subset += [p for p in full if p.split == radar.TEST][:4]
    monkeypatch.setattr(store, "load_prompt_sets", lambda *a, **k: list(subset))
    assert radar.cached_feature_table(tiny_handle) is None
    seen = []
    table = radar.feature_table_for(tiny_handle, progress=lambda done, total: seen.append((done, total)))
    assert table.X.shape == (16, 37) and np.isfinite(table.X).all()
    assert seen[-1] == (16, 16)
    path = radar.feature_cache_path(tiny_handle)
    assert path.is_file() and path.parent == tmp_path / "radar"
    assert path.name == f"{tiny_handle.slug}.csv" and path.with_suffix(".json").is_file()

    def no_extraction(*args, **kwargs):
        raise AssertionError("features should come from the cache")

    monkeypatch.setattr(store, "extract_feature_table", no_extraction)
    again = radar.feature_table_for(tiny_handle)
    np.testing.assert_array_equal(again.X, table.X)

    # the registered detector scores a row's query with the classifier rebuilt from the cache
    inp = SimpleNamespace(handle=tiny_handle, result=SimpleNamespace(query="The capital of France is"), cache={})
    from core.detectors.registry import MEMORIZED_HIGH, available

    detector = available()["radar"]
    assert detector.cost == "forward" and detector.higher_means == MEMORIZED_HIGH
    score = detector.score(inp)
    assert 0.0 <= score <= 1.0
    details = inp.cache["radar"]  # JSON-ready details for `python -m core detect --json`
    assert details["text"] == "The capital of France is" and len(details["features"]) == 37
    assert details["prediction"]["p_recall"] == score and set(details["prediction"]["votes"]) == {
        "random_forest",
        "gradient_boosting",
        "svm",
        "logistic_regression",
    }
    json.dumps(details, allow_nan=False)
    assert detector.score(inp) == score  # second call reuses the row cache

    # a changed feature version makes the cache stale
    monkeypatch.setattr(store, "FEATURE_VERSION", radar.FEATURE_VERSION + 1)
    assert radar.cached_feature_table(tiny_handle) is None


def test_embedded_cache_path_uses_the_handle_slug():
    assert radar.EMBEDDED_FEATURES_PATH.name == "embedded.csv" and radar.EMBEDDED_FEATURES_PATH.is_file()
    assert radar.EMBEDDED_FEATURES_PATH.with_suffix(".json").is_file()


def test_shipped_embedded_features_are_current():
    prompts = radar.load_prompt_sets()
    table = radar.read_feature_table(radar.EMBEDDED_FEATURES_PATH, prompts)
    assert table.meta["feature_version"] == radar.FEATURE_VERSION
    assert table.meta["prompts_signature"] == radar.prompts_signature(prompts)
    assert table.meta["feature_names"] == list(radar.FEATURE_NAMES)
    assert table.meta["n_layers"] == 30 and np.isfinite(table.X).all()


@pytest.mark.slow
def test_embedded_features_reproduce_the_shipped_table(embedded_handle):
    table = radar.cached_feature_table(embedded_handle)
    assert table is not None, "the shipped features should match the embedded model"
    row = next(i for i, p in enumerate(table.prompts) if p.id == "tr-rec-01")
    features, trace = radar.extract_features(embedded_handle, table.prompts[row].prompt)
    assert trace.n_layers == 30 and trace.head_entropy.shape == (30, 9)
    np.testing.assert_allclose(radar.feature_vector(features), table.X[row], rtol=1e-4, atol=1e-6)
