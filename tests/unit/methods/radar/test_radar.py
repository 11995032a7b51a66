"""RADAR: the 37 features against independent float64 computations, the instrumented forward pass on the
tiny random Llama, the ensemble on synthetic features, the feature cache and the bundled sets."""

from __future__ import annotations

import json
import math
import statistics
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.methods.radar import legacy as radar

PAPER_SURFACE = [
    "mean_confidence", "std_confidence", "max_confidence", "min_confidence", "confidence_range",
    "convergence_layer", "convergence_speed", "confidence_slope",
    "oscillation_count", "early_confidence", "late_confidence", "prediction_stability",
    "mean_entropy", "entropy_change", "information_gain", "layer_consistency",
]
PAPER_MECHANISTIC = [
    "num_specialized_heads", "head_specialization_score", "factual_head_activation", "reasoning_head_activation",
    "attention_entropy",
    "effective_circuit_depth", "circuit_complexity", "activation_flow_variance", "causal_path_length",
    "ablation_robustness", "critical_component_count", "performance_degradation_slope", "intervention_sensitivity",
    "hidden_state_variance", "norm_growth_trajectory", "working_memory_complexity", "state_rank_evolution",
    "direct_logit_attribution", "indirect_effect_strength", "causal_mediation_score", "activation_patching_effect",
]


# ----------------------------------------------------------------------------------------------------------
# Names and specs


def test_feature_names_match_appendix_d():
    assert len(radar.FEATURES) == 37
    assert list(radar.SURFACE_FEATURES) == PAPER_SURFACE  # 16, appendix D.1 order
    assert list(radar.MECHANISTIC_FEATURES) == PAPER_MECHANISTIC  # 21, appendix D.2 order
    assert list(radar.FEATURE_NAMES) == PAPER_SURFACE + PAPER_MECHANISTIC
    assert all(f.formula for f in radar.FEATURES)
    assert {f.kind for f in radar.FEATURES} == {"int", "float"}
    proxies = {f.name for f in radar.FEATURES if f.proxy}
    # appendix F.1: causal effects, activation patching, critical components, working memory (+ constant depths)
    assert {"direct_logit_attribution", "activation_patching_effect", "critical_component_count",
            "working_memory_complexity", "indirect_effect_strength", "causal_mediation_score"} <= proxies
    assert not proxies & set(PAPER_SURFACE)


# ----------------------------------------------------------------------------------------------------------
# Feature maths against independent computations


def _independent_surface(c: np.ndarray, h: np.ndarray) -> dict[str, float]:
    L = len(c)
    layers = list(range(1, L + 1))
    osc = 0
    diffs = [c[i + 1] - c[i] for i in range(L - 1)]
    for a, b in zip(diffs[:-1], diffs[1:]):
        if a * b < 0:
            osc += 1
    std_c = statistics.stdev(c.tolist())
    return {
        "mean_confidence": statistics.fmean(c.tolist()),
        "std_confidence": std_c,
        "confidence_range": max(c) - min(c),
        "convergence_layer": float(list(c).index(max(c))),
        "convergence_speed": 1.0 / (list(c).index(max(c)) + 1),
        "confidence_slope": float(np.polyfit(layers, c, 1)[0]),
        "oscillation_count": float(osc),
        "early_confidence": statistics.fmean(c[: L // 2].tolist()),
        "late_confidence": statistics.fmean(c[L // 2:].tolist()),
        "prediction_stability": 1.0 / (std_c + 1e-8),
        "mean_entropy": statistics.fmean(h.tolist()),
        "entropy_change": h[-1] - h[0],
        "information_gain": h[0] - h[-1],
        "layer_consistency": 1.0 / (statistics.stdev(h.tolist()) + 1e-8),
    }


@pytest.mark.parametrize("L", [2, 7, 30])
def test_surface_features_against_independent_computation(L):
    rng = np.random.default_rng(L)
    c = rng.uniform(0.05, 0.99, size=L)
    h = rng.uniform(0.0, 8.0, size=L)
    got = radar.surface_features(c, h)
    assert list(got) == PAPER_SURFACE
    for name, expected in _independent_surface(c, h).items():
        assert got[name] == pytest.approx(expected, rel=1e-9, abs=1e-12), name


def test_oscillations_ignore_zero_differences():
    # Δc = (+0.1, 0, −0.1, +0.2): only the last pair changes sign across non-zero neighbours
    c = np.array([0.1, 0.2, 0.2, 0.1, 0.3])
    assert radar.surface_features(c, np.ones(5))["oscillation_count"] == 1.0
    assert radar.surface_features(np.array([0.1, 0.5, 0.2, 0.6, 0.3]), np.ones(5))["oscillation_count"] == 3.0


def test_surface_features_reject_bad_shapes():
    with pytest.raises(ValueError):
        radar.surface_features(np.array([0.5]), np.array([1.0]))
    with pytest.raises(ValueError):
        radar.surface_features(np.ones(4), np.ones(3))


def test_mechanistic_features_against_independent_computation():
    rng = np.random.default_rng(3)
    L, H = 6, 4
    he = rng.uniform(0.0, 4.0, size=(L, H))
    v = rng.uniform(1.0, 50.0, size=L)
    n = rng.uniform(1.0, 80.0, size=L)
    r = rng.uniform(1.0, 6.0, size=L)
    got = radar.mechanistic_features(he, v, n, r)
    assert list(got) == PAPER_MECHANISTIC
    h_attn = sum(he.ravel().tolist()) / (L * H)
    n_spec = sum(1 for x in he.ravel() if x < 1.5)
    layer_effects = [sum(row) / H / 10 for row in he.tolist()]
    sigma = statistics.pstdev(layer_effects)
    e_direct = statistics.fmean(layer_effects)
    expected = {
        "num_specialized_heads": n_spec,
        "head_specialization_score": 1 - h_attn / 3,
        "factual_head_activation": 1 / (h_attn + 1e-8),
        "reasoning_head_activation": h_attn / 3,
        "attention_entropy": h_attn,
        "effective_circuit_depth": L,
        "circuit_complexity": (v[-1] / v[0]) * (n[-1] / n[0]),
        "activation_flow_variance": statistics.pvariance(n.tolist()),
        "causal_path_length": L,
        "ablation_robustness": 1 - h_attn / 5,
        "critical_component_count": max(1, n_spec),
        "performance_degradation_slope": sigma,
        "intervention_sensitivity": h_attn / 5,
        "hidden_state_variance": statistics.fmean(v.tolist()),
        "norm_growth_trajectory": n[-1] / n[0],
        "working_memory_complexity": r[-1] - r[0],
        "state_rank_evolution": r[-1] - r[0],
        "direct_logit_attribution": e_direct,
        "indirect_effect_strength": sigma,
        "causal_mediation_score": e_direct * sigma,
        "activation_patching_effect": e_direct,
    }
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name


def test_effective_rank_against_numpy():
    rng = np.random.default_rng(0)
    m = rng.normal(size=(5, 12))
    s = np.linalg.svd(m, compute_uv=False)
    q = s / s.sum()
    assert radar.effective_rank(torch.tensor(m)) == pytest.approx(math.exp(-(q * np.log(q)).sum()), rel=1e-10)
    assert radar.effective_rank(torch.ones(1, 7)) == pytest.approx(1.0)
    assert radar.effective_rank(torch.zeros(3, 4)) == 0.0


# ----------------------------------------------------------------------------------------------------------
# The instrumented forward pass on the tiny random Llama


def _rmsnorm(x: np.ndarray, norm: torch.nn.Module) -> np.ndarray:
    eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
    w = norm.weight.detach().double().numpy()
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def test_trace_matches_an_independent_forward_pass(tiny_handle):
    text = "The capital of France is"
    trace = radar.trace_prompt(tiny_handle, text)
    model = tiny_handle.model
    L, H = tiny_handle.info.n_layers, tiny_handle.info.n_heads
    ids = tiny_handle.tokenizer(text)["input_ids"]
    raw = {}
    handle = model.model.layers[-1].register_forward_hook(
        lambda m, a, o: raw.setdefault("h", o[0] if isinstance(o, tuple) else o)
    )
    try:
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    finally:
        handle.remove()
    assert trace.token_ids == ids and trace.n_layers == L and trace.head_entropy.shape == (L, H)

    # attention entropy H_l,h = −Σ_{i,j} A log A, float64
    for layer in range(L):
        A = out.attentions[layer][0].double().numpy()
        terms = np.where(A > 0, A * np.log(np.where(A > 0, A, 1.0)), 0.0)
        np.testing.assert_allclose(trace.head_entropy[layer], -terms.sum(axis=(1, 2)), rtol=1e-4, atol=1e-5)

    # logit lens: lm_head(final_norm(h_l)) at the last position; the last layer is the raw residual stream
    states = [out.hidden_states[l][0].double().numpy() for l in range(1, L)] + [raw["h"][0].double().numpy()]
    W = model.lm_head.weight.detach().double().numpy()
    for layer, h in enumerate(states):
        logits = W @ _rmsnorm(h[-1], model.model.norm)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        assert trace.confidence[layer] == pytest.approx(p.max(), rel=1e-4)
        assert trace.entropy[layer] == pytest.approx(-(p * np.log(p)).sum(), rel=1e-4, abs=1e-5)
        assert trace.layer_variance[layer] == pytest.approx(h.var(), rel=1e-5)
        assert trace.layer_norm[layer] == pytest.approx(np.linalg.norm(h, axis=-1).mean(), rel=1e-5)
    final = torch.softmax(out.logits[0, -1].double(), -1)
    assert trace.confidence[-1] == pytest.approx(float(final.max()), rel=1e-4)

    features = radar.features_from_trace(trace)
    he = -np.array([[np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0)), 0.0).sum() for a in att[0].double().numpy()]
                    for att in out.attentions])
    assert features["attention_entropy"] == pytest.approx(he.mean(), rel=1e-4)
    assert features["num_specialized_heads"] == float((he < 1.5).sum())


def test_trace_leaves_no_hooks_even_on_error(tiny_handle):
    model = tiny_handle.model

    def count_hooks() -> int:
        return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())

    before = count_hooks()
    radar.trace_prompt(tiny_handle, "hello")
    assert count_hooks() == before

    def boom(module, args, output):
        raise RuntimeError("boom")

    bad = model.model.layers[1].register_forward_hook(boom)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            radar.trace_prompt(tiny_handle, "hello")
    finally:
        bad.remove()
    assert count_hooks() == before


def test_one_token_prompt_gives_37_finite_features(tiny_handle):
    features, trace = radar.extract_features(tiny_handle, "a")
    assert len(trace.token_ids) == 1
    assert list(features) == list(radar.FEATURE_NAMES)
    assert all(math.isfinite(v) for v in features.values())
    L, H = tiny_handle.info.n_layers, tiny_handle.info.n_heads
    assert features["attention_entropy"] == 0.0  # one position attends to itself with weight 1
    assert features["num_specialized_heads"] == L * H
    assert features["state_rank_evolution"] == pytest.approx(0.0)
    assert features["effective_circuit_depth"] == L


def test_long_and_odd_prompts_are_finite(tiny_handle):
    for text in ["If a store has 100 items and sells 30% of them, how many items remain? " * 3, "émoji 🚀 <b>&amp;</b>"]:
        features, _ = radar.extract_features(tiny_handle, text)
        assert len(features) == 37 and all(math.isfinite(v) for v in features.values())


def test_bad_prompts_raise(tiny_handle):
    for text in ["", "   \n"]:
        with pytest.raises(ValueError, match="empty"):
            radar.trace_prompt(tiny_handle, text)
    with pytest.raises(ValueError, match="limit"):
        radar.trace_prompt(tiny_handle, "x" * (tiny_handle.info.max_tokens + 5))


def test_radar_prompt():
    assert radar.radar_prompt("  What is 2+2? ") == "What is 2+2?"
    assert radar.radar_prompt("Q?", "  Some context. ") == "Some context.\n\nQ?"
    assert radar.radar_prompt("Q?", "   ") == "Q?"


# ----------------------------------------------------------------------------------------------------------
# The ensemble on synthetic features


def _synthetic(n_per_class: int, seed: int, shift: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(2 * n_per_class, 37))
    y = np.array([1] * n_per_class + [0] * n_per_class)
    X[y == 1, :5] += shift  # recall rows differ in five features
    return X, y


def test_ensemble_trains_and_predicts_on_synthetic_features():
    X, y = _synthetic(15, seed=0)
    clf = radar.RadarClassifier.fit(X, y)
    X_test, y_test = _synthetic(20, seed=1)
    preds = clf.predict(X_test)
    accuracy = np.mean([(p.label == radar.RECALL) == bool(t) for p, t in zip(preds, y_test)])
    assert accuracy >= 0.9
    p_bar = clf.p_recall(X_test)
    for p, soft in zip(preds, p_bar):
        assert 0.0 <= p.p_recall <= 1.0
        assert p.p_recall == pytest.approx(float(soft))  # VotingClassifier soft vote = mean of the four p_j
        assert p.p_recall == pytest.approx(np.mean(list(p.probabilities.values())))
        assert set(p.votes) == {"random_forest", "gradient_boosting", "svm", "logistic_regression"}
        assert (p.label == radar.RECALL) == (np.mean(list(p.votes.values())) > 0.5)  # the paper's ŷ
        assert p.confidence == pytest.approx(p.p_recall if p.label == radar.RECALL else 1 - p.p_recall)
    again = radar.RadarClassifier.fit(X, y)  # fixed random_state: identical probabilities
    np.testing.assert_array_equal(again.p_recall(X_test), p_bar)


def test_ensemble_rejects_bad_training_data():
    X, y = _synthetic(15, seed=0)
    with pytest.raises(ValueError):
        radar.RadarClassifier.fit(X[:, :10], y)
    with pytest.raises(ValueError):
        radar.RadarClassifier.fit(X, np.ones_like(y))
    X_bad = X.copy()
    X_bad[0, 0] = np.inf
    with pytest.raises(ValueError):
        radar.RadarClassifier.fit(X_bad, y)


def test_rds_and_rci_by_hand():
    X, y = _synthetic(15, seed=2)
    clf = radar.RadarClassifier.fit(X, y)
    x = X[3]
    mu, sd = X.mean(axis=0), X.std(axis=0)

    def score(names):
        idx = [radar.FEATURE_NAMES.index(n) for n in names]
        z = np.mean((x[idx] - mu[idx]) / sd[idx])
        return 1 / (1 + math.exp(-z))

    pred = clf.predict(x[None, :])[0]
    assert pred.rds == pytest.approx(score(radar.RDS_FEATURES), rel=1e-9)
    assert pred.rci == pytest.approx(score(radar.RCI_FEATURES), rel=1e-9)
    at_mean = clf.predict(mu[None, :])[0]
    assert at_mean.rds == pytest.approx(0.5) and at_mean.rci == pytest.approx(0.5)


# ----------------------------------------------------------------------------------------------------------
# Bundled sets, feature tables and the cache


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


def test_features_are_extracted_once_and_cached(tiny_handle, tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    full = radar.load_prompt_sets()
    # a smaller set keeps the test short: 6 + 6 training prompts and the first 4 test prompts
    subset = [p for p in full if p.split == radar.TRAIN and p.id[-2:] <= "06"]
    subset += [p for p in full if p.split == radar.TEST][:4]
    monkeypatch.setattr(radar, "load_prompt_sets", lambda *a, **k: list(subset))
    assert radar.cached_feature_table(tiny_handle) is None
    seen = []
    table = radar.feature_table_for(tiny_handle, progress=lambda done, total: seen.append((done, total)))
    assert table.X.shape == (16, 37) and np.isfinite(table.X).all()
    assert seen[-1] == (16, 16)
    path = radar.feature_cache_path(tiny_handle)
    assert path.is_file() and path.parent == tmp_path / "radar"

    def no_extraction(*args, **kwargs):
        raise AssertionError("features should come from the cache")

    monkeypatch.setattr(radar, "extract_feature_table", no_extraction)
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
        "random_forest", "gradient_boosting", "svm", "logistic_regression"}
    json.dumps(details, allow_nan=False)
    assert detector.score(inp) == score  # second call reuses the row cache

    # a changed feature version makes the cache stale
    monkeypatch.setattr(radar, "FEATURE_VERSION", radar.FEATURE_VERSION + 1)
    assert radar.cached_feature_table(tiny_handle) is None


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
