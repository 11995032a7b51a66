"""AppTest runs of the landing page and the Dual Path page with the embedded model."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from components.text import escape_markdown
from core.engine.verdict import DISPLAY
from core.examples import load_examples
from tests.app.conftest import APP, ok, open_script

DUAL_PATH = "pages/1_Dual_Path.py"
TIMEOUT = 300  # seconds per script run: the embedded model on a busy 2-core CPU
VERDICT_PHRASES = tuple(DISPLAY.values())  # core.engine.verdict: the one wording
SCRIPT = "<script>alert(1)</script>"

pytestmark = pytest.mark.slow


def _app() -> AppTest:
    return open_script(APP, TIMEOUT)


def _dual_path(max_new_tokens: int = 16) -> AppTest:
    """The Dual Path page, reached from the landing page, with short answers to keep the test quick."""
    at = _app()
    at.switch_page(DUAL_PATH).run()
    ok(at)
    at.number_input(key="ror.w.max_new_tokens").set_value(max_new_tokens).run()
    ok(at)
    return at


def _example(kind: str):
    """A bundled example of ``kind`` (any example when the set has none of that kind)."""
    examples = load_examples()
    return next((e for e in examples if e.kind == kind), examples[0])


def _alerts(at: AppTest) -> list[str]:
    return [e.value for kind in (at.success, at.warning, at.info, at.error) for e in kind]


def _run(at: AppTest, query: str, context: str) -> AppTest:
    at.text_area(key="ror.w.query").input(query)
    at.text_area(key="ror.w.context").input(context)
    at.button(key="ror.run").click().run()
    ok(at)
    return at


def test_landing_page_lists_examples() -> None:
    at = _app()
    assert at.title[0].value == "Read or Recall"
    picker = at.selectbox(key="ror.w.example")
    labels = [e.label for e in load_examples()]
    assert labels and picker.options == labels
    assert len(at.get("page_link")) == 1
    assert any("SmolLM2" in t.value for t in at.sidebar.text), "the sidebar names the loaded model"


def test_landing_example_fills_inputs_and_settings_persist() -> None:
    example = load_examples()[0]
    at = _app()
    at.selectbox(key="ror.w.example").select(example.id).run()
    at.slider(key="ror.w.top_k").set_value(7).run()
    assert not at.exception
    assert [t.value for t in at.main.text] == [example.query, example.context]
    assert any("What to expect" in a for a in _alerts(at))

    at.switch_page(DUAL_PATH).run()
    assert not at.exception
    assert at.text_area(key="ror.w.query").value == example.query
    assert at.text_area(key="ror.w.context").value == example.context
    assert at.slider(key="ror.w.top_k").value == 7, "sidebar settings survive a page switch"


def test_a_rerun_does_not_push_unchanged_inputs_over_what_the_user_is_typing() -> None:
    """A widget whose key is assigned in session state is re-sent to the browser (``set_value``), over any
    text typed there and not yet committed. A rerun caused by another widget must therefore not re-send the
    query, the context or the settings; a new value (an example) and a page switch must."""
    example = load_examples()[0]
    at = _dual_path()
    at.text_area(key="ror.w.query").input("Where is Marrowgate?").run()
    at.text_area(key="ror.w.context").input("Marrowgate is the capital of Veltria.").run()
    at.slider(key="ror.w.top_k").set_value(6).run()  # a rerun triggered by another widget
    ok(at)
    pushed = {
        k: at.get(kind)[i].proto.set_value
        for kind in ("text_area", "number_input", "slider")
        for i, k in enumerate(w.key for w in at.get(kind))
    }
    assert pushed and not any(pushed.values()), f"re-sent on an unrelated rerun: {pushed}"
    assert at.text_area(key="ror.w.query").value == "Where is Marrowgate?"

    at.selectbox(key="ror.w.example").select(example.id).run()  # a new value must reach the boxes
    assert at.text_area(key="ror.w.query").proto.set_value
    assert at.text_area(key="ror.w.query").value == example.query

    at.switch_page("app.py").run()
    at.switch_page(DUAL_PATH).run()  # a new widget on each page: seeded from the store again
    ok(at)
    assert at.text_area(key="ror.w.query").value == example.query
    assert at.text_area(key="ror.w.context").value == example.context
    assert at.slider(key="ror.w.top_k").value == 6
    assert at.number_input(key="ror.w.max_new_tokens").value == 16


def test_landing_analyze_button_runs_on_the_dual_path_page() -> None:
    example = _example("known-fact")
    at = _app()
    at.selectbox(key="ror.w.example").select(example.id).run()
    at.number_input(key="ror.w.max_new_tokens").set_value(12).run()
    at.button(key="ror.landing.analyze").click().run()
    ok(at)
    assert at.title[0].value == "Dual Path"
    assert len(at.get("plotly_chart")) == 1
    (result,) = at.session_state["ror.results"].values()
    assert result.query == example.query and result.settings["max_new_tokens"] == 12


def test_dual_path_runs_an_example() -> None:
    example = _example("invented-fact")
    at = _dual_path()
    at.selectbox(key="ror.w.example").select(example.id).run()
    assert at.text_area(key="ror.w.query").value == example.query
    at.button(key="ror.run").click().run()
    ok(at)
    assert not at.error, [e.value for e in at.error]

    result = next(iter(at.session_state["ror.results"].values()))
    codes = [c.value for c in at.code]
    assert result.retrieval.answer in codes and result.parametric.answer in codes, "both answers are shown"
    assert any(phrase in a for a in _alerts(at) for phrase in VERDICT_PHRASES), _alerts(at)
    assert any(m.label.startswith("Z =") and m.value.endswith("nats") for m in at.metric)
    assert len(at.get("plotly_chart")) == 1, "the per-token KL chart is drawn"
    agreement = [d for d in at.dataframe if "threshold from" in d.value.columns]
    assert agreement and len(at.dataframe) - len(agreement) == 2, "top-k of both paths, the agreement view's tables"
    assert {"mean KL", "max KL", "variance", "trend (nats / token)"} <= {m.label for m in at.metric}
    assert len(at.get("download_button")) == 1
    assert "Scored" in at.status[0].label, "the scoring status is shown as finished"

    # Changing a setting re-renders without running: the stored result stays on screen, marked stale.
    first = result.timings
    at.slider(key="ror.w.top_k").set_value(5).run()
    assert not at.exception
    assert len(at.session_state["ror.results"]) == 1
    assert any("previous run" in a for a in _alerts(at))
    assert len(at.get("plotly_chart")) == 1
    assert next(iter(at.session_state["ror.results"].values())).timings == first


def test_empty_query_shows_a_clear_error() -> None:
    at = _dual_path()
    _run(at, "   ", "The capital of the Republic of Veltria is Marrowgate.")
    errors = [e.value for e in at.error]
    assert any("query is empty" in e for e in errors), errors
    assert at.text_area(key="ror.w.context").value == "The capital of the Republic of Veltria is Marrowgate."
    assert "ror.results" not in at.session_state or not at.session_state["ror.results"]


def test_script_input_is_shown_as_text_only() -> None:
    at = _dual_path(max_new_tokens=8)
    _run(at, SCRIPT, SCRIPT)
    assert not at.error, [e.value for e in at.error]
    assert any(SCRIPT in c.value for c in at.code), "the exact prompts show the input literally"
    # The one st.html element allowed is the app's static stylesheet (assets/static/app.css): no user text in it.
    assert len(at.get("html")) <= 1 and all(SCRIPT not in str(h.proto) for h in at.get("html")), "no user HTML"
    for element in at.markdown:
        assert not element.proto.allow_html
        assert "<script" not in element.value
    for element in (*at.caption, *at.success, *at.warning, *at.info):
        assert "<script" not in element.value


def test_unknown_model_is_a_clear_error() -> None:
    at = _app()
    at.radio(key="ror.w.model_choice").set_value("custom").run()
    at.text_input(key="ror.w.model_id").input("no-such-owner/no-such-model-xyz").run()
    ok(at)
    errors = [e.value for e in at.error]
    name = escape_markdown("no-such-owner/no-such-model-xyz")
    assert any("Could not load the model" in e and name in e for e in errors), errors
