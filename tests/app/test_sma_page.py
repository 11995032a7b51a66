"""AppTest of the Source Attribution (SMA) page with the embedded model (few masks, short answers)."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from core.methods.sma import LABELS, SMAResult
from tests.app.conftest import ROOT, ok, open_script

PAGE = str(ROOT / "pages" / "7_Source_Attribution.py")
TIMEOUT = 300  # seconds per script run: the embedded model on a busy 2-core CPU
QUERY = "Who founded <b>Veltria</b>?"
CONTEXT = "Veltria was founded by Ada Marrow. Its capital is Marrowgate."

pytestmark = pytest.mark.slow


def _page() -> AppTest:
    at = open_script(PAGE, TIMEOUT)
    at.number_input(key="ror.w.sma.n_samples").set_value(4).run()
    at.number_input(key="ror.w.sma.max_new_tokens").set_value(4).run()
    at.text_area(key="ror.w.query").input(QUERY)
    at.text_area(key="ror.w.context").input(CONTEXT).run()
    ok(at)
    return at


def _specs(at: AppTest) -> list[str]:
    return [chart.proto.spec for chart in at.get("plotly_chart")]


def test_sma_runs_labels_follow_the_sliders_and_text_is_escaped() -> None:
    at = _page()
    assert at.title[0].value == "Source Attribution (SMA)"
    assert any("generates 10 answers" in c.value for c in at.caption), [c.value for c in at.caption]
    at.button(key="ror.sma.run").click().run()
    ok(at)
    assert not at.error, [e.value for e in at.error]

    (data,) = at.session_state["ror.sma.results"].values()
    result = SMAResult.from_dict(data)
    assert [u.text for u in result.units] == ["Who", " founded", " <b>Veltria</b>?"]
    assert len(result.on.samples) == 4 and len(result.off.samples) == 4
    assert [s.mask for s in result.on.samples] == [s.mask for s in result.off.samples], "the same perturbed queries"
    codes = [c.value for c in at.code]
    assert result.on.reference_answer in codes and result.off.reference_answer in codes

    specs = _specs(at)
    assert len(specs) == 2, "colored text and ADS bars"
    assert "&lt;b&gt;Veltria" in specs[0] and "<b>Veltria" not in specs[0], "unit text is escaped in plotly"
    counts = {m.label: int(m.value) for m in at.metric if m.label in LABELS}
    assert sum(counts.values()) == 3
    assert len(at.get("download_button")) == 2

    # Moving τ relabels without running the model again: a τ above every β leaves no pretrained member.
    timings = result.timings
    at.slider(key="ror.w.sma.tau").set_value(1.0).run()
    ok(at)
    assert SMAResult.from_dict(next(iter(at.session_state["ror.sma.results"].values()))).timings == timings
    counts = {m.label: int(m.value) for m in at.metric if m.label in LABELS}
    expected = result.labels(tau=1.0)
    assert counts == {label: expected.count(label) for label in LABELS}
    assert counts[LABELS[0]] == 0


def test_context_ablation_scores_each_sentence() -> None:
    at = _page()
    at.button(key="ror.sma.ablate").click().run()
    ok(at)
    assert not at.error, [e.value for e in at.error]
    (data,) = at.session_state["ror.sma.ablations"].values()
    assert data["sentences"] == ["Veltria was founded by Ada Marrow.", " Its capital is Marrowgate."]
    assert data["full_score"] == pytest.approx(1.0, abs=1e-5), "the full-context answer scores γ₁ + γ₂ against itself"
    assert all(d == pytest.approx(data["full_score"] - s) for d, s in zip(data["delta"], data["scores"]))
    assert len(_specs(at)) == 1
    assert any("Marrowgate" in json.dumps(df.value.to_dict()) for df in at.dataframe)


def test_the_context_ablation_button_has_an_estimate(tiny_app) -> None:
    at = open_script(PAGE, TIMEOUT)
    at.text_area(key="ror.w.query").input("Where is the tower?")
    at.text_area(key="ror.w.context").input("The tower stands in Quillmere. It is old.").run()
    ok(at)
    assert any(c.value.startswith("4 generations: ") and "on this machine" in c.value for c in at.caption)


def test_the_page_rebuilds_no_core_object_itself() -> None:
    import ast

    tree = ast.parse((ROOT / "pages" / "7_Source_Attribution.py").read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "numpy" not in imported, "no arrays of its own: ContextAblation.from_dict rebuilds a stored ablation"
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert not [c for c in calls if c.func.id == "ContextAblation"], "never ContextAblation(**data) in the page"
