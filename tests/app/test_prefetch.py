"""components.prefetch: a run's views are prepared in the background after the Dual Path page draws the result.

On the tiny random Llama: with the prefetch on, a view's first visit after a run calls the model no more and
shows the same values as a session without the prefetch; another session sees none of it; a newer run's tasks
replace an older run's (a running task ends at its next model call); no hook survives any of it.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from components import keys, prefetch
from components.internals_state import compute_internals
from core.engine import DualPathSettings, run_dual_path
from core.engine.result import result_digest
from core.model.handle import RunCancelled
from tests.app.conftest import APP, ok
from tests.app.test_internals_pages import ForwardCounter

pytestmark = pytest.mark.usefixtures("one_thread")

ATTENTION, ABLATIONS, RADAR = "pages/2_Attention.py", "pages/5_Ablations.py", "pages/8_RADAR.py"
TAKES = {ATTENTION: prefetch.INTERNALS, ABLATIONS: prefetch.TRAJECTORY, RADAR: prefetch.RADAR}
WAIT_S = 120


def _session(monkeypatch, on: bool) -> AppTest:
    """A fresh session after a Dual Path run of 3 tokens (the prefetch on or off); its tasks are done."""
    monkeypatch.setenv(prefetch.ENV, "1" if on else "0")
    at = ok(AppTest.from_file(APP, default_timeout=WAIT_S).run())
    at.switch_page("pages/1_Dual_Path.py").run()
    at.number_input(key="ror.w.max_new_tokens").set_value(3)
    at.text_area(key="ror.w.query").input("What is the capital of Veltria?")
    at.text_area(key="ror.w.context").input("The capital of the Republic of Veltria is Marrowgate.")
    ok(at.run())
    ok(at.button(key="ror.run").click().run())
    store = at.session_state[prefetch.SESSION_KEY] if on else None
    assert (prefetch.SESSION_KEY in at.session_state) == on
    if on:
        assert store.wait(WAIT_S), "the prefetch did not finish"
        assert {name for name, _ in store.tasks()} == {prefetch.INTERNALS, prefetch.TRAJECTORY, prefetch.RADAR}
    return at


def _shown(at: AppTest) -> list[str]:
    """What the page shows: its metrics, captions, texts and the data of its charts (not the time estimates,
    which learn from every run)."""
    texts = [str(e.value) for e in (*at.caption, *at.markdown)]
    return (
        [f"{m.label}={m.value}" for m in at.metric]
        + [text for text in texts if "on this machine" not in text]
        + [chart.proto.spec for chart in at.get("plotly_chart")]
    )


def _hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize("view", [ATTENTION, ABLATIONS, RADAR])
def test_a_first_visit_after_a_run_draws_the_prefetched_values(tiny_app, monkeypatch, view) -> None:
    plain = _session(monkeypatch, on=False)
    with ForwardCounter() as own:
        ok(plain.switch_page(view).run())
    assert own.n > 0, "without the prefetch the view runs the model itself"

    at = _session(monkeypatch, on=True)
    with ForwardCounter() as forwards:
        ok(at.switch_page(view).run())
        ok(at.run())  # a re-render: the value was kept where the view keeps its own
    assert forwards.n == 0, "the view ran the model although the run's prefetch had its value"
    assert _shown(at) and _shown(at) == _shown(plain), "not the values the view computes itself"
    taken = {name for name, _ in at.session_state[prefetch.SESSION_KEY].tasks()}
    assert TAKES[view] not in taken, "a taken value is kept in the view's own cache only"
    ok(at.switch_page("pages/1_Dual_Path.py").run())  # the same result drawn again: nothing is started again
    assert TAKES[view] not in {name for name, _ in at.session_state[prefetch.SESSION_KEY].tasks()}
    assert _hooks(tiny_app.model) == 0


def test_the_prefetched_internals_equal_the_views_own(tiny_app, monkeypatch) -> None:
    at = _session(monkeypatch, on=True)
    (result,) = at.session_state[keys.RESULTS].values()
    ready = at.session_state[prefetch.SESSION_KEY].future((prefetch.INTERNALS, result_digest(result))).result()
    own = compute_internals(tiny_app, result)  # what the view computes without the prefetch
    np.testing.assert_array_equal(ready.displacement, own.displacement)
    np.testing.assert_array_equal(ready.lens.kl, own.lens.kl)
    for path in ("retrieval", "parametric"):
        np.testing.assert_array_equal(ready.entropy_at(path, "mean"), own.entropy_at(path, "mean"))
        np.testing.assert_array_equal(ready.mass_at(path, "context", "mean"), own.mass_at(path, "context", "mean"))


def test_two_sessions_do_not_see_each_others_prefetch(tiny_app, monkeypatch) -> None:
    first = _session(monkeypatch, on=True)
    other = ok(AppTest.from_file(APP, default_timeout=WAIT_S).run())
    assert prefetch.SESSION_KEY not in other.session_state
    with ForwardCounter() as forwards:
        ok(other.switch_page(ATTENTION).run())
    assert forwards.n == 0 and any("No run yet" in str(i.value) for i in other.info)
    assert first.session_state[prefetch.SESSION_KEY].tasks(), "the first session's tasks are still its own"


def test_a_newer_run_replaces_the_older_runs_tasks_and_no_hook_survives(tiny_handle) -> None:
    settings = DualPathSettings(max_new_tokens=3, score_window=3)
    result = run_dual_path(tiny_handle, "Where is the tower?", "The tower stands in Quillmere.", settings)
    started, calls = threading.Event(), []

    def slow() -> None:  # many short model sessions, the way a trace's passes go
        started.set()
        for _ in range(400):
            with tiny_handle.session():
                calls.append(1)
            time.sleep(0.01)

    store = prefetch.Prefetched()
    store.start(tiny_handle, {("slow", "a"): slow})
    assert started.wait(WAIT_S)
    old = store.future(("slow", "a"))
    store.start(tiny_handle, prefetch.tasks_for(tiny_handle, result))  # a newer run of the session
    with pytest.raises(RunCancelled):
        old.result(timeout=WAIT_S)
    assert len(calls) < 400
    assert store.wait(WAIT_S)
    assert ("slow", "a") not in store.tasks() and len(store.tasks()) == 3
    assert _hooks(tiny_handle.model) == 0


def test_a_closed_session_ends_its_tasks(tiny_handle) -> None:
    connected = threading.Event()
    connected.set()
    store = prefetch.Prefetched(still_wanted=connected.is_set)

    def long() -> None:
        connected.clear()  # the tab closes while the task runs
        for _ in range(400):
            with tiny_handle.session():
                pass
            time.sleep(0.01)

    store.start(tiny_handle, {("long", "a"): long})
    with pytest.raises(RunCancelled):
        store.future(("long", "a")).result(timeout=WAIT_S)


def test_the_prefetch_is_off_under_apptest_unless_asked(monkeypatch) -> None:
    monkeypatch.delenv(prefetch.ENV, raising=False)
    assert not prefetch.enabled()
    monkeypatch.setenv(prefetch.ENV, "1")
    assert prefetch.enabled()
    monkeypatch.setenv(prefetch.ENV, "0")
    assert not prefetch.enabled()
