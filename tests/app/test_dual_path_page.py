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
    assert _estimate_caption(at).startswith("time not measured yet on this machine")
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(4).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the tower?")
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input("The tower stands in Quillmere.")
    ok(at.button(key=keys.RUN).click().run())
    # the run's own script run redraws the line under the button: never "not measured yet" after a run
    (run,) = estimate.METER.runs(tiny_app, estimate.DUAL_PATH)
    assert f"(the last run like it took {run[1]:.1f} s)" in _estimate_caption(at), _estimate_caption(at)
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
    words = ("Read from the context", "Recalled from memory", "Neither", "Inconclusive")
    assert len(titles) == 1 and titles[0][5:].startswith(words), titles
    # the tiny model is judged with the embedded model's axes, and the page says so
    assert any("not calibrated for this model" in c.value for c in at.caption)
