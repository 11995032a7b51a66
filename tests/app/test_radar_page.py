"""AppTest for the RADAR page on the embedded model (shipped features; one forward pass per prompt)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from core.methods import radar
from tests.app.conftest import ROOT

PAGE = str(ROOT / "pages" / "8_RADAR.py")

pytestmark = pytest.mark.slow


def _page(**stored: str) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=120)
    for name, value in stored.items():
        at.session_state[f"ror.s.{name}"] = value
    return at


def _feature_rows(at: AppTest) -> list[str]:
    names = []
    for frame in at.dataframe:
        df = frame.value
        if "feature" in df.columns and "formula" in df.columns:
            names += df["feature"].tolist()
    return names


def test_radar_page_analyzes_the_current_query():
    at = _page(query="The capital of France is").run()
    assert not at.exception
    labels = [m.label for m in at.metric]
    assert {"p̄(recall)", "Label (paper's rule)", "RDS", "RCI"} <= set(labels)
    p = float(next(m.value for m in at.metric if m.label == "p̄(recall)"))
    assert 0.0 <= p <= 1.0
    assert _feature_rows(at) == list(radar.FEATURE_NAMES)  # 37 rows, grouped in appendix D order
    accuracy = next(f.value for f in at.dataframe if "paper" in f.value.columns and "category" in f.value.columns)
    assert accuracy["category"].tolist()[:4] == [
        "Clear recall",
        "Clear reasoning",
        "Challenging / ambiguous",
        "Complex reasoning",
    ]
    assert accuracy["paper"].tolist()[:4] == pytest.approx([1.0, 1.0, 23 / 30, 1.0])
    assert any(c.value == "The capital of France is" for c in at.code)
    assert not at.error


def test_radar_page_with_context_and_without_query():
    at = _page(query="What is the capital of Veltria?", context="The capital of Veltria is Marrowgate.")
    at.session_state["ror.s.radar.source"] = "context"
    at.run()
    assert not at.exception
    assert any(c.value == "The capital of Veltria is Marrowgate.\n\nWhat is the capital of Veltria?" for c in at.code)
    assert len(_feature_rows(at)) == 37

    empty = _page(query="").run()
    assert not empty.exception
    assert any("type a query" in i.value for i in empty.info)
    assert not _feature_rows(empty)
    # the test-set accuracy does not depend on the prompt and is shown anyway
    assert any("paper" in f.value.columns for f in empty.dataframe)


def test_the_feature_extraction_button_has_an_estimate(tiny_app, monkeypatch) -> None:
    from components import keys
    from tests.app.conftest import ok, open_script

    monkeypatch.setattr(radar, "cached_feature_table", lambda handle: None)  # this model has no table yet
    at = open_script(PAGE, 120)
    at.text_area(key="ror.w.query").input("What is the capital of France?").run()
    ok(at)
    assert at.button(key=keys.RADAR_EXTRACT).label.startswith("Extract the features")
    assert any(c.value.startswith("130 forward passes: ") and "on this machine" in c.value for c in at.caption)


def test_the_page_fits_nothing_it_reads_the_stored_ensemble_and_report(monkeypatch):
    """Issue 22 item 7 / issue 27: the page draws the stored test-set report and predicts with the stored
    ensemble; the page module calls no fit, and a first visit fits nothing when the artefacts fit the model."""
    source = (ROOT / "pages" / "8_RADAR.py").read_text(encoding="utf-8")
    for call in ("evaluate_table", "classifier_from_table", "RadarClassifier", ".fit(", "prompt_token_counts"):
        assert call not in source, call

    def no_fit(*args, **kwargs):
        raise AssertionError("the RADAR page fitted the ensemble")

    from core.methods.radar import classifier as classifier_mod
    from core.methods.radar import evaluation as evaluation_mod

    monkeypatch.setattr(classifier_mod, "_CLASSIFIERS", {})
    monkeypatch.setattr(evaluation_mod, "_REPORTS", {})
    monkeypatch.setattr(radar.RadarClassifier, "from_table", classmethod(no_fit))
    monkeypatch.setattr(evaluation_mod, "evaluate_table", no_fit)
    at = _page(query="The capital of France is").run()
    assert not at.exception, at.exception
    assert any(m.label == "p̄(recall)" for m in at.metric)
    assert any("RADAR here" in frame.value.columns for frame in at.dataframe)
