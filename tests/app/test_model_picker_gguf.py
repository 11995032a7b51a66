"""The sidebar's model box takes a GGUF file (issue 36): typed in, it loads through the de-quantize-once path
(core.model.loading) and the page runs on it; the box's caption lists the installed packaged models."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from components import page
from core.model.loading import embedded_cache_path, load_model
from tests.app.conftest import APP, ok
from tests.conftest import make_byte_tokenizer, make_tiny_llama
from tests.unit.model.conftest import write_llama_gguf

DUAL_PATH = "pages/1_Dual_Path.py"


@pytest.fixture
def gguf_file(tmp_path, monkeypatch):
    """A tiny random Llama as a GGUF file, with a fresh user cache (the embedded model's converted copy linked into
    it when there is one, so the landing page does not convert it again); the app's loader is the real one."""
    embedded = embedded_cache_path()
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    if embedded.is_dir():
        embedded_cache_path().parent.mkdir(parents=True)
        embedded_cache_path().symlink_to(embedded, target_is_directory=True)
    monkeypatch.setattr(page, "load_model", load_model)
    page._load_handle.clear()
    tokenizer = make_byte_tokenizer()
    path = tmp_path / "tiny model.gguf"
    write_llama_gguf(path, make_tiny_llama(len(tokenizer)), tokenizer)
    yield path
    page._load_handle.clear()


def test_a_gguf_file_typed_in_the_model_box_loads_and_runs(gguf_file):
    at = ok(AppTest.from_file(APP, default_timeout=300).run())
    at.radio(key="ror.w.model_choice").set_value("custom").run()
    box = at.text_input(key="ror.w.model_id")
    assert "GGUF" in box.label
    ok(box.input(str(gguf_file)).run())
    ok(at.switch_page(DUAL_PATH).run())
    at.number_input(key="ror.w.max_new_tokens").set_value(4).run()
    at.text_area(key="ror.w.query").input("Who wrote the note?")
    at.text_area(key="ror.w.context").input("The note was written by Ada.")
    ok(at.button(key="ror.run").click().run())
    assert not at.error, [e.value for e in at.error]
    assert any(str(gguf_file) in t.value for t in at.sidebar.text), "the sidebar names the loaded GGUF file"
    assert list((gguf_file.parent / "cache" / "models").glob("gguf-*")), "converted once into the cache"
