"""pages/1_Dual_Path.py: an estimate under the Run button, from the runs measured in this process, that says
how sure it is and is redrawn as soon as a run ends (tiny random model; a fresh meter)."""

from __future__ import annotations

from components import keys
from core.engine import estimate
from tests.app.conftest import APP, ok, open_script

PAGE = "pages/1_Dual_Path.py"
TIMEOUT = 120


def _open():
    """The page reached from the app (its links to other pages need the app's navigation)."""
    return ok(open_script(APP, TIMEOUT).switch_page(PAGE).run())


def _estimate_caption(at) -> str:
    return next(c.value for c in at.caption if "on this machine" in c.value)


def test_the_run_button_has_an_estimate_that_learns_from_each_run(tiny_app, monkeypatch) -> None:
    monkeypatch.setattr(estimate, "METER", estimate.CostMeter())
    at = _open()
    # before any run of the model: its size at this machine's pace (issue 45), never "not measured yet"
    assert "no run of this model yet" in _estimate_caption(at) and "parameters" in _estimate_caption(at)
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(4).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the tower?")
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input("The tower stands in Quillmere.")
    ok(at.button(key=keys.RUN).click().run())
    # the run's own script run redraws the line under the button: never "not measured yet" after a run
    (run,) = estimate.METER.runs(tiny_app, estimate.DUAL_PATH)
    assert f"(the last run like it took {run[1]:.1f} s; scaled to this run)" in _estimate_caption(at), (
        _estimate_caption(at)
    )
    ok(at.run())  # the next page run draws the same
    assert "(the last run like it took" in _estimate_caption(at)
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the bridge?")
    ok(at.button(key=keys.RUN).click().run())
    assert "the last 2 runs like it" in _estimate_caption(at) and _estimate_caption(at).startswith(("≈", "< 1 s"))


def test_with_both_boxes_filled_the_hint_says_press_run(tiny_app) -> None:
    at = _open()
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the tower?")
    ok(at.text_area(key=keys.widget_key(keys.CONTEXT)).input("The tower stands in Quillmere.").run())
    hints = [i.value for i in at.info]
    assert "Press **Run both paths** to analyze this query and context." in hints, hints
    assert not any(h.startswith(("Pick an example or type", "Type or pick")) for h in hints)


def test_the_headline_is_the_two_axis_verdict_with_both_axes(tiny_app) -> None:
    at = _open()
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(4).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the tower?")
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input("The tower stands in Quillmere.")
    ok(at.button(key=keys.RUN).click().run())
    assert "Verdict" in [h.value for h in at.subheader] and "RePCS verdict" in [h.value for h in at.subheader]
    labels = [m.label for m in at.metric]
    assert any(label.startswith("Context reliance: ") for label in labels), labels
    assert any(label.startswith("Parametric support: ") for label in labels), labels
    titles = [m.value for m in at.markdown if m.value.startswith("#### ")]
    # the tiny model has no axes calibration of its own: no verdict is borrowed from the embedded model's
    assert titles == ["#### Not calibrated for this model"], titles
    assert any("calibrate\\-model" in m.value or "calibrate-model" in m.value for m in at.markdown)
    assert any(m.value.startswith("**Answer span:**") for m in at.markdown) or any(
        "Answer span: none" in c.value for c in at.caption
    )


def test_the_swap_test_runs_on_request_beside_the_headline(tiny_app) -> None:
    at = _open()
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(4).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the tower?")
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input("The tower stands in Quillmere.")
    ok(at.button(key=keys.RUN).click().run())
    assert "Swap test: does the answer follow the context?" in [h.value for h in at.subheader]
    assert any("on this machine" in c.value for c in at.caption)  # the button's estimate
    ok(at.button(key=keys.SWAP_RUN).click().run())
    outcomes = ("**Follows the swap", "**Keeps the original", "**No swap test:**", "**Undecided.**")

    def boxes() -> list[str]:
        return [str(b.value) for b in (*at.success, *at.warning, *at.info)]

    assert any(b.startswith(outcomes) for b in boxes()), boxes()
    ok(at.run())  # stored for the session: drawn again without another run
    assert any(b.startswith(outcomes) for b in boxes())
