"""Tiny random models of every decoder family the pinned transformers ships, saved as user folders.

Each builder returns a transformers config with the family's real quirks switched on (fewer key/value heads
than query heads, a sliding window shorter than the prompt, soft-capping, parallel residual, ALiBi, fused QKV,
tied and untied embeddings, logit scaling) at 2 layers and hidden size 32. :func:`save_family` writes the
random model as safetensors with the byte-level tokenizer of ``tests/conftest.py`` into a folder, which the
tests load through :func:`core.model.loading.load_model` — the ``--model FOLDER`` path a user takes. Nothing is
downloaded. The family keys are those of :data:`core.model.families.FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from core.model.families import ALIBI, FUSED_QKV, TIED
from tests.conftest import make_byte_tokenizer

D, FF, HEADS, KV, LAYERS, HEAD_DIM, MAX_POS = 32, 64, 4, 2, 2, 8, 512
INIT = 0.2
"""Weight init std: logits of a few nats (the default 0.02 gives logits below 1, where soft-capping is the identity)."""
WINDOW = 4
"""Sliding window (tokens), much shorter than any prompt of the tests."""


def _ids(vocab: int) -> dict[str, int]:
    """Special-token ids inside the tiny vocabulary (many configs default to ids of the real vocabularies)."""
    last = vocab - 1
    return {"bos_token_id": last - 1, "eos_token_id": last, "pad_token_id": last}


GPT2_DIMS = {"n_embd": D, "n_layer": LAYERS, "n_head": HEADS, "n_positions": MAX_POS}
"""The tiny sizes under GPT-2's names (GPT-2, GPT-J, GPTBigCode)."""
HF_DIMS = {
    "hidden_size": D,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "max_position_embeddings": MAX_POS,
}
"""The tiny sizes under the names most configs use."""
LLAMA_DIMS = {**HF_DIMS, "intermediate_size": FF, "num_key_value_heads": KV}
"""…and the MLP width and key/value heads of the Llama-like configs."""


def _config(cls_name: str, vocab: int, dims: dict[str, int], **extra: Any) -> Any:
    """The transformers config ``cls_name`` at the tiny sizes ``dims`` (that config's names), the tiny vocabulary
    and its special-token ids, with the family's ``extra`` switches (which win over ``dims``)."""
    import transformers

    return getattr(transformers, cls_name)(**{"vocab_size": vocab, **dims, **_ids(vocab), **extra})


def _llama_like(cls_name: str, vocab: int, **extra: Any) -> Any:
    return _config(cls_name, vocab, LLAMA_DIMS, **extra)


def _falcon(vocab: int) -> Any:
    return _config("FalconConfig", vocab, HF_DIMS, multi_query=True, parallel_attn=True, alibi=False)


FAMILY_CONFIGS: dict[str, Callable[[int], Any]] = {
    "llama": lambda v: _llama_like("LlamaConfig", v, tie_word_embeddings=False),
    "mistral": lambda v: _llama_like("MistralConfig", v, sliding_window=WINDOW, head_dim=HEAD_DIM),
    "qwen2": lambda v: _llama_like(
        "Qwen2Config", v, tie_word_embeddings=True, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1
    ),
    "qwen3": lambda v: _llama_like("Qwen3Config", v, head_dim=HEAD_DIM, tie_word_embeddings=True),
    "gemma": lambda v: _llama_like("GemmaConfig", v, head_dim=HEAD_DIM),
    "gemma2": lambda v: _llama_like(
        "Gemma2Config",
        v,
        head_dim=HEAD_DIM,
        sliding_window=WINDOW,
        final_logit_softcapping=3.0,
        attn_logit_softcapping=5.0,
        query_pre_attn_scalar=HEAD_DIM,
    ),
    "gemma3_text": lambda v: _llama_like(
        "Gemma3TextConfig",
        v,
        head_dim=HEAD_DIM,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        final_logit_softcapping=3.0,
        query_pre_attn_scalar=HEAD_DIM,
    ),
    "phi3": lambda v: _llama_like("Phi3Config", v, tie_word_embeddings=False),
    "gpt2": lambda v: _config("GPT2Config", v, GPT2_DIMS),
    "gptj": lambda v: _config("GPTJConfig", v, GPT2_DIMS, rotary_dim=4),
    "gpt_neox": lambda v: _config(
        "GPTNeoXConfig",
        v,
        HF_DIMS,
        intermediate_size=FF,
        use_parallel_residual=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        tie_word_embeddings=False,
    ),
    "falcon": _falcon,
    "opt": lambda v: _config("OPTConfig", v, HF_DIMS, ffn_dim=FF, word_embed_proj_dim=D, do_layer_norm_before=True),
    "bloom": lambda v: _config("BloomConfig", v, {"hidden_size": D, "n_layer": LAYERS, "n_head": HEADS}),
    "mpt": lambda v: _config(
        "MptConfig", v, {"d_model": D, "n_heads": HEADS, "n_layers": LAYERS, "max_seq_len": MAX_POS}, expansion_ratio=2
    ),
    "olmo2": lambda v: _llama_like("Olmo2Config", v),
    "stablelm": lambda v: _llama_like(
        "StableLmConfig", v, use_parallel_residual=True, qk_layernorm=True, tie_word_embeddings=False
    ),
    "granite": lambda v: _llama_like(
        "GraniteConfig",
        v,
        embedding_multiplier=4.0,
        logits_scaling=2.0,
        residual_multiplier=0.5,
        attention_multiplier=0.2,
    ),
    "cohere": lambda v: _llama_like("CohereConfig", v, logit_scale=0.5, use_qk_norm=False, tie_word_embeddings=True),
    "cohere2": lambda v: _llama_like(
        "Cohere2Config",
        v,
        logit_scale=0.5,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        tie_word_embeddings=True,
    ),
    "phi": lambda v: _llama_like("PhiConfig", v, num_key_value_heads=HEADS, tie_word_embeddings=False),
    "gpt_bigcode": lambda v: _config("GPTBigCodeConfig", v, GPT2_DIMS, multi_query=True),
    "starcoder2": lambda v: _llama_like("Starcoder2Config", v, sliding_window=WINDOW, tie_word_embeddings=True),
    "mixtral": lambda v: _llama_like(
        "MixtralConfig", v, num_local_experts=4, num_experts_per_tok=2, sliding_window=WINDOW, head_dim=HEAD_DIM
    ),
    "smollm3": lambda v: _llama_like("SmolLM3Config", v, no_rope_layer_interval=2, tie_word_embeddings=True),
}

VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "falcon_alibi": ("falcon", (ALIBI, FUSED_QKV, TIED)),
}
"""Second configurations of a family whose quirks are config switches: key → (family key, the quirks it has).
Falcon-RW uses ALiBi and a sequential residual where Falcon-7B/40B use rotary, multi-query and a parallel one."""


def _falcon_alibi(vocab: int) -> Any:
    config = _falcon(vocab)
    config.alibi, config.parallel_attn, config.multi_query, config.bias = True, False, False, True
    return config


FAMILY_CONFIGS["falcon_alibi"] = _falcon_alibi

NO_CHAT_TEMPLATE = frozenset({"gpt2", "gptj", "opt", "bloom"})
"""Families whose tiny tokenizer is saved without a chat template (as their base checkpoints ship)."""


def save_family(family: str, folder: Path, seed: int = 0) -> Path:
    """Build ``family``'s tiny random model and write it, with a byte-level tokenizer, to ``folder``.

    Returns:
        ``folder``, holding ``config.json``, ``model.safetensors`` and the tokenizer files.
    """
    from transformers import AutoModelForCausalLM

    tokenizer = make_byte_tokenizer()
    if family in NO_CHAT_TEMPLATE:
        tokenizer.chat_template = None
    config = FAMILY_CONFIGS[family](len(tokenizer))
    config.bos_token_id = tokenizer.bos_token_id
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    for name in ("initializer_range", "init_std"):  # larger weights: logits of a few nats, so soft-capping bites
        if hasattr(config, name):
            setattr(config, name, INIT)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder
