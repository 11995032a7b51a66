"""core.crm: PC1/LTS against an independent numpy computation, layer selection, supervised direction, the
audit rule, back-projection, the cross-validated classifier, the basis on disk, and the CRM detectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.methods.crm import legacy as crm
from core.methods.crm.legacy import (
    PC1,
    SUPERVISED,
    CrmBasis,
    audit_flags,
    back_projection,
    crm_classifier,
    fit_basis,
    pc1_directions,
    project,
    select_layers,
    supervised_directions,
)
from core.detectors.registry import DetectorInput, available
from core.engine.dual_path import DualPathSettings, run_dual_path
from core.methods.internals import displacement
from core.model.loading import EMBEDDED_NAME

SETTINGS = DualPathSettings(max_new_tokens=4, score_window=4)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One torch thread: the CI box is shared, and OpenMP spinning on two contended cores is far slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _synthetic(n: int = 60, layers: int = 5, dim: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Displacements whose scale grows with depth, a class signal in layer 3 and a dead layer 0."""
    rng = np.random.default_rng(seed)
    scales = np.array([0.0, 0.05, 1.0, 2.0, 4.0])[:layers]
    D = rng.normal(size=(n, layers, dim)) * scales[None, :, None]
    y = np.array([1, 0] * (n // 2))
    D[y == 1, 3, 0] += 6.0
    return D, y


# ----------------------------------------------------------------------------------------------------------
# Maths against independent computations


def test_pc1_and_lts_match_a_numpy_eigendecomposition():
    D, _ = _synthetic()
    pc1, evr, evr_within = pc1_directions(D)
    traces = []
    for layer in range(D.shape[1]):
        cov = np.cov(D[:, layer].T)  # independent: eigen-decomposition of the covariance matrix (float64)
        values, vectors = np.linalg.eigh(cov)
        traces.append(values.sum())
        if values[-1] <= 1e-12:
            assert np.all(pc1[layer] == 0)
            continue
        top = vectors[:, -1]
        assert abs(top @ pc1[layer]) == pytest.approx(1.0, abs=1e-9)
        assert evr_within[layer] == pytest.approx(values[-1] / values.sum(), rel=1e-9)
        # sign rule: the calibration mean projects non-negatively
        assert D[:, layer].mean(axis=0) @ pc1[layer] >= 0
    lam1 = np.array([np.linalg.eigvalsh(np.cov(D[:, i].T))[-1] if i else 0.0 for i in range(D.shape[1])])
    np.testing.assert_allclose(evr, lam1 / np.sum(traces), rtol=1e-9, atol=1e-15)
    lts = project(D, pc1)
    np.testing.assert_allclose(lts, np.einsum("nld,ld->nl", D, pc1), rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(pc1[1:], axis=1), 1.0, atol=1e-12)


def test_explained_variance_layer_selection():
    D, _ = _synthetic()
    _, evr, _ = pc1_directions(D)
    kept = select_layers(evr, 0.01)
    assert 0 not in kept and 1 not in kept  # no variance / near-zero variance (share < 0.01)
    assert kept == [i for i in range(len(evr)) if evr[i] > 0.01]
    assert kept == [2, 3, 4]
    assert select_layers(np.array([0.01, 0.0100001, 0.5]), 0.01) == [1, 2]  # strictly above
    assert select_layers(evr, 1.0) == []


def test_supervised_direction_is_the_normalised_class_mean_difference():
    D, y = _synthetic()
    sup = supervised_directions(D, y)
    diff = D[y == 1].mean(axis=0) - D[y == 0].mean(axis=0)
    for layer in range(1, D.shape[1]):
        np.testing.assert_allclose(sup[layer], diff[layer] / np.linalg.norm(diff[layer]), rtol=1e-12)
    assert np.all(sup[0] == 0)
    lts = project(D, sup)
    assert lts[y == 1, 3].mean() > lts[y == 0, 3].mean()
    with pytest.raises(ValueError, match="both classes"):
        supervised_directions(D, np.ones(len(y), dtype=int))


def test_audit_rule_flags_layers_outside_two_sigma():
    mu = np.array([0.0, 1.0, 2.0, 0.0])
    sigma = np.array([1.0, 0.5, 0.0, 2.0])
    lts = np.array([2.5, 1.9, 9.0, -4.1])
    assert audit_flags(lts, mu, sigma) == [0, 3]  # 1: |0.9| < 1.0; 2: σ = 0 never flags
    assert audit_flags(lts, mu, sigma, layers=[1, 3]) == [3]
    assert crm.anomaly_score(lts, mu, sigma, [0, 1, 3]) == pytest.approx((2.5 + 1.8 + 2.05) / 3)


def test_back_projection_returns_both_ends():
    rng = np.random.default_rng(3)
    W = rng.normal(size=(50, 6))
    V = rng.normal(size=(3, 6))
    out = back_projection(W, V, k=4)
    scores = V @ W.T
    for layer in range(3):
        order = np.argsort(-scores[layer])
        np.testing.assert_array_equal(out["top_ids"][layer], order[:4])
        np.testing.assert_array_equal(out["bottom_ids"][layer], order[::-1][:4])
        np.testing.assert_allclose(out["top_scores"][layer], scores[layer, order[:4]], rtol=1e-5)
    assert out["top_ids"].shape == out["bottom_ids"].shape == (3, 4)
    with pytest.raises(ValueError):
        back_projection(W, rng.normal(size=(3, 5)))


def test_classifier_separates_a_planted_signal_and_not_noise():
    D, y = _synthetic(n=80)
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


def test_fit_basis_roundtrip_through_npz(tmp_path):
    D, y = _synthetic()
    basis = fit_basis(D, y, model="synthetic", template="A", meta={"prompt_set_sha256": "x"}, classifier=False)
    path = basis.save(tmp_path / "basis.npz")
    with np.load(path, allow_pickle=False) as z:  # no pickles inside
        assert z["pc1"].dtype == np.float32
    loaded = CrmBasis.load(path)
    np.testing.assert_array_equal(loaded.pc1, basis.pc1)
    np.testing.assert_array_equal(loaded.calib_lts[SUPERVISED], basis.calib_lts[SUPERVISED])
    assert loaded.kept_layers == basis.kept_layers == [2, 3, 4]
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


# ----------------------------------------------------------------------------------------------------------
# Calibration data and the bundled asset


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
    assert basis.kept_layers and all(basis.evr[i] > 0.01 for i in basis.kept_layers)
    for m in basis.classifier["feature_sets"].values():
        assert 0.0 <= m["ci95"][0] <= m["auc"] <= m["ci95"][1] <= 1.0
    assert basis.calib_lts[PC1].shape == (basis.meta["n_prompts"], 31)


# ----------------------------------------------------------------------------------------------------------
# The engine-level basis and the detectors on the tiny model


@pytest.fixture(scope="module")
def tiny_basis(tiny_handle, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("READ_OR_RECALL_CACHE", str(cache))
    calls: list[tuple[int, int]] = []
    basis = crm.compute_basis(tiny_handle, progress=lambda done, total: calls.append((done, total)))
    yield basis, calls
    mp.undo()


def test_compute_basis_saves_and_load_basis_finds_it(tiny_handle, tiny_basis, monkeypatch):
    basis, calls = tiny_basis
    n = len(crm.load_calibration_prompts())
    assert calls[-1] == (n, n) and len(calls) == n
    path = crm.cache_basis_path(tiny_handle)
    assert path.is_file()
    loaded = crm.load_basis(tiny_handle)
    assert loaded is not None
    np.testing.assert_array_equal(loaded.pc1, basis.pc1)
    assert loaded.classifier["n"] == n
    # another model's basis in this model's cache folder is ignored
    other = fit_basis(*_synthetic(), model="someone-else", template="chat", classifier=False)
    other.save(path)
    assert crm.load_basis(tiny_handle) is None
    basis.save(path)


def test_crm_detectors_score_a_tiny_run(tiny_handle, tiny_basis):
    registry = available()
    assert {"crm_l1", "crm_lts", "crm_lr"} <= set(registry)
    assert registry["crm_lts"].higher_means == "memorized" and registry["crm_l1"].higher_means == "grounded"
    result = run_dual_path(
        tiny_handle, "Who baked it?", "The bread was baked by Ilse.", SETTINGS, free_parametric=False
    )
    assert result.parametric.answer == ""
    inp = DetectorInput(handle=tiny_handle, result=result, settings=SETTINGS)
    lts = registry["crm_lts"].score(inp)
    lr = registry["crm_lr"].score(inp)
    basis, _ = tiny_basis
    d = displacement(tiny_handle, result)
    assert lts == pytest.approx(crm.supervised_score(basis, basis.lts(d, SUPERVISED)), rel=1e-5)
    assert lr == pytest.approx(basis.lr_probability(basis.lts(d, PC1)), rel=1e-5)
    l1 = registry["crm_l1"].score(inp)
    assert inp.cache["crm.parametric_answer"] is not None  # generated because the result had none
    assert 0.0 <= l1 <= 2.0


def test_semantic_delta_is_zero_for_identical_answers():
    assert crm.semantic_delta("Paris is the capital.", "Paris is the capital.") == pytest.approx(0.0, abs=1e-5)
    assert crm.semantic_delta("Paris is the capital.", "Bananas are yellow.") > 0.3


def test_detector_without_basis_says_how_to_compute_it(tiny_handle, tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    result = run_dual_path(tiny_handle, "Q?", "C.", SETTINGS, free_parametric=False)
    with pytest.raises(ValueError, match="crm-basis"):
        available()["crm_lts"].score(DetectorInput(handle=tiny_handle, result=result, settings=SETTINGS))


@pytest.mark.slow
def test_embedded_back_projection_returns_vocabulary_tokens(embedded_handle):
    basis = crm.load_basis(embedded_handle)
    assert basis is not None and basis.template == "chat"
    out = crm.vocabulary_projection(embedded_handle, basis.direction(PC1), k=7)
    assert out["top_ids"].shape == out["bottom_ids"].shape == (31, 7)
    assert np.all((out["top_ids"] >= 0) & (out["top_ids"] < embedded_handle.info.vocab_size))
    vocab = embedded_handle.tokenizer.get_vocab()
    inverse = {v: k for k, v in vocab.items()}
    for row_ids, row_tokens in zip(out["top_ids"].tolist(), out["top_tokens"], strict=True):
        assert len(row_tokens) == 7 and all(isinstance(t, str) for t in row_tokens)
        assert all(i in inverse for i in row_ids)  # real vocabulary entries
    layer = basis.kept_layers[-1]
    assert out["top_tokens"][layer] != out["bottom_tokens"][layer]


def test_probe_command_prints_the_run_json_with_internals_and_crm(
    tiny_handle, tiny_basis, monkeypatch, capsys, tmp_path
):
    import core.cli as cli
    from core.cli.commands import probe
    from core.engine.result import DualPathResult

    monkeypatch.setattr(probe, "load_model", lambda *args, **kwargs: tiny_handle)
    argv = ["probe", "--query", "Who baked it?", "--context", "The bread was baked by Ilse.", "--max-new-tokens", "3"]
    assert cli.main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    result = DualPathResult.from_dict(data)  # every key of the run contract is there
    rows = tiny_handle.info.n_layers + 1
    internals, block = data["extras"]["internals"], data["extras"]["crm"]
    assert len(internals["l2_norm"]) == len(internals["logit_lens_kl"]) == rows
    assert len(internals["attention"]["retrieval"]["entropy_first"]) == tiny_handle.info.n_layers
    assert block["available"] is True
    assert len(block["pc1"]["lts"]) == len(block["supervised"]["lts"]) == rows
    assert len(block["per_answer_position"]["lts_pc1"]) == result.n_tokens
    assert block["classifier"]["feature_sets"]["pc1"]["ci95"][0] <= block["classifier"]["feature_sets"]["pc1"]["auc"]
    assert cli.main(argv) == 0
    assert "LTS_pc1" in capsys.readouterr().out  # the readable per-layer table

    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))  # an empty cache: no basis for this model
    assert cli.main([*argv, "--json"]) == 0
    block = json.loads(capsys.readouterr().out)["extras"]["crm"]
    assert block["available"] is False and "crm-basis" in block["reason"]
