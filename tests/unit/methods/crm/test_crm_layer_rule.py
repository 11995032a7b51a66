"""CRM layer selection as the paper defines it (default) with the share-of-total rule as a named option, and
the level-2 features without a copied late mean (issue 11)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.decomposition import PCA

from core.maths.divergence import kl_statistics
from core.methods.crm import CrmBasis, crm_classifier, fit_basis
from core.methods.crm.maths import (
    DEFAULT_LAYER_RULE,
    L2_FEATURE_NAMES,
    SHARE_OF_TOTAL,
    WITHIN_LAYER,
    l2_feature_vector,
    pc1_directions,
    select_layers_by_rule,
)


def _sklearn_pc1_ratio(x: np.ndarray) -> float:
    """PCA's explained_variance_ratio_[0] of one layer's displacements (0 for a layer with no variance)."""
    if np.allclose(x, x[0]):
        return 0.0
    return float(PCA(n_components=1, svd_solver="full").fit(x).explained_variance_ratio_[0])


def test_default_rule_is_the_papers_within_layer_pca_ratio(synthetic):
    D, _ = synthetic()
    assert DEFAULT_LAYER_RULE == WITHIN_LAYER
    _, evr, evr_within = pc1_directions(D)
    want = [i for i in range(D.shape[1]) if _sklearn_pc1_ratio(D[:, i]) > 0.01]
    assert select_layers_by_rule(WITHIN_LAYER, evr, evr_within) == want == [1, 2, 3, 4]
    # the named option: PC1 variance as a share of the total over all layers (drops the small layer 1)
    total = sum(np.var(D[:, i], axis=0, ddof=1).sum() for i in range(D.shape[1]))
    lam1 = [np.linalg.svd(D[:, i] - D[:, i].mean(0), compute_uv=False)[0] ** 2 / (len(D) - 1) for i in range(5)]
    assert select_layers_by_rule(SHARE_OF_TOTAL, evr, evr_within) == [i for i in range(5) if lam1[i] / total > 0.01]
    assert select_layers_by_rule(SHARE_OF_TOTAL, evr, evr_within) == [2, 3, 4]
    with pytest.raises(ValueError, match="layer rule"):
        select_layers_by_rule("nope", evr, evr_within)


def test_basis_keeps_its_rule_and_reports_both(tmp_path, synthetic):
    D, y = synthetic()
    paper = fit_basis(D, y, model="m", template="A", classifier=False)
    option = fit_basis(D, y, model="m", template="A", classifier=False, layer_rule=SHARE_OF_TOTAL)
    assert paper.kept_layers == [1, 2, 3, 4] and option.kept_layers == [2, 3, 4]
    assert paper.layers_by_rule() == option.layers_by_rule() == {WITHIN_LAYER: [1, 2, 3, 4], SHARE_OF_TOTAL: [2, 3, 4]}
    # the bundled LR is fitted on the kept layers only
    assert np.count_nonzero(paper.lr_coef) == 4 and np.count_nonzero(option.lr_coef) == 3
    loaded = CrmBasis.load(option.save(tmp_path / "b.npz"))
    assert loaded.layer_rule == SHARE_OF_TOTAL and loaded.kept_layers == [2, 3, 4]
    assert paper.describe()["kept_layers_by_rule"][SHARE_OF_TOTAL] == [2, 3, 4]


def test_classifier_reports_crm_lr_under_each_rule(synthetic):
    D, y = synthetic()
    report = crm_classifier(D, y, n_boot=50)
    sets = report["feature_sets"]
    assert report["layer_rule"] == WITHIN_LAYER
    assert sets[f"pc1_{WITHIN_LAYER}"]["n_features"] == 4 and sets[f"pc1_{SHARE_OF_TOTAL}"]["n_features"] < 4
    assert sets["pc1"] == sets[f"pc1_{WITHIN_LAYER}"]


def test_l2_features_never_copy_early_into_late():
    short = kl_statistics(np.array([0.5, 1.0, 2.0, 0.25]), split=32)  # T ≤ split: no remaining tokens
    x = l2_feature_vector(short)
    names = dict(zip(L2_FEATURE_NAMES, x))
    assert names["early"] == pytest.approx(np.mean([0.5, 1.0, 2.0, 0.25]))
    assert names["late"] == 0.0 and names["has_late"] == 0.0  # the old code set late = early (0.9375)
    long = np.arange(40, dtype=np.float64) / 10
    y = dict(zip(L2_FEATURE_NAMES, l2_feature_vector(kl_statistics(long, split=32))))
    assert y["late"] == pytest.approx(long[32:].mean()) and y["has_late"] == 1.0
    assert y["early"] == pytest.approx(long[:32].mean()) and y["trend"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="lack"):
        l2_feature_vector({"mean": 1.0})


def test_crm_l2_lr_detector_features(tiny_handle):
    from core.detectors import DetectorInput, get
    from core.engine import DualPathSettings, run_dual_path

    settings = DualPathSettings(max_new_tokens=4, score_window=4, kl_split=32)
    res = run_dual_path(tiny_handle, "Who built it?", "Orrin built it in 1802.", settings, free_parametric=False)
    det = get("crm_l2_lr")
    x = det.features(DetectorInput(handle=tiny_handle, result=res, settings=settings))
    assert x.shape == (len(L2_FEATURE_NAMES),)
    assert x[L2_FEATURE_NAMES.index("has_late")] == 0.0 and x[L2_FEATURE_NAMES.index("late")] == 0.0
