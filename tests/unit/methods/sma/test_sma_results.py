"""core.methods.sma.results: an SMA result and a context ablation survive their JSON form (``to_dict`` → JSON →
``from_dict``)."""

from __future__ import annotations

import json

import numpy as np

from core.methods.sma.results import ContextAblation, Sample, SMAResult, SMARun
from core.methods.sma.units import CONTEXT, QUERY, Unit


def _ablation() -> ContextAblation:
    scores = np.array([0.25, 0.5], dtype=np.float32)
    return ContextAblation(
        model="m",
        query="Who founded Veltria?",
        context="Veltria was founded by Ada Marrow. Its capital is Marrowgate.",
        settings={"n_samples": 4},
        reference_answer="Ada Marrow",
        sentences=["Veltria was founded by Ada Marrow.", " Its capital is Marrowgate."],
        full_score=1.0,
        scores=scores,
        delta=1.0 - scores,
        answers=["Nobody", "Ada Marrow"],
        similarities=np.array([0.1, 0.9]),
        length_ratios=np.array([1.0, 1.0]),
        seconds=0.5,
    )


def test_a_context_ablation_round_trips_through_json():
    ablation = _ablation()
    again = ContextAblation.from_dict(json.loads(json.dumps(ablation.to_dict())))
    assert again.to_dict() == ablation.to_dict()
    for name in ("scores", "delta", "similarities", "length_ratios"):
        value = getattr(again, name)
        assert isinstance(value, np.ndarray) and value.dtype == np.float64
        np.testing.assert_array_equal(value, np.asarray(getattr(ablation, name), dtype=np.float64))
    assert (again.kind, again.score_kind, again.sentences) == ("context_ablation", "agreement", ablation.sentences)


def _run(rag: bool, beta: list[float]) -> SMARun:
    sample = Sample(mask="10", answer="Ada", n_tokens=1, length_ratio=0.5, similarity=0.75, score=0.625)
    beta32 = np.array(beta, dtype=np.float32)
    return SMARun(rag, "prompt", "Ada Marrow", 2, list(range(len(beta))), beta32, None, [sample], 4, 0.25)


def test_an_sma_result_round_trips_through_json_with_every_field():
    on, off = _run(True, [0.5, -0.25, 0.125]), _run(False, [0.25, 0.75])
    units = [Unit("Who ", QUERY), Unit("founded?", QUERY), Unit("Ada.", CONTEXT)]
    beta_on, beta_off = np.array([0.5, -0.25, 0.125]), np.array([0.25, 0.75, 0.0])
    result = SMAResult("m", "Who founded?", "Ada.", "chatml", {"n_samples": 4}, units, beta_on, beta_off,
                       beta_on - beta_off, on, off, {"total_s": 1.0})  # fmt: skip
    data = result.to_dict()
    assert data["kind"] == "sma" and data["ads"] == [0.25, -1.0, 0.125]
    assert data["units"][2] == {"text": "Ada.", "segment": CONTEXT}
    assert data["on"]["beta"] == [float(b) for b in on.beta] and data["on"]["intercept"] is None
    assert data["off"]["samples"] == [vars(off.samples[0])]
    assert data["membership_score"] == (0.25 + 1.0) / 2  # mean |ADS| over the two query units
    assert data["labels_default"] == result.labels()
    again = SMAResult.from_dict(json.loads(json.dumps(data)))
    assert again.to_dict() == data
    assert again.on.beta.dtype == np.float64 and again.units == units and again.off.samples == off.samples
