"""Model loading errors, token budget and prompt templates."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from core.model.loading import ModelLoadError, load_model, token_budget
from core.model.prompts import TEMPLATES, build_prompt, clean_text, resolve_template


def test_unknown_model_offline_fails_fast_and_clearly(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache"):
        load_model("no-such-owner/no-such-model-xyz")
    assert time.perf_counter() - start < 10


def test_malformed_model_spec():
    with pytest.raises(ModelLoadError, match="neither a local folder"):
        load_model("a/b/c/d")


def test_local_folder_without_model(tmp_path):
    with pytest.raises(ModelLoadError, match="not a model folder"):
        load_model(str(tmp_path))


def test_token_budget_takes_the_minimum():
    cfg = SimpleNamespace(max_position_embeddings=2048)
    assert token_budget(cfg, SimpleNamespace(model_max_length=int(1e30)), 4096) == 2048
    assert token_budget(cfg, SimpleNamespace(model_max_length=512), 4096) == 512
    assert token_budget(SimpleNamespace(), SimpleNamespace(), 100) == 100


def test_templates_differ_only_by_context(tiny_handle):
    tok = tiny_handle.tokenizer
    for key in ("A", "B", "C", "D", "chat"):
        t = resolve_template(key, tok)
        rag = build_prompt(t, tok, "Q?", "CTX")
        para = build_prompt(t, tok, "Q?", None)
        assert "CTX" in rag and "CTX" not in para and "Q?" in para
    assert resolve_template("auto", tok).key == "chat"
    with pytest.raises(ValueError):
        resolve_template("nope", tok)


def test_template_A_is_the_crm_text():
    assert TEMPLATES["A"].with_context.format(context="c", query="q") == "Context: c\n\nQuestion: q\n\nAnswer:"


def test_clean_text_keeps_newlines_emoji_rtl():
    text, removed = clean_text("a\x00b\nc\td🙂 שלום\x1b")
    assert text == "ab\nc\td🙂 שלום" and removed == 2
