"""Fixtures of the family matrix (``test_families.py``): each decoder family's tiny model, saved once per session
and loaded as a user loads a folder, and ``fam``, which runs a test on every family and checks no hook is left."""

from __future__ import annotations

import pytest
import torch

from core.model.families import FAMILIES
from tests.families import VARIANTS, save_family

KEYS = sorted(FAMILIES) + sorted(VARIANTS)
"""Every family of ``core.model.families`` and every variant of ``tests/families.py``."""


@pytest.fixture(scope="session")
def family_folders(tmp_path_factory):
    """``folder(key)``: the family's saved tiny model (built once per session)."""
    root = tmp_path_factory.mktemp("families")
    built: dict[str, object] = {}

    def folder(key: str):
        if key not in built:
            built[key] = save_family(key, root / key)
        return built[key]

    return folder


@pytest.fixture(scope="session")
def family_handles(family_folders):
    """``handle(key)``: the family's model loaded as a user loads a folder (CPU, fp32), with its hook baseline."""
    from core.methods.ablation import count_hooks
    from core.model.loading import load_model

    loaded: dict[str, tuple[object, int]] = {}

    def handle(key: str):
        if key not in loaded:
            h = load_model(str(family_folders(key)), device="cpu")
            with torch.inference_mode():  # transformers installs its own output-capturing hooks once
                h.model(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True, output_attentions=True)
            loaded[key] = (h, count_hooks(h.model))
        return loaded[key][0]

    handle.baseline = lambda key: loaded[key][1]  # type: ignore[attr-defined]
    return handle


@pytest.fixture(params=KEYS)
def fam(request, family_handles):
    """``(key, handle)`` of each family; after the test, no hook of ours is left on the model."""
    from core.methods.ablation import count_hooks

    key = request.param
    h = family_handles(key)
    yield key, h
    assert count_hooks(h.model) == family_handles.baseline(key), f"{key}: a hook was left behind"


def _permute(weights, n_head: int):
    """llama.cpp's row order for a Llama q/k projection (``convert_hf_to_gguf.py``'s ``permute``); transformers'
    GGUF loader undoes it."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


LLAMA_GGUF_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _write_metadata(writer, cfg, tokenizer, chat_template: str | None) -> None:
    """The GGUF key-value header of a Llama config and its byte-level tokenizer, as llama.cpp writes them."""
    writer.add_name("tiny random llama")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_vocab_size(cfg.vocab_size)
    tokens = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
    special = set(tokenizer.all_special_ids)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if i in special else 1 for i in range(len(tokens))])
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(chat_template or tokenizer.chat_template)


def write_llama_gguf(
    path,
    model,
    tokenizer,
    *,
    quantize: bool = False,
    architecture: str = "llama",
    rename: dict[str, str] | None = None,
    chat_template: str | None = None,
):
    """Write a transformers Llama and its byte-level tokenizer as a GGUF file, the way llama.cpp lays one out.

    Args:
        quantize: store every 2-D weight as Q8_0 blocks (else F32, which loads back bit for bit).
        architecture: ``general.architecture`` (another name writes a file of that architecture with Llama tensors,
            for the refusals).
        rename: GGUF tensor name → the name written instead (a damaged file, for the refusals).
        chat_template: written instead of the tokenizer's own.

    Returns:
        ``{hf parameter name: float32 array the file holds}`` (after Q8_0 round trip when ``quantize``; q/k in
        transformers' order).
    """
    import gguf
    import numpy as np
    from gguf.quants import dequantize
    from gguf.quants import quantize as q8

    cfg = model.config
    writer = gguf.GGUFWriter(str(path), architecture)
    _write_metadata(writer, cfg, tokenizer, chat_template)
    names = {"model.embed_tokens.weight": "token_embd", "model.norm.weight": "output_norm", "lm_head.weight": "output"}
    for i in range(cfg.num_hidden_layers):
        names.update({f"model.layers.{i}.{k}.weight": f"blk.{i}.{v}" for k, v in LLAMA_GGUF_NAMES.items()})
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    held = {}
    for hf, name in names.items():
        a = state[hf]
        if hf.endswith("q_proj.weight"):
            a = _permute(a, cfg.num_attention_heads)
        elif hf.endswith("k_proj.weight"):
            a = _permute(a, cfg.num_key_value_heads)
        if quantize and a.ndim == 2:
            blocks = q8(a, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(
                (rename or {}).get(f"{name}.weight", f"{name}.weight"),
                blocks,
                raw_shape=blocks.shape,
                raw_dtype=gguf.GGMLQuantizationType.Q8_0,
            )
            back = dequantize(blocks, gguf.GGMLQuantizationType.Q8_0).reshape(a.shape)
        else:
            writer.add_tensor((rename or {}).get(f"{name}.weight", f"{name}.weight"), a)
            back = a
        if hf.endswith("q_proj.weight"):  # back to transformers' order (the permutation is an involution pair)
            back = state[hf] if not quantize else _unpermute(back, cfg.num_attention_heads)
        elif hf.endswith("k_proj.weight"):
            back = state[hf] if not quantize else _unpermute(back, cfg.num_key_value_heads)
        held[hf] = np.asarray(back, dtype=np.float32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return held


def _unpermute(weights, n_head: int):
    """The inverse of :func:`_permute` (transformers' ``reverse_permute_weights``)."""
    dim = weights.shape[0] // n_head // 2
    return weights.reshape(n_head, dim, 2, *weights.shape[1:]).swapaxes(2, 1).reshape(weights.shape)


@pytest.fixture(scope="session")
def tiny_llama_parts():
    """``(model, tokenizer)``: a fresh copy of the tiny random Llama of ``tests/conftest.py`` and its tokenizer."""
    from tests.conftest import make_byte_tokenizer, make_tiny_llama

    tokenizer = make_byte_tokenizer()
    return make_tiny_llama(len(tokenizer)), tokenizer
