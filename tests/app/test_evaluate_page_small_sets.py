"""The Evaluate page on a tiny set (issue 14): small-sample warnings, Precision@k only when k < n, and adopting a
τ whose held-out figures are poor is a deliberate, explained action (tiny random model: seconds, not minutes)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from components import keys
from tests.app.conftest import APP, evaluate_upload, ok

PAGE = "pages/9_Evaluate.py"
MAIN = "ror.eval.job.main"
TIMEOUT = 180
SIX = (
    b"query,context,label\n"
    b"What is the capital of France?,Paris is the capital of France.,memorized\n"
    b"Who wrote Hamlet?,Hamlet is a tragedy by William Shakespeare.,memorized\n"
    b"What is the chemical symbol for gold?,Gold has the chemical symbol Au.,memorized\n"
    b"What is the capital of Veltria?,The capital of Veltria is Marrowgate.,grounded\n"
    b"Who founded the Orrin Guild?,The Orrin Guild was founded by Tamsin Vell.,grounded\n"
    b"How many moons does Kessarine have?,The planet Kessarine has five moons.,grounded\n"
)


def _evaluate(data: bytes) -> AppTest:
    return evaluate_upload(data, ["repcs", "repcs_mean"], batch=16, timeout=TIMEOUT)


def test_six_rows_warn_and_hide_precision_at_10(tiny_app) -> None:
    at = _evaluate(SIX)
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("Only 3 memorized and 3 grounded rows") for w in warnings), warnings
    metrics = next(d.value for d in at.dataframe if "AUC" in d.value.columns)
    assert "Precision@10" not in metrics.columns, "P@10 of 6 rows is not a precision at 10"
    assert any("Precision@10 is left out" in c.value for c in at.caption)


def test_adopting_a_tau_without_held_out_rows_is_deliberate(tiny_app) -> None:
    grounded = b"".join(
        b"What is the motto of Orrin town %d?,The motto of Orrin town %d is Vell %d.,grounded\n" % (i, i, i)
        for i in range(1, 41)
    )
    at = _evaluate(SIX.split(b"What is the capital of Veltria")[0] + grounded)
    at.radio(key=keys.EVAL_CAL_MODE).set_value("Rows I pick").run()
    picker = at.multiselect(key=keys.EVAL_CAL_ROWS)
    ok(picker.set_value(list(picker.options)).run())  # every grounded row sets τ: none is held out
    assert not at.error, [e.value for e in at.error]
    use = at.button(key=keys.EVAL_USE_TAU)
    assert use.proto.type == "secondary" and use.disabled, "not the primary button, and not one click away"
    assert any("does not hold up on the held-out rows" in w.value for w in at.warning)
    ok(at.checkbox(key=keys.EVAL_TAU_CONFIRM).check().run())
    assert not at.button(key=keys.EVAL_USE_TAU).disabled


def test_the_detector_search_matches_what_was_typed_not_a_scattered_subsequence(tiny_app) -> None:
    from streamlit.proto.SelectWidgetFilterMode_pb2 import SelectWidgetFilterMode

    from components.evaluate_tabs import detector_label
    from core.detectors import available

    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    ok(at.run())
    ok(at.switch_page(PAGE).run())
    picker = at.multiselect(key="ror.w.eval.detectors")
    assert picker.proto.filter_mode == SelectWidgetFilterMode.FILTER_MODE_CONTAINS
    labels = [detector_label(name) for name in available()]

    def matches(typed: str) -> list[str]:  # the browser's "contains" filter: a case-insensitive substring
        return [label.split(" — ")[0] for label in labels if typed.lower() in label.lower()]

    assert matches("sma") == ["sma"]
    assert matches("radar") == ["radar"]
    assert set(matches("crm")) == {n for n in available() if n.startswith("crm")}
    assert "sma" not in matches("self"), "a fuzzy match would list SMA under 'self' (S…M…A)"


def test_a_bundled_set_starts_at_a_small_sample_and_one_click_scores_all(tiny_app) -> None:
    """Issue 38: the default of a bundled set ends in about a minute (all 220 rows took ~41 min)."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    ok(at.run())
    ok(at.switch_page(PAGE).run())
    (rows,) = [n for n in at.number_input if n.key and n.key.startswith(keys.widget_key(keys.EVAL_SAMPLE))]
    assert rows.value == 10 and rows.max == 220, "a stratified sample of 10 of the probe set's 220 rows"
    assert any(c.value.startswith("10 rows in 2 batches") for c in at.caption), "the estimate is for the sample"
    every = next(b for b in at.button if b.key.startswith(keys.EVAL_SAMPLE_ALL))
    assert every.label == "Score all 220 rows"
    ok(every.click().run())
    (rows,) = [n for n in at.number_input if n.key and n.key.startswith(keys.widget_key(keys.EVAL_SAMPLE))]
    assert rows.value == 220 and not any(b.key.startswith(keys.EVAL_SAMPLE_ALL) for b in at.button)
    assert any(c.value.startswith("220 rows in ") for c in at.caption)
