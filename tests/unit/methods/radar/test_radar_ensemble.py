"""core/methods/radar/ensemble.py and the stored ensemble/report: the arrays give a refit's numbers, and the
bundled artefacts are what the page and the detector read (nothing is fitted when they fit the features)."""

from __future__ import annotations

import numpy as np
import pytest

from core.methods import radar
from core.methods.radar import classifier as classifier_mod
from core.methods.radar import evaluation as evaluation_mod
from core.methods.radar.classifier import RadarClassifier
from core.methods.radar.ensemble import FORMAT, StoredEnsemble


@pytest.fixture(scope="module")
def table() -> radar.FeatureTable:
    return radar.read_feature_table(radar.EMBEDDED_FEATURES_PATH, radar.load_prompt_sets())


@pytest.fixture(scope="module")
def refit(table) -> RadarClassifier:
    return RadarClassifier.from_table(table)


def _rows(table: radar.FeatureTable) -> np.ndarray:
    """Every bundled prompt, plus the same rows moved off the training points (scaled noise, fixed seed)."""
    rng = np.random.default_rng(7)
    noisy = table.X + rng.normal(scale=0.3, size=table.X.shape) * table.X.std(axis=0)
    return np.vstack([table.X, noisy])


def _same_predictions(a: RadarClassifier, b: RadarClassifier, X: np.ndarray) -> None:
    pa, pb = a.predict(X), b.predict(X)
    probs_a = np.array([list(p.probabilities.values()) for p in pa])
    probs_b = np.array([list(p.probabilities.values()) for p in pb])
    np.testing.assert_allclose(probs_b, probs_a, rtol=0, atol=1e-12)
    assert [p.votes for p in pb] == [p.votes for p in pa]
    assert [(p.label, p.soft_label) for p in pb] == [(p.label, p.soft_label) for p in pa]
    np.testing.assert_allclose([p.rds for p in pb], [p.rds for p in pa], atol=1e-12)
    np.testing.assert_allclose([p.rci for p in pb], [p.rci for p in pa], atol=1e-12)
    np.testing.assert_allclose(b.p_recall(X), a.p_recall(X), atol=1e-12)


def test_the_arrays_give_the_refitted_ensembles_probabilities_and_votes(table, refit) -> None:
    stored = RadarClassifier.from_arrays(refit.to_arrays())
    assert isinstance(stored.pipeline, StoredEnsemble)
    _same_predictions(refit, stored, _rows(table))


def test_the_bundled_ensemble_is_the_refit_on_the_bundled_features(table, refit, tmp_path) -> None:
    digest = radar.table_digest(table)
    bundled = radar.read_classifier(radar.EMBEDDED_ENSEMBLE_PATH, digest)
    assert bundled is not None, "assets/radar/ensemble/embedded.npz is missing or not made from these features"
    _same_predictions(refit, bundled, _rows(table))
    assert radar.read_classifier(radar.EMBEDDED_ENSEMBLE_PATH, "0" * 16) is None  # other features: not used
    path = radar.save_classifier(refit, tmp_path / "e.npz", digest=digest, model="m")
    with np.load(path, allow_pickle=False) as data:  # plain arrays only: loads without pickle
        assert int(data["format"]) == FORMAT and str(data["digest"]) == digest


def test_a_stored_ensemble_of_another_layout_is_refused(refit) -> None:
    arrays = refit.to_arrays()
    with pytest.raises(ValueError):
        StoredEnsemble({**arrays, "format": np.array(FORMAT + 1)})
    with pytest.raises(ValueError):
        RadarClassifier.from_arrays({k: v for k, v in arrays.items() if k != "rf_value"})


def test_the_loader_reads_the_stored_ensemble_and_report_without_fitting(table, monkeypatch) -> None:
    def no_fit(*args, **kwargs):
        raise AssertionError("fitted although a stored artefact fits these features")

    monkeypatch.setattr(classifier_mod, "_CLASSIFIERS", {})
    monkeypatch.setattr(evaluation_mod, "_REPORTS", {})
    monkeypatch.setattr(RadarClassifier, "from_table", classmethod(no_fit))
    monkeypatch.setattr(evaluation_mod, "evaluate_table", no_fit)
    clf = radar.classifier_from_table(table)
    assert isinstance(clf.pipeline, StoredEnsemble)
    report = radar.evaluation_for(None, table)  # no model needed: the token counts are stored too
    assert len(report["token_counts"]) == len(table.prompts)


def test_the_bundled_report_is_the_evaluation_of_the_bundled_features(table) -> None:
    stored = evaluation_mod.stored_report(radar.EMBEDDED_REPORT_PATH, radar.table_digest(table))
    assert stored is not None
    counts = stored["token_counts"]
    fresh = radar.evaluate_table(table, token_counts=counts)
    for key in ("overall", "recall_tasks", "reasoning_tasks", "train_cv", "rds_mean"):
        assert stored[key] == pytest.approx(fresh[key]), key
    assert [c["correct"] for c in stored["categories"]] == [c["correct"] for c in fresh["categories"]]
    assert [r["predicted"] for r in stored["rows"]] == [r["predicted"] for r in fresh["rows"]]
    np.testing.assert_allclose([r["p_recall"] for r in stored["rows"]], [r["p_recall"] for r in fresh["rows"]])
    test_counts = [n for n, p in zip(counts, table.prompts, strict=True) if p.split == radar.TEST]
    assert [r["n_tokens"] for r in stored["rows"]] == test_counts
