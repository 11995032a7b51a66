"""AppTest of the Ablations page.

The page's model comes from ``components.page``'s cached loader; here that loader is pointed at the tiny
random Llama of ``tests/conftest.py`` so every experiment on the page runs in a fraction of a second. The
cache is cleared before and after, so other page tests still get the embedded model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from components import page

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "5_Ablations.py")
TIMEOUT = 120
Q, C = "Where is the tower?", "The tower stands in <b>Quillmere</b>."


@pytest.fixture
def tiny_app(tiny_handle, monkeypatch):
    monkeypatch.setattr(page, "load_model", lambda spec=None, revision=None, **kw: tiny_handle)
    page._load_handle.clear()
    yield
    page._load_handle.clear()


def _page() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, at.exception
    return at


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, at.exception
    return at


def _texts(at: AppTest) -> str:
    parts = [e.value for kind in (at.caption, at.info, at.warning, at.error, at.success, at.markdown) for e in kind]
    return "\n".join(str(p) for p in parts)


def test_ablations_page_runs_every_experiment(tiny_app):
    at = _page()
    assert at.title[0].value == "Ablations"
    at.number_input(key="ror.w.max_new_tokens").set_value(6).run()
    at.text_area(key="ror.w.query").input(Q)
    at.text_area(key="ror.w.context").input(C).run()
    assert "Run it first" in _texts(_ok(at))
    at.button(key="ror.ablate.run_clean").click().run()
    _ok(at)
    assert "Clean run: Z =" in _texts(at)

    # the layer choice: a contiguous block, ε and seed
    at.radio(key="ror.w.ablate.mode").set_value("Contiguous block").run()
    at.slider(key="ror.w.ablate.block").set_value((1, 2)).run()
    at.slider(key="ror.w.ablate.eps").set_value(1.0).run()
    assert "block 1-2" in _texts(_ok(at))

    # noise on the chosen layers: both answers re-generated next to the clean ones
    at.button(key="ror.ablate.run_noise").click().run()
    _ok(at)
    metrics = {m.label: m.value for m in at.metric}
    assert "Z clean" in metrics and "Z perturbed" in metrics
    assert any("tokens changed" in c.value for c in at.caption)
    assert len(at.get("plotly_chart")) >= 4  # two token diffs, the KL curves, the trajectory
    assert "‖d_ℓ‖₂" in _texts(at) or "LTS" in _texts(at)  # the trajectory says which quantity it shows

    # a re-render does not re-run: the stored result is shown
    charts = len(at.get("plotly_chart"))
    at.run()
    assert len(_ok(at).get("plotly_chart")) == charts

    # dose–response with two seeds on a short grid
    at.multiselect(key="ror.w.ablate.grid").set_value([0.0, 0.5]).run()
    at.number_input(key="ror.w.ablate.grid_seeds").set_value(2).run()
    at.number_input(key="ror.w.ablate.grid_tokens").set_value(4).run()
    at.button(key="ror.ablate.run_dose").click().run()
    _ok(at)
    assert any("ε" in df.value.columns for df in at.dataframe)

    # the single-layer sweep at ε
    at.number_input(key="ror.w.ablate.sweep_tokens").set_value(4).run()
    at.button(key="ror.ablate.run_sweep").click().run()
    _ok(at)

    # activation patching combined with noise
    at.checkbox(key="ror.w.ablate.patch_noise").check().run()
    at.button(key="ror.ablate.run_patch").click().run()
    _ok(at)
    assert len(at.get("plotly_chart")) >= charts + 2 + 4

    # the exports are JSON / CSV
    downloads = at.get("download_button")
    assert len(downloads) >= 5


def test_ablations_page_presets_and_custom_layers(tiny_app):
    at = _page()
    at.text_area(key="ror.w.query").input(Q)
    at.text_area(key="ror.w.context").input(C).run()
    at.number_input(key="ror.w.max_new_tokens").set_value(4).run()
    at.button(key="ror.ablate.run_clean").click().run()
    _ok(at)
    preset = at.selectbox(key="ror.w.ablate.preset")
    assert "flagged" not in preset.options or "No CRM basis" not in _texts(at)
    preset.set_value("late").run()
    assert "layers 2" in _texts(_ok(at))
    at.radio(key="ror.w.ablate.mode").set_value("Custom list").run()
    at.text_input(key="ror.w.ablate.custom").input("0,9").run()
    assert any("out of range" in e.value for e in _ok(at).error)
    assert at.button(key="ror.ablate.run_noise").disabled
    # a huge range is refused before it is expanded, with a short message (issue 17 item 1)
    at.text_input(key="ror.w.ablate.custom").input("0-100000000").run()
    errors = [e.value for e in _ok(at).error if "out of range" in e.value]
    assert errors and max(len(e) for e in errors) < 200
    assert at.button(key="ror.ablate.run_noise").disabled
    at.text_input(key="ror.w.ablate.custom").input("early,2").run()
    assert "layers 0,2" in _texts(_ok(at))
    at.radio(key="ror.w.ablate.mode").set_value("Single layer").run()
    at.slider(key="ror.w.ablate.single").set_value(1).run()
    assert "layer 1" in _texts(_ok(at))


def test_ablations_page_without_inputs_asks_for_them(tiny_app):
    at = _page()
    assert "Run it first" in _texts(at)
    at.button(key="ror.ablate.run_clean").click().run()
    _ok(at)
    assert any("empty" in e.value for e in at.error)  # the engine's message, shown, nothing run


def test_ablations_json_export_is_valid(tiny_app):
    at = _page()
    at.text_area(key="ror.w.query").input(Q)
    at.text_area(key="ror.w.context").input(C).run()
    at.number_input(key="ror.w.max_new_tokens").set_value(4).run()
    at.button(key="ror.ablate.run_clean").click().run()
    at.button(key="ror.ablate.run_noise").click().run()
    _ok(at)
    perturbed = [r for r in at.session_state["ror.ablate.results"].values() if hasattr(r, "extras")]
    assert perturbed
    data = json.loads(perturbed[-1].to_json())
    assert data["extras"]["intervention"]["noise"]["eps"] == at.slider(key="ror.w.ablate.eps").value


def test_ablations_page_keeps_the_last_noise_run_when_the_choice_changes(tiny_app):
    at = _page()
    at.text_area(key="ror.w.query").input(Q)
    at.text_area(key="ror.w.context").input(C).run()
    at.number_input(key="ror.w.max_new_tokens").set_value(4).run()
    at.button(key="ror.ablate.run_clean").click().run()
    at.slider(key="ror.w.ablate.eps").set_value(0.5).run()
    at.button(key="ror.ablate.run_noise").click().run()
    _ok(at)
    stored = len(at.session_state["ror.ablate.results"])
    assert "Showing the last noise run" not in _texts(at)

    # another ε: nothing runs, the last noise run on this clean result stays on screen (and says so)
    at.slider(key="ror.w.ablate.eps").set_value(1.0).run()
    _ok(at)
    assert len(at.session_state["ror.ablate.results"]) == stored
    assert "Showing the last noise run" in _texts(at) and "ε = 0.5" in _texts(at)
    assert any(m.label == "Z perturbed" for m in at.metric)

    # back to the ε that ran: its stored run is shown again, without the notice
    at.slider(key="ror.w.ablate.eps").set_value(0.5).run()
    assert "Showing the last noise run" not in _texts(_ok(at))
    assert len(at.session_state["ror.ablate.results"]) == stored
