"""core.methods.crm.classifier: the cross-validated CRM-LR finds a planted signal and not noise."""

from __future__ import annotations

import numpy as np
import pytest

from core.methods.crm.classifier import crm_classifier


def test_classifier_separates_a_planted_signal_and_not_noise(synthetic):
    D, y = synthetic(n=80)
    report = crm_classifier(D, y, n_boot=200)
    sets = report["feature_sets"]
    assert set(sets) >= {"pc1", "supervised", "pc1_all_layers", "supervised_all_layers"}
    sup = sets["supervised"]
    assert sup["auc"] > 0.9
    assert sup["ci95"][0] <= sup["auc"] <= sup["ci95"][1]
    assert report["n"] == 80 and report["n_memorized"] == 40 and report["seed"] == 42
    assert crm_classifier(D, y, n_boot=200) == report  # seeded: reproducible
    rng = np.random.default_rng(7)
    noise = rng.normal(size=D.shape)
    chance = crm_classifier(noise, y, n_boot=200)["feature_sets"]["supervised_all_layers"]
    assert 0.2 < chance["auc"] < 0.8 and chance["ci95"][0] < 0.5 < chance["ci95"][1]


def test_classifier_rejects_small_classes_and_misshapen_baselines(synthetic):
    D, y = synthetic(n=8)
    with pytest.raises(ValueError, match="5-fold"):
        crm_classifier(D, y)
    D, y = synthetic(n=20)
    with pytest.raises(ValueError, match="baseline 'l2'"):
        crm_classifier(D, y, baselines={"l2": np.zeros((20, 2))}, n_boot=10)
