"""components.url_state: a reload (a new session with the same URL) brings back the result, the example and its
"what to expect" box, not only the query and context (issue 26; tiny random model)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from components import keys
from components.url_state import SharedRuns, run_key
from core.engine import DualPathSettings
from core.examples import load_examples
from tests.app.conftest import APP, ok, open_script

DUAL_PATH = "pages/1_Dual_Path.py"
TIMEOUT = 120


def _reload(params: dict[str, str]) -> AppTest:
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for name, value in params.items():
        fresh.query_params[name] = value
    ok(fresh.run())
    return ok(fresh.switch_page(DUAL_PATH).run())


def test_a_reload_restores_the_result_the_example_and_its_expectation(tiny_app) -> None:
    example = load_examples()[0]
    at = open_script(APP, TIMEOUT)
    ok(at.switch_page(DUAL_PATH).run())
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(3).run()
    ok(at.selectbox(key=keys.widget_key(keys.EXAMPLE)).select(example.id).run())
    ok(at.button(key=keys.RUN).click().run())
    (ran,) = at.session_state[keys.RESULTS].values()
    params = {k: at.query_params[k] for k in at.query_params}
    params = {k: v[0] if isinstance(v, list) else v for k, v in params.items()}

    fresh = _reload(params)
    assert fresh.selectbox(key=keys.widget_key(keys.EXAMPLE)).value == example.id, "the example is picked again"
    assert any(i.value.startswith("**What to expect.**") for i in fresh.info), "its expectation box is back"
    (restored,) = fresh.session_state[keys.RESULTS].values()
    assert restored.answer_token_ids == ran.answer_token_ids and restored.repcs_score == ran.repcs_score
    assert any(m.label.startswith("Z") or "Z" in m.label for m in fresh.metric), "the result is drawn, not waiting"


def test_a_reload_of_inputs_this_server_never_ran_restores_only_the_inputs(tiny_app) -> None:
    fresh = _reload({"q": "A question nobody ran?", "c": "A context nobody ran.", "n": "3"})
    assert fresh.text_area(key=keys.widget_key(keys.QUERY)).value == "A question nobody ran?"
    assert keys.RESULTS not in fresh.session_state or not fresh.session_state[keys.RESULTS].values()
    assert fresh.selectbox(key=keys.widget_key(keys.EXAMPLE)).value is None


def test_the_shared_cache_is_keyed_by_model_inputs_and_settings_and_keeps_the_latest() -> None:
    settings = DualPathSettings().to_dict()
    assert run_key("m", " Q ", "C", settings) == run_key("m", "Q", "C ", settings)
    assert run_key("m", "Q", "C", settings) != run_key("other", "Q", "C", settings)
    assert run_key("m", "Q", "C", settings) != run_key("m", "Q", "C", {**settings, "top_k": 3})
    runs = SharedRuns(most=2)
    for key in ("a", "b", "c"):
        runs.put(key, key)  # any object: the cache does not look inside
    assert runs.get("a") is None and runs.get("c") == "c"
