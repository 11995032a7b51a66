"""Shared fixtures: a tiny random Llama built from a config (no hub, no files) and the embedded model."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The run's own swap test (core.engine.swap_verdict) is off for the suite — every page test of the first example
# would pay one more generation — and on in the tests of it (they set READ_OR_RECALL_SWAP=auto).
os.environ.setdefault("READ_OR_RECALL_SWAP", "never")

import pytest
import torch

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_byte_tokenizer():
    """A byte-level tokenizer (256 byte tokens + chat specials) built in memory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|im_end|>", bos_token="<|im_start|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 512
    return fast


def make_tiny_llama(vocab_size: int, seed: int = 0, n_layers: int = 3):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.eval()
    return model


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for the module's tests: the CI box is shared, and OpenMP spinning on two contended cores
    is far slower. Ask for it with ``pytestmark = pytest.mark.usefixtures("one_thread")`` (or from a conftest's
    autouse fixture)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_handle():
    """A :class:`ModelHandle` around a 3-layer random Llama with a byte tokenizer (CPU, fp32)."""
    from core.model.loading import handle_from_model

    tokenizer = make_byte_tokenizer()
    model = make_tiny_llama(len(tokenizer))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return handle_from_model(model, tokenizer, name="tiny-random-llama", source="tests/conftest.py")


@pytest.fixture(scope="session")
def bundled_examples_report(embedded_handle):
    """``evaluate`` (RePCS only) on the ten bundled examples, embedded model, the app's default settings, one torch
    thread: one batched run read by the test of the examples' expected headlines and by the test that evaluate's
    headline is the page's (each row's ``verdict`` is the run's two-axis headline, ``axes`` its axes)."""
    import json

    from core.engine import DualPathSettings
    from core.evaluation import evaluate_rows
    from core.evaluation.data import LabeledRow
    from core.io import asset_path

    examples = json.loads(asset_path("examples", "examples.json").read_text(encoding="utf-8"))
    rows = [
        LabeledRow(i + 1, e["query"], e["context"], "memorized" if e["expected"] == "recalled" else "grounded")
        for i, e in enumerate(examples)
    ]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = evaluate_rows(
            embedded_handle, rows, DualPathSettings(), detectors=["repcs"], noise_sigmas=(), n_boot=10
        )
    finally:
        torch.set_num_threads(before)
    return examples, rows, report


@pytest.fixture(scope="session")
def embedded_handle():
    """The embedded SmolLM2-135M-Instruct on the CPU in float32 (converted once to the user cache, then ~0.2 s to
    load). Pinned to CPU fp32 so the stored reference numbers hold on a machine with a GPU too (fp16 on CUDA
    moves per-token KL by ~1e-2 nats)."""
    from core.model.loading import load_model

    return load_model(device="cpu")
