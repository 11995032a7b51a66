"""core.methods.sma.results: a context ablation survives its JSON form (``to_dict`` → JSON → ``from_dict``)."""

from __future__ import annotations

import json

import numpy as np

from core.methods.sma.results import ContextAblation


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
