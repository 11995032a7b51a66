"""components/calibrate_view.py on the Dual Path page: a model without calibration says so (sidebar, headline,
RePCS, the agreement view) with no borrowed verdict, offers "Calibrate this model", and the calibration runs as a
background job with progress and cancel (tiny random model, an empty cache; the job's work is stood in)."""

from __future__ import annotations

import time

from components import calibrate_view, keys
from core.engine.verdict import READ, RECALLED
from core.model.handle import RunCancelled, check_cancelled
from tests.app.conftest import APP, ok, open_script

PAGE = "pages/1_Dual_Path.py"
TIMEOUT = 120


def _run(at) -> None:
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(4).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the tower?")
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input("The tower stands in Quillmere.")
    ok(at.button(key=keys.RUN).click().run())


def test_a_model_without_calibration_says_so_and_borrows_no_verdict(tiny_app, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    at = ok(open_script(APP, TIMEOUT).switch_page(PAGE).run())
    assert any("Not calibrated for this model" in w.value for w in at.sidebar.warning), [w.value for w in at.warning]
    assert "Calibrate this model" in [h.value for h in at.subheader]
    _run(at)
    titles = [m.value for m in at.markdown if m.value.startswith("#### ")]
    assert titles and "calibrated" in titles[0].lower(), titles  # the headline: not calibrated for this model
    assert not any(READ in t.lower() or RECALLED in t.lower() for t in titles[:1])
    tau = next(m for m in at.metric if m.label.startswith("Threshold"))
    assert tau.value == "none"  # RePCS: no τ, never the embedded model's
    text = " ".join(str(e.value) for e in [*at.markdown, *at.caption])
    assert "fallback" not in text and "the embedded model's τ" not in text
    assert "Calibrate this model" in [h.value for h in at.subheader]


def test_calibrate_this_model_runs_in_the_background_with_progress_and_cancel(tiny_app, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))

    def stand_in(handle, *, budget, progress, cancel, **_):
        for i in range(10_000):
            progress(i, 10_000, f"rows {i}/10000 · about 1 min left")
            if cancel.cancelled:
                raise RunCancelled("cancelled")
            time.sleep(0.01)
        check_cancelled()

    monkeypatch.setattr(calibrate_view, "calibrate_model", stand_in)
    monkeypatch.setattr(calibrate_view, "_JOBS", {})
    at = ok(open_script(APP, TIMEOUT).switch_page(PAGE).run())
    estimate = [c.value for c in at.caption if c.value.startswith("Estimate:")]
    assert estimate, [c.value for c in at.caption]
    ok(at.button(key=keys.CALIBRATE_START).click().run())
    job = calibrate_view.job_for(tiny_app)
    assert job is not None and job.running
    time.sleep(0.3)
    ok(at.run())
    assert job.done > 0 and "rows" in job.text
    ok(at.button(key=keys.CALIBRATE_CANCEL).click().run())
    for _ in range(100):
        if job.finished:
            break
        time.sleep(0.05)
    assert job.finished and job.error is not None and job.error.startswith("cancelled")
    ok(at.run())
    assert any(w.value.startswith("cancelled") for w in at.warning), [w.value for w in at.warning]
