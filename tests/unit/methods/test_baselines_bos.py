"""The context baselines prepend a BOS token only where the tokenizer adds one by default (issue 11).

The reference implementations of Min-K% / Min-K%++ tokenize with ``tokenizer(text)`` (default special tokens)
and score ``input_ids[1:]``. SmolLM2's ``bos_token`` is the chat-turn marker ``<|im_start|>``, which its
tokenizer never adds to plain text: the first context word must then not be scored at all.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.methods.baselines import adds_bos, context_token_stats
from core.model.loading import handle_from_model
from tests.conftest import make_byte_tokenizer, make_tiny_llama

TEXT = "The lighthouse of Orrin was built in 1802 from grey granite."


def _independent(model, ids: list[int]) -> np.ndarray:
    """log p(ids[i+1] | ids[:i+1]) for every i, float64, from a plain forward of the model."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, -1).numpy()
    return np.array([logp[i, ids[i + 1]] for i in range(len(ids) - 1)])


def _bos_adding_tokenizer():
    """The byte tokenizer with a post-processor that adds ``<|im_start|>`` as a real BOS (Llama-style)."""
    from tokenizers import processors

    tok = make_byte_tokenizer()
    bos = tok.bos_token_id
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", bos)]
    )
    return tok


def test_no_bos_added_means_first_token_not_scored(tiny_handle):
    tok = tiny_handle.tokenizer
    assert tok.bos_token_id is not None and not adds_bos(tok)  # like SmolLM2: a bos_token that is never added
    ids = list(tok(TEXT, add_special_tokens=False)["input_ids"])
    stats = context_token_stats(tiny_handle, TEXT)
    assert stats["logprob"].shape == (len(ids) - 1,)  # the old code scored len(ids) tokens (after <|im_start|>)
    np.testing.assert_allclose(stats["logprob"], _independent(tiny_handle.model, ids), rtol=1e-5, atol=1e-6)


def test_bos_added_by_default_is_prepended():
    tok = _bos_adding_tokenizer()
    assert tok("x")["input_ids"][0] == tok.bos_token_id and adds_bos(tok)
    model = make_tiny_llama(len(tok))
    handle = handle_from_model(model, tok, name="tiny-bos", source="test")
    ids = [tok.bos_token_id, *tok(TEXT, add_special_tokens=False)["input_ids"]]
    stats = context_token_stats(handle, TEXT)
    assert stats["logprob"].shape == (len(ids) - 1,)  # every context token, the first one after BOS
    np.testing.assert_allclose(stats["logprob"], _independent(model, ids), rtol=1e-5, atol=1e-6)


def test_single_token_without_bos_is_refused(tiny_handle):
    with pytest.raises(ValueError, match="no token to score"):
        context_token_stats(tiny_handle, "x")


@pytest.mark.slow
def test_embedded_smollm2_adds_no_bos(embedded_handle):
    tok = embedded_handle.tokenizer
    assert tok.bos_token == "<|im_start|>" and not adds_bos(tok)
    ids = list(tok(TEXT, add_special_tokens=False)["input_ids"])
    assert context_token_stats(embedded_handle, TEXT)["logprob"].shape == (len(ids) - 1,)
