"""Fixtures of the internals tests: one torch thread and reference passes (``tiny_result`` is in
``tests/unit/methods/conftest.py``)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    """Every module here runs on one torch thread (``tests/conftest.py``)."""


@pytest.fixture
def tiny_ids(tiny_handle):
    """``tiny_ids(text)``: the tiny tokenizer's ids of a text, without special tokens."""
    return lambda text: list(tiny_handle.tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.fixture
def hf_forward():
    """``hf_forward(handle, ids, **kwargs)``: a plain transformers forward pass, for reference values."""

    def run(handle, ids, **kwargs):
        with torch.inference_mode():
            return handle.model(input_ids=torch.tensor([ids]), use_cache=False, **kwargs)

    return run
