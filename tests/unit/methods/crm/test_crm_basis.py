"""core.methods.crm.basis, .prompts and .store: the basis on disk (NPZ, no pickles, atomic), the calibration
prompt set and the bundled basis of the embedded model."""

from __future__ import annotations

import json

import numpy as np

from core.methods import crm
from core.methods.crm import PC1, SUPERVISED, CrmBasis, fit_basis
from core.model.loading import EMBEDDED_NAME


def test_fit_basis_roundtrip_through_npz(tmp_path, synthetic):
    D, y = synthetic()
    basis = fit_basis(D, y, model="synthetic", template="A", meta={"prompt_set_sha256": "x"}, classifier=False)
    path = basis.save(tmp_path / "basis.npz")
    with np.load(path, allow_pickle=False) as z:  # no pickles inside
        assert z["pc1"].dtype == np.float32
    loaded = CrmBasis.load(path)
    np.testing.assert_array_equal(loaded.pc1, basis.pc1)
    np.testing.assert_array_equal(loaded.calib_lts[SUPERVISED], basis.calib_lts[SUPERVISED])
    # the paper's within-layer rule keeps every layer that varies (the dead layer 0 is dropped)
    assert loaded.kept_layers == basis.kept_layers == [1, 2, 3, 4] and loaded.layer_rule == "within_layer"
    assert loaded.meta == basis.meta and loaded.template == "A"
    d = D[0]
    lts = loaded.lts(d, PC1)
    np.testing.assert_allclose(lts, [d[i] @ loaded.pc1[i].astype(np.float64) for i in range(len(d))], rtol=1e-6)
    calib = loaded.calib_lts[PC1]
    np.testing.assert_allclose(loaded.mu[PC1], calib.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loaded.sigma[PC1], calib.std(axis=0, ddof=1), rtol=1e-5, atol=1e-6)
    p = loaded.lr_probability(lts)
    assert 0.0 < p < 1.0
    json.dumps(loaded.trajectory(d), allow_nan=False)


def test_save_is_atomic_and_leaves_no_temporary_file(tmp_path, synthetic):
    basis = fit_basis(*synthetic(), model="synthetic", template="A", classifier=False)
    target = tmp_path / "sub" / "basis.npz"
    assert basis.save(target) == target
    basis.save(target)  # overwrite in place
    assert sorted(p.name for p in target.parent.iterdir()) == ["basis.npz"]
    np.testing.assert_array_equal(CrmBasis.load(target).sup, basis.sup)


def test_calibration_prompt_set_fits_the_protocol():
    prompts = crm.load_calibration_prompts()
    labels = [p.label for p in prompts]
    assert len(prompts) >= 100
    assert labels.count("memorized") == labels.count("grounded")
    assert len({p.id for p in prompts}) == len(prompts)
    assert len({p.query for p in prompts}) == len(prompts)


def test_bundled_embedded_basis_is_small_current_and_well_formed():
    key = "chat"
    path = crm.bundled_basis_path(key)
    assert path.is_file() and path.stat().st_size < 3 * 1024 * 1024
    basis = CrmBasis.load(path)
    assert basis.model == EMBEDDED_NAME and basis.template == key
    assert basis.pc1.shape == basis.sup.shape == (31, 576) and basis.pc1.dtype == np.float32
    norms = np.linalg.norm(basis.pc1.astype(np.float64), axis=1)
    assert np.all((np.abs(norms - 1) < 1e-4) | (norms == 0))
    assert basis.meta["prompt_set_sha256"] == crm.prompt_set_digest(crm.load_calibration_prompts())
    assert basis.kept_layers and all(basis.selection_ratio[i] > 0.01 for i in basis.kept_layers)
    for m in basis.classifier["feature_sets"].values():
        assert 0.0 <= m["ci95"][0] <= m["auc"] <= m["ci95"][1] <= 1.0
    assert basis.calib_lts[PC1].shape == (basis.meta["n_prompts"], 31)
