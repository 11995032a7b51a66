"""components.run: the one run helper (key → cache → progress → error box → store), in AppTest."""

from __future__ import annotations

import logging

from streamlit.testing.v1 import AppTest

from components.text import plain_message
from tests.app.conftest import ok

TIMEOUT = 30


def _guarded_app(kind: str) -> None:
    import streamlit as st

    from components.run import run_guarded

    def compute() -> int:
        if kind == "value":
            raise ValueError("The query is empty: type a question.")
        if kind == "other":
            raise RuntimeError("CUDA out of memory at /srv/secret/model.bin")
        return 42

    failures = []
    value = run_guarded(compute, log="test run failed", on_failure=failures.append)
    st.write(f"value={value} failures={[type(e).__name__ for e in failures]}")


def _run_guarded(kind: str) -> AppTest:
    return ok(AppTest.from_function(_guarded_app, args=(kind,), default_timeout=TIMEOUT).run())


def test_a_value_error_shows_its_own_message():
    at = _run_guarded("value")
    assert [e.value for e in at.error] == [plain_message("The query is empty: type a question.")]
    assert at.markdown[0].value == "value=None failures=['ValueError']"


def test_any_other_failure_says_only_its_type_and_points_to_the_log(caplog):
    with caplog.at_level(logging.ERROR, logger="components.run"):
        at = _run_guarded("other")
    assert [e.value for e in at.error] == ["The run failed (RuntimeError). Details are in the server log."]
    assert "secret" not in at.error[0].value, "no server detail reaches the page"
    assert "test run failed" in caplog.text and "CUDA out of memory" in caplog.text
    assert at.markdown[0].value == "value=None failures=['RuntimeError']"


def test_a_success_returns_the_value_and_draws_no_box():
    at = _run_guarded("ok")
    assert not at.error and at.markdown[0].value == "value=42 failures=[]"


def _cached_app() -> None:
    import streamlit as st

    from components.lru import session_lru
    from components.run import run_cached

    def compute(progress):
        st.session_state["computed"] = st.session_state.get("computed", 0) + 1
        progress(1, 2)  # a report without text
        progress(2, 2, "second half")  # and one with
        if st.session_state.get("fail"):
            raise ValueError("bad input")
        return {"answer": 7}

    value = run_cached(
        session_lru("ror.test.cache", 2),
        "key-1",
        compute,
        start="Starting…",
        describe=lambda done, total, text: f"{text} {done}/{total}".strip(),
    )
    st.write(f"value={value}")


def test_run_cached_computes_once_per_key_and_stores_the_value():
    at = ok(AppTest.from_function(_cached_app, default_timeout=TIMEOUT).run())
    assert at.markdown[0].value == "value={'answer': 7}" and at.session_state["computed"] == 1
    ok(at.run())
    assert at.markdown[0].value == "value={'answer': 7}" and at.session_state["computed"] == 1, "from the cache"
    assert list(at.session_state["ror.test.cache"]) == ["key-1"]


def test_run_cached_stores_nothing_after_a_failure():
    at = AppTest.from_function(_cached_app, default_timeout=TIMEOUT)
    at.session_state["fail"] = True
    ok(at.run())
    assert [e.value for e in at.error] == [plain_message("bad input")] and at.markdown[0].value == "value=None"
    assert not at.session_state["ror.test.cache"], "a failed run is not stored: the next run tries again"
