"""Reload and shared links (issue 14): the last run's inputs and settings live in the page URL and come back
in a new session (tiny random model)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from components import keys
from components.url_state import MAX_URL_TEXT, desired
from core.engine import DualPathSettings
from tests.app.conftest import APP, ok, open_script

DUAL_PATH = "pages/1_Dual_Path.py"
TIMEOUT = 120
Q, C = "Where is the tower?", "The tower stands in Quillmere & <b>elsewhere</b>."


def test_a_run_goes_into_the_url_and_a_new_session_restores_it(tiny_app) -> None:
    at = open_script(APP, TIMEOUT)
    ok(at.switch_page(DUAL_PATH).run())
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(4).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input(Q)
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input(C)
    ok(at.button(key=keys.RUN).click().run())
    params = {k: at.query_params[k] for k in at.query_params}
    assert params["q"] in (Q, [Q]) and params["c"] in (C, [C]) and params["n"] in ("4", ["4"])

    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)  # a reload: a new session with the same URL
    for name, value in {"q": Q, "c": C, "n": "4", "T": "not a number"}.items():
        fresh.query_params[name] = value
    ok(fresh.run())
    ok(fresh.switch_page(DUAL_PATH).run())
    assert fresh.text_area(key=keys.widget_key(keys.QUERY)).value == Q
    assert fresh.text_area(key=keys.widget_key(keys.CONTEXT)).value == C
    assert fresh.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).value == 4
    assert fresh.number_input(key=keys.widget_key(keys.SCORE_WINDOW)).value == 64, "a bad value keeps the default"


def test_long_texts_stay_out_of_the_url_and_defaults_are_not_written() -> None:
    settings = DualPathSettings().to_dict()  # the defaults
    assert desired("q", "c", settings) == {"q": "q", "c": "c"}
    assert desired("q", "x" * MAX_URL_TEXT, {**settings, "top_k": settings["top_k"] + 1}) == {
        "k": str(settings["top_k"] + 1)
    }
