"""Fixtures of the Ray tests: one local Ray for the whole session (2 CPUs, no dashboard), and the tiny random
Llama saved to a folder so Ray workers load it through :func:`core.model.loading.load_model`, as the CLI does."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.conftest import make_byte_tokenizer, make_tiny_llama


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray started once for the session and shut down at its end."""
    ray = pytest.importorskip("ray")
    from core.scale.cluster import connect

    started = not ray.is_initialized()
    if started:
        # address="local": a new Ray of our own, never another Ray that happens to run on this machine
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    connect()  # reuses the running Ray, quiets Ray Data's own bars
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> Path:
    """The tiny random Llama and its byte tokenizer saved as a model folder (safetensors)."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = make_byte_tokenizer()
    model = make_tiny_llama(len(tokenizer))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_spec(tiny_folder):
    from core.scale.spec import ModelSpec

    return ModelSpec(model=str(tiny_folder), device="cpu")


@pytest.fixture(scope="session")
def tiny_local(tiny_spec):
    """The folder's model loaded here, the way every worker loads it."""
    return tiny_spec.load()
