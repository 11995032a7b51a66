"""core.methods.crm.calibration/.store/.vocab on the models: computing and finding a basis, the CRM detectors,
the probe command, and the back-projection on the embedded model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.detectors.registry import DetectorInput, available
from core.engine import run_dual_path
from core.engine.settings import DualPathSettings
from core.methods import crm
from core.methods.crm import PC1, SUPERVISED, fit_basis
from core.methods.internals import displacement

SETTINGS = DualPathSettings(max_new_tokens=4, score_window=4)


def test_compute_basis_saves_and_load_basis_finds_it(tiny_handle, tiny_basis, synthetic):
    basis, calls = tiny_basis
    n = len(crm.load_calibration_prompts())
    assert calls[-1] == (n, n) and len(calls) == n
    path = crm.cache_basis_path(tiny_handle)
    assert path.is_file()
    assert path.parent.name == tiny_handle.slug  # one per-model folder, keyed like every other cache
    loaded = crm.load_basis(tiny_handle)
    assert loaded is not None
    np.testing.assert_array_equal(loaded.pc1, basis.pc1)
    assert loaded.classifier["n"] == n
    # another model's basis in this model's cache folder is ignored
    other = fit_basis(*synthetic(), model="someone-else", template="chat", classifier=False)
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


def test_vocabulary_projection_decodes_both_ends(tiny_handle, tiny_basis):
    basis, _ = tiny_basis
    out = crm.vocabulary_projection(tiny_handle, basis.direction(PC1), k=3)
    assert out["top_ids"].shape == (tiny_handle.info.n_layers + 1, 3)
    assert out["top_tokens"][-1] == tiny_handle.decode_tokens(out["top_ids"][-1].tolist())
    w = tiny_handle.model.lm_head.weight.detach().double().numpy()
    scores = basis.pc1[-1].astype(np.float64) @ w.T
    assert int(out["top_ids"][-1, 0]) == int(np.argmax(scores))


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
    from core.cli import common
    from core.engine.result import DualPathResult

    monkeypatch.setattr(common, "load_model", lambda *args, **kwargs: tiny_handle)
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
