"""core.model.loading (issue 17, hardening): a folder that is not a model is named as such before any
tokenizer call (11)."""

from __future__ import annotations

import os

import pytest
import transformers

from core.model.loading import ModelLoadError, load_model

# ----------------------------------------------------------------------------------------------------------
# 11. model folders


@pytest.fixture
def no_tokenizer(monkeypatch):
    """Fail the test if a tokenizer or model is loaded at all."""

    def refuse(*args, **kwargs):
        raise AssertionError("a tokenizer or model was loaded")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)


def test_an_empty_folder_is_not_a_model_folder(tmp_path, no_tokenizer):
    with pytest.raises(ModelLoadError, match=r"not a model folder \(no config.json\)"):
        load_model(str(tmp_path))


def test_a_system_folder_given_relatively_is_not_a_model_folder(tmp_path, no_tokenizer, monkeypatch):
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    monkeypatch.chdir(nested)
    with pytest.raises(ModelLoadError, match=r"'\.\./\.\./etc' is not a model folder \(no config.json\)"):
        load_model("../../etc")
    if os.path.isdir("/etc"):
        with pytest.raises(ModelLoadError, match=r"not a model folder"):
            load_model("/etc")


def test_a_missing_path_is_not_sent_to_the_hub(tmp_path, no_tokenizer):
    with pytest.raises(ModelLoadError, match=r"not a model folder: there is no such folder"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(ModelLoadError, match=r"no such folder"):
        load_model("./no-such-model-folder")


def test_an_empty_model_name_is_refused_not_read_as_the_embedded_model(no_tokenizer):
    for spec in ("", "   "):
        with pytest.raises(ModelLoadError, match=r"model name is empty"):
            load_model(spec)
