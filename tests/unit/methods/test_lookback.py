"""The Lookback Lens' maths and forward: LR_t^{ℓ,h} = A_ctx / (A_ctx + A_new) against transformers' own attentions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.engine import DualPathSettings, run_dual_path
from core.methods.internals.replay import prepared_for
from core.methods.lookback import (
    LookbackModel,
    analyze,
    analyze_map,
    fit_lookback,
    lookback_map,
    lookback_maps,
    span_features,
    window_features,
    windows,
)
from core.methods.lookback.maths import head_mean_curve

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = DualPathSettings(max_new_tokens=10, score_window=10, top_k=3, force_length=True)
Q, C = "Where is the tower?", "The tower stands in Quillmere, by the river."


@pytest.fixture(scope="module")
def results(tiny_handle):
    return [
        run_dual_path(tiny_handle, Q, C, SETTINGS),
        run_dual_path(tiny_handle, "Who keeps bees?", "Old Mara keeps the bees.", SETTINGS),
    ]


def _by_hand(handle, result) -> np.ndarray:
    """LR from ``output_attentions`` (eager) over prompt + answer[:-1]: the query plen − 1 + t produces answer
    token t; A_ctx its mean weight on the prompt, A_new on the answer tokens before t."""
    prompt = list(prepared_for(handle, result).retrieval.ids)
    answer = list(result.answer_token_ids)
    ids = prompt + answer[:-1]
    with torch.inference_mode():
        out = handle.model(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False)
    plen, n = len(prompt), len(answer)
    lr = np.full((len(out.attentions), out.attentions[0].shape[1], n), np.nan)
    for layer, a in enumerate(out.attentions):
        w = a[0].double().numpy()  # (H, T, T)
        for t in range(1, n):
            q = plen - 1 + t
            a_ctx = w[:, q, :plen].mean(-1)
            a_new = w[:, q, plen : plen + t].mean(-1)  # answer tokens 0 … t − 1
            lr[layer, :, t] = a_ctx / (a_ctx + a_new)
    return lr


def test_the_ratio_matches_a_by_hand_computation(tiny_handle, results) -> None:
    for result in results:
        m = lookback_map(tiny_handle, result)
        expected = _by_hand(tiny_handle, result)
        assert m.lr.shape == (tiny_handle.info.n_layers, tiny_handle.info.n_heads, result.n_tokens)
        assert m.lr.dtype == np.float32
        assert np.all(np.isnan(m.lr[:, :, 0])), "the first answer token has no earlier answer token: NaN"
        np.testing.assert_allclose(m.lr[:, :, 1:], expected[:, :, 1:], rtol=0, atol=1e-6)
        assert np.all((m.lr[:, :, 1:] >= 0) & (m.lr[:, :, 1:] <= 1))


def test_batched_maps_equal_single_ones(tiny_handle, results) -> None:
    together = lookback_maps(tiny_handle, results, batch_size=2)
    for result, m in zip(results, together, strict=True):
        alone = lookback_map(tiny_handle, result)
        np.testing.assert_allclose(m.lr, alone.lr, rtol=0, atol=1e-5)
        assert m.answer_tokens == list(result.answer_tokens)


def test_span_features_skip_the_first_token_and_are_layer_major() -> None:
    lr = np.random.default_rng(0).uniform(size=(3, 2, 5))
    lr[:, :, 0] = np.nan
    x = span_features(lr)
    assert x.shape == (6,)
    np.testing.assert_allclose(x, lr[:, :, 1:].mean(-1).reshape(-1))
    assert x[1 * 2 + 1] == pytest.approx(lr[1, 1, 1:].mean())  # feature ℓ·H + h is head h of layer ℓ
    with pytest.raises(ValueError, match="at least two tokens"):
        span_features(lr[:, :, :1])
    np.testing.assert_allclose(head_mean_curve(lr)[1:], lr[:, :, 1:].mean(axis=(0, 1)))
    assert np.isnan(head_mean_curve(lr)[0])


def test_sliding_windows_of_eight_tokens() -> None:
    assert windows(1) == [] and windows(2) == [(1, 2)] and windows(9) == [(1, 9)]
    assert windows(12) == [(1, 9), (2, 10), (3, 11), (4, 12)]
    lr = np.random.default_rng(1).uniform(size=(2, 3, 12))
    lr[:, :, 0] = np.nan
    feats, spans = window_features(lr)
    assert feats.shape == (4, 6) and spans == windows(12)
    np.testing.assert_allclose(feats[2], lr[:, :, 3:11].mean(-1).reshape(-1))
    with pytest.raises(ValueError, match="window"):
        windows(5, 0)


def _synthetic(n: int = 60, L: int = 2, H: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = np.array([0, 1] * (n // 2))
    X = rng.normal(0.5, 0.1, size=(n, L * H))
    X[:, min(2, L * H - 1)] -= 0.1 * y  # head (0, 2) looks back less on recalled rows
    return X, y


def test_fit_matches_scikit_learn_and_round_trips_through_json(tmp_path) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = _synthetic()
    model, oof = fit_lookback(X, y, n_layers=2, n_heads=3, model="m", model_slug="m", template="chat", n_boot=50)
    ref = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=5000)).fit(X, y)
    np.testing.assert_allclose(model.probabilities(X), ref.predict_proba(X)[:, 1], atol=1e-8)
    assert oof.shape == (60,) and model.auc_oof > 0.7
    assert model.head_weights().shape == (2, 3) and model.head_weights()[0, 2] < 0
    assert model.tau == pytest.approx(np.quantile(oof[y == 0], 0.95))
    path = model.save(tmp_path / "m.json")
    again = LookbackModel.load(path)
    assert again == model
    data = json.loads(path.read_text())
    data["coef"] = data["coef"][:-1]
    with pytest.raises(ValueError, match="n_layers × n_heads"):
        LookbackModel.from_dict(data)
    with pytest.raises(ValueError, match="version"):
        LookbackModel.from_dict({**json.loads(path.read_text()), "version": 99})
    with pytest.raises(ValueError, match="rows of each label"):
        fit_lookback(X[:6], y[:6], n_layers=2, n_heads=3, model="m", model_slug="m", template="chat")


def test_the_view_scores_each_window_with_the_classifier() -> None:
    X, y = _synthetic(L=1, H=2)
    model, _ = fit_lookback(X, y, n_layers=1, n_heads=2, model="m", model_slug="m", template="chat", n_boot=20)
    lr = np.random.default_rng(2).uniform(size=(1, 2, 11)).astype(np.float32)
    lr[:, :, 0] = np.nan
    view = analyze_map(lr, [f"t{i}" for i in range(11)], model)
    assert len(view.windows) == 3 and view.window_p.shape == (3,)
    assert view.window_p[1] == pytest.approx(model.probability(lr[:, :, 2:10].mean(-1).reshape(-1)))
    assert view.p_recalled == pytest.approx(model.probability(span_features(lr)))
    assert len(view.table()) == 1 * 2 * 11 and view.table()[0]["lookback_ratio"] is None
    assert view.window_table()[0]["tokens"] == "".join(f"t{i}" for i in range(1, 9))
    bare = analyze_map(lr, [f"t{i}" for i in range(11)], None)
    assert bare.p_recalled is None and bare.window_p.size == 0 and bare.window_mean.shape == (3,)
    one = analyze_map(lr[:, :, :1], ["t0"], model)
    assert one.windows == [] and one.p_recalled is None and "one-token" in one.notes[0]


def test_analyze_on_the_tiny_model_says_it_has_no_classifier(tiny_handle, results) -> None:
    view = analyze(tiny_handle, results[0])
    assert view.lr.shape[-1] == results[0].n_tokens and view.p_recalled is None
    assert "No Lookback Lens classifier for 'tiny-random-llama'" in view.classifier
    assert "python -m core calibrate-model --model tiny-random-llama" in view.classifier  # the one step


def test_a_result_of_another_model_is_refused(tiny_handle, results) -> None:
    import dataclasses

    other = dataclasses.replace(results[0], model="another-model")
    with pytest.raises(ValueError, match="another-model"):
        lookback_map(tiny_handle, other)
