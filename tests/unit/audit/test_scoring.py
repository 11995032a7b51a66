"""The audit's forward passes and scoring: padded batches agree with unpadded single passes, the first-token KL
with an independent computation, and nothing is generated unless asked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.audit.forward import capture_pairs
from core.audit.scoring import AuditInputError, AuditOptions, audit_pairs, prepare_pairs
from core.methods.internals import layer_states

PAIRS = [
    ("Who?", "Short."),
    ("What is the capital of Veltria?", "The capital of the Republic of Veltria is Marrowgate, a port city."),
    ("When?", "In 1412 the salt traders founded Marrowgate on the northern shore of the island, by the cliffs."),
]


def test_padded_batches_match_unpadded_single_passes(tiny_handle):
    prepared = prepare_pairs(tiny_handle, PAIRS, AuditOptions())
    assert len({len(p.retrieval.ids) for p in prepared}) == 3  # real padding
    captures = capture_pairs(tiny_handle, prepared, batch_size=8)
    for prep, cap in zip(prepared, captures):
        h_c = layer_states(tiny_handle, prep.retrieval.ids)[:, 0].astype(np.float64)
        h_0 = layer_states(tiny_handle, prep.parametric.ids)[:, 0].astype(np.float64)
        np.testing.assert_allclose(cap.displacement, h_c - h_0, atol=2e-5)
        assert (cap.n_retrieval, cap.n_parametric) == (len(prep.retrieval.ids), len(prep.parametric.ids))


def test_first_token_statistics_match_an_independent_computation(tiny_handle):
    prepared = prepare_pairs(tiny_handle, PAIRS, AuditOptions())
    captures = capture_pairs(tiny_handle, prepared, batch_size=2)
    for prep, cap in zip(prepared, captures):
        with torch.no_grad():
            lc = tiny_handle.model(input_ids=torch.tensor([prep.retrieval.ids])).logits[0, -1].double()
            l0 = tiny_handle.model(input_ids=torch.tensor([prep.parametric.ids])).logits[0, -1].double()
        p, q = torch.softmax(lc, -1), torch.softmax(l0, -1)
        kl = float((p * (p.log() - q.log())).sum())
        assert cap.first_token_kl == pytest.approx(kl, abs=1e-5)
        assert cap.entropy_retrieval == pytest.approx(float(-(p * p.log()).sum()), abs=1e-4)
        assert cap.top_retrieval == int(lc.argmax()) and cap.top_parametric == int(l0.argmax())


def test_audit_never_generates_unless_asked(tiny_handle, tiny_calibration, monkeypatch):
    def refuse(**kwargs):
        raise AssertionError("the audit generated")

    monkeypatch.setattr(tiny_handle, "generate", refuse)
    out = audit_pairs(tiny_handle, tiny_calibration, PAIRS, AuditOptions())
    assert [r["generation"] for r in out] == [None, None, None]
    first = out[1]
    assert set(first) >= {"anomaly_flag", "anomaly_score", "lts_trajectory", "flagged_layers", "first_token"}
    assert len(first["lts_trajectory"]) == tiny_handle.info.n_layers + 1
    monkeypatch.undo()
    asked = audit_pairs(tiny_handle, tiny_calibration, PAIRS[:1], AuditOptions(generate=True, max_new_tokens=3))
    gen = asked[0]["generation"]
    assert 1 <= gen["n_tokens"] <= 3 and gen["verdict"] in {"recalled", "read", "inconclusive", "uncalibrated"}


def test_lts_is_the_projection_on_the_calibration_basis(tiny_handle, tiny_calibration):
    (out,) = audit_pairs(tiny_handle, tiny_calibration, PAIRS[1:2])
    prep = prepare_pairs(tiny_handle, PAIRS[1:2], AuditOptions())[0]
    d = layer_states(tiny_handle, prep.retrieval.ids)[:, 0].astype(np.float64) - layer_states(
        tiny_handle, prep.parametric.ids
    )[:, 0].astype(np.float64)
    expected = [float(np.dot(d[i], tiny_calibration.pc1[i].astype(np.float64))) for i in range(d.shape[0])]
    np.testing.assert_allclose(out["lts_trajectory"], expected, atol=1e-5)
    z = [
        abs(expected[i] - float(tiny_calibration.mu[i])) / float(tiny_calibration.sigma[i])
        for i in tiny_calibration.audited_layers
    ]
    assert out["anomaly_score"] == pytest.approx(sum(z) / len(z), abs=1e-4)
    assert out["flagged_layers"] == [i for i, zi in zip(tiny_calibration.audited_layers, z) if zi > 2]


def test_inputs_are_refused_before_any_model_call(tiny_handle):
    with pytest.raises(AuditInputError) as err:
        prepare_pairs(tiny_handle, [("q", "c"), ("q", "   ")], AuditOptions())
    assert (err.value.index, err.value.field, err.value.kind) == (1, "context", "invalid")
    with pytest.raises(AuditInputError) as err:
        prepare_pairs(tiny_handle, [("q", "x" * 200)], AuditOptions(max_prompt_tokens=100))
    assert (err.value.field, err.value.kind) == ("context", "token_budget") and "100" in str(err.value)
    with pytest.raises(AuditInputError) as err:  # over the model's own budget (512 tokens)
        prepare_pairs(tiny_handle, [("q", "x" * 600)], AuditOptions())
    assert err.value.kind == "token_budget"
