"""Gemma 3 270M end to end (issue 36): the second real model, a GGUF with a 262,144-token vocabulary, loads offline
from its development packages and runs the command line; the sliced lens and context scores equal the whole
computation on its real vocabulary. Skipped where the packages are not installed (``make install-dev`` installs
them)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import core.cli.common
import core.methods.baselines as baselines
from core.cli import main
from core.model.gguf_files import GEMMA3_270M
from core.model.loading import gguf_cache_path

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not GEMMA3_270M.installed(),
        reason=f"Gemma 3 270M is not installed (a development dependency: {GEMMA3_270M.install})",
    ),
]

QUERY = "What is the capital of Veltria?"
CONTEXT = "The capital of Veltria is Marrowgate, a harbour city founded by salt traders."


@pytest.fixture(scope="module")
def gemma():
    """Gemma 3 270M on the CPU in float32 (converted once into the user cache: about 2 minutes the first time)."""
    from core.model.loading import load_model

    return load_model(GEMMA3_270M.key, device="cpu")


def test_gemma_loads_offline_from_its_packages(gemma):
    info = gemma.info
    assert info.name == GEMMA3_270M.name and GEMMA3_270M.sha256 in info.source
    assert (info.vocab_size, info.n_layers, info.hidden_size, info.dtype) == (262_144, 18, 640, "float32")
    assert not info.has_chat_template  # a base model: the plain templates A–D
    assert (gguf_cache_path(GEMMA3_270M.sha256) / "model.safetensors").is_file()
    assert type(gemma.model).__name__ == "Gemma3ForCausalLM"


def test_gemma_runs_the_dual_path_from_the_command_line(gemma, monkeypatch, capsys):
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: gemma)
    argv = ["run", "--model", GEMMA3_270M.key, "--query", QUERY, "--context", CONTEXT, "--json"]
    assert main([*argv, "--max-new-tokens", "4"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == GEMMA3_270M.name and data["template"] == "A"
    assert 1 <= len(data["token_kl"]) <= 4 and all(np.isfinite(data["token_kl"]))
    assert np.isfinite(data["repcs_score"]) and data["rag_answer"]
    assert max(max(row) for row in data["topk_ids_rag"]) < 262_144


def test_gemma_lens_and_context_scores_in_slices_equal_the_whole(gemma, monkeypatch):
    from core.methods.internals.lens import logit_lens_compare
    from core.model.trace import ALL, trace

    ids = gemma.tokenizer(CONTEXT)["input_ids"]
    states = trace(gemma, [ids], positions=ALL).residual[0].numpy()  # (19, T, 640)
    a, b = states[:, -3:], states[:, -4:-1]
    whole = logit_lens_compare(gemma, a, b, top_k=3, chunk=10_000)  # 57 rows × 262,144 at once
    sliced = logit_lens_compare(gemma, a, b, top_k=3)  # 16 rows a slice
    np.testing.assert_allclose(sliced.kl, whole.kl, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(sliced.retrieval.topk_ids, whole.retrieval.topk_ids)
    full = baselines.context_token_stats(gemma, CONTEXT)  # one forward's logits
    monkeypatch.setattr(baselines, "FULL_LOGITS_BYTES", 0)  # the states path, sliced
    for key, values in baselines.context_token_stats(gemma, CONTEXT).items():
        np.testing.assert_allclose(values, full[key], rtol=1e-4, atol=1e-4, err_msg=key)
    with torch.inference_mode():
        logits = gemma.model(input_ids=torch.tensor([ids])).logits[0, -1]
    lens_last = logit_lens_compare(gemma, states[:, -1:], states[:, -1:], top_k=1).retrieval.topk_ids[-1, 0, 0]
    assert lens_last == int(logits.argmax())  # the lens of the last layer is the model's own distribution
