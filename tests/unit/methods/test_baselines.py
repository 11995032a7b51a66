"""Black-box baselines on the context text: PPL, zlib ratio, Min-K% Prob, Min-K%++ (hand computations and an
independent float64 forward on the tiny model)."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch

from core.detectors import DetectorInput, available, get, keys, resolve
from core.detectors import baselines as baseline_detectors
from core.engine import DualPathSettings, run_dual_path
from core.methods import baselines
from core.methods.baselines import context_token_stats, min_k_plus_plus, min_k_prob, perplexity, zlib_ratio

TEXT = "The lighthouse of Orrin was built in 1802 from grey granite."


def test_token_stats_match_an_independent_forward(tiny_handle):
    stats = context_token_stats(tiny_handle, TEXT)
    tok = tiny_handle.tokenizer
    ids = list(tok(TEXT, add_special_tokens=False)["input_ids"])  # the byte tokenizer adds no BOS: none prepended
    with torch.inference_mode():
        logits = tiny_handle.model(input_ids=torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, -1).numpy()
    n = len(ids) - 1
    want = np.array([logp[i, ids[i + 1]] for i in range(n)])
    np.testing.assert_allclose(stats["logprob"], want, rtol=1e-5, atol=1e-6)
    p = np.exp(logp[:n])
    mu = (p * logp[:n]).sum(-1)
    sigma = np.sqrt((p * logp[:n] ** 2).sum(-1) - mu**2)
    np.testing.assert_allclose(stats["mu"], mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["sigma"], sigma, rtol=1e-4, atol=1e-6)


def test_scores_by_hand():
    lp = np.log(np.array([0.5, 0.25, 0.1, 0.8, 0.05]))
    assert perplexity(lp) == pytest.approx(math.exp(-lp.mean()))
    assert zlib_ratio(lp, TEXT) == pytest.approx(-lp.mean() / len(zlib.compress(TEXT.encode())))
    # k = 40 % of 5 tokens → the 2 lowest: 0.05 and 0.1
    assert min_k_prob(lp, 40) == pytest.approx((math.log(0.05) + math.log(0.1)) / 2)
    assert min_k_prob(lp, 1) == pytest.approx(math.log(0.05))  # at least one token
    assert min_k_prob(lp, 100) == pytest.approx(lp.mean())
    mu = np.array([-1.0, -2.0, -1.5, -0.5, -3.0])
    sigma = np.array([0.5, 1.0, 2.0, 0.25, 1.0])
    z = (lp - mu) / sigma
    assert min_k_plus_plus(lp, mu, sigma, 40) == pytest.approx(np.sort(z)[:2].mean())
    with pytest.raises(ValueError):
        min_k_prob(lp, 0)
    with pytest.raises(ValueError):
        perplexity(np.array([]))


def test_registered_detectors_share_one_forward(tiny_handle, monkeypatch):
    registry = available()
    names = ["ppl", "zlib", "min_k_10", "min_k_20", "min_kpp_10", "min_kpp_20"]
    assert set(names) <= set(registry)
    assert registry["ppl"].higher_means == "grounded" and registry["min_k_20"].higher_means == "memorized"
    res = run_dual_path(
        tiny_handle, "Who built it?", TEXT, DualPathSettings(max_new_tokens=3, score_window=3), free_parametric=False
    )
    calls = []
    real = baselines.context_token_stats
    monkeypatch.setattr(baseline_detectors, "context_token_stats", lambda h, t: calls.append(t) or real(h, t))
    inp = DetectorInput(handle=tiny_handle, result=res, settings=DualPathSettings())
    scores = {n: registry[n].score(inp) for n in names}
    assert len(calls) == 1 and calls[0] == TEXT
    stats = inp.cache[keys.CONTEXT_TOKENS]
    assert scores["ppl"] == pytest.approx(perplexity(stats["logprob"]))
    assert scores["min_kpp_20"] == pytest.approx(min_k_plus_plus(stats["logprob"], stats["mu"], stats["sigma"], 20))


def test_k_is_selectable_by_name():
    assert get("min_kpp_35") is not None and get("min_k_5") is not None
    assert {"min_kpp_35", "min_k_5"} <= set(available())
    assert get("min_k_5").higher_means == "memorized" and get("min_k_5").cost == "forward"
    assert get("min_k_0") is None and get("min_k_101") is None and get("min_kx_5") is None
    with pytest.raises(ValueError, match="min_k_0"):
        resolve(["repcs", "min_k_0"])


def test_empty_context_is_refused(tiny_handle):
    with pytest.raises(ValueError, match="empty"):
        context_token_stats(tiny_handle, "   ")
