"""components.prologue (issue 27): a page draws its inputs before it imports its libraries and before the
model: once per page run, with their keys and their values, under the model's notices; the Run button waits
for the model."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from components import keys
from core.model.loading import ModelLoadError
from tests.app.conftest import APP, ROOT, ok

TIMEOUT = 180
PAGES = sorted(p.name for p in (ROOT / "pages").glob("*.py"))
QUERY, CONTEXT = keys.widget_key(keys.QUERY), keys.widget_key(keys.CONTEXT)
Q, C = "Where is Marrowgate?", "Marrowgate is the capital of Veltria."


def _visit(name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    ok(at.run())
    return ok(at.switch_page(f"pages/{name}").run())


def _order(node, found: list[str]) -> list[str]:
    for child in getattr(node, "children", {}).values():
        found.append(getattr(child, "type", ""))
        _order(child, found)
    return found


@pytest.mark.parametrize("name", PAGES)
def test_every_page_counts_one_script_run_per_run(tiny_app, name) -> None:
    """The run count behind the persistent widgets (components.state.seed_widget) goes up once per page run,
    whether the page began early (components.prologue.begin) or in open_page."""
    at = _visit(name)
    before = at.session_state[keys.RUN_NUMBER]
    ok(at.run())
    assert at.session_state[keys.RUN_NUMBER] == before + 1


def test_dual_path_keeps_what_was_typed_and_runs_nothing_before_the_model_is_ready(model_never_ready) -> None:
    at = _visit("1_Dual_Path.py")
    at.text_area(key=QUERY).input(Q).run()
    at.text_area(key=CONTEXT).input(C).run()
    ok(at.button(key=keys.RUN).click().run())
    assert [at.text_area(key=k).value for k in (QUERY, CONTEXT)] == [Q, C]
    assert at.selectbox(key=keys.widget_key(keys.EXAMPLE)) is not None
    assert keys.RESULTS not in at.session_state, "no run before the model is loaded"
    assert len(at.button) == 1 and at.button[0].key == keys.RUN, "the inputs and the Run button, drawn once"


def test_dual_path_runs_once_the_model_is_loaded_with_its_estimate_under_the_button(tiny_app) -> None:
    at = _visit("1_Dual_Path.py")
    at.text_area(key=QUERY).input(Q).run()
    at.text_area(key=CONTEXT).input(C).run()
    order = _order(at.main, [])
    assert order[order.index("button") + 1] == "caption", order
    assert any("on this machine" in c.value or "not measured yet" in c.value for c in at.caption)
    ok(at.button(key=keys.RUN).click().run())
    assert len(at.session_state[keys.RESULTS]) == 1
    assert [at.text_area(key=k).value for k in (QUERY, CONTEXT)] == [Q, C]


@pytest.mark.parametrize("name", ["1_Dual_Path.py", "6_Self_Critique.py", "8_RADAR.py"])
def test_a_model_that_cannot_load_leaves_the_inputs_under_its_error(use_loader, name) -> None:
    def fail(spec=None, revision=None, **kw):
        raise ModelLoadError("The model's weights are missing.")

    use_loader(fail)
    at = _visit(name)
    at.text_area(key=QUERY).input(Q).run()
    ok(at)
    assert any("Could not load the model" in e.value for e in at.error)
    assert at.text_area(key=QUERY).value == Q
    order = _order(at.main, [])
    assert order.index("error") < order.index("text_area"), "the error is above the inputs"


def test_radar_after_a_run_puts_the_runs_prompt_above_its_early_choice(tiny_app) -> None:
    at = _visit("1_Dual_Path.py")
    at.text_area(key=QUERY).input(Q).run()
    at.text_area(key=CONTEXT).input(C).run()
    ok(at.button(key=keys.RUN).click().run())
    ok(at.switch_page("pages/8_RADAR.py").run())
    with pytest.raises(KeyError):
        at.text_area(key=QUERY)  # a run to read: the inputs are not drawn
    (context,) = [e for e in at.expander if e.label.startswith("This page analyzes the last run")]
    assert Q in context.label
    order = _order(at.main, [])
    assert order.index("expander", order.index("caption")) < order.index("radio"), order
    assert at.radio(key=keys.widget_key(keys.RADAR_SOURCE)).value == "query"
