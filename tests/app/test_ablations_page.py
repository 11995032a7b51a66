"""AppTest of the Ablations page.

The page's model comes from ``components.page``'s cached loader; the ``tiny_app`` fixture
(``tests/app/conftest.py``) points it at the tiny random Llama, so every experiment on the page runs in a
fraction of a second.
"""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from tests.app.conftest import ROOT, ok, open_script

PAGE = str(ROOT / "pages" / "5_Ablations.py")
TIMEOUT = 120
Q, C = "Where is the tower?", "The tower stands in <b>Quillmere</b>."


def _page() -> AppTest:
    return open_script(PAGE, TIMEOUT)


def _clean_run() -> AppTest:
    """The page after a clean run of Q and C with 4-token answers."""
    at = _page()
    at.text_area(key="ror.w.query").input(Q)
    at.text_area(key="ror.w.context").input(C).run()
    at.number_input(key="ror.w.max_new_tokens").set_value(4).run()
    at.button(key="ror.ablate.run_clean").click().run()
    return ok(at)


def _texts(at: AppTest) -> str:
    parts = [e.value for kind in (at.caption, at.info, at.warning, at.error, at.success, at.markdown) for e in kind]
    return "\n".join(str(p) for p in parts)


def test_ablations_page_runs_every_experiment(tiny_app):
    at = _page()
    assert at.title[0].value == "Ablations"
    at.number_input(key="ror.w.max_new_tokens").set_value(6).run()
    at.text_area(key="ror.w.query").input(Q)
    at.text_area(key="ror.w.context").input(C).run()
    assert "Run it first" in _texts(ok(at))
    at.button(key="ror.ablate.run_clean").click().run()
    ok(at)
    assert "Clean run: Z =" in _texts(at)

    # the layer choice: a contiguous block, ε and seed
    at.radio(key="ror.w.ablate.mode").set_value("Contiguous block").run()
    at.slider(key="ror.w.ablate.block").set_value((1, 2)).run()
    at.slider(key="ror.w.ablate.eps").set_value(1.0).run()
    assert "block 1-2" in _texts(ok(at))

    # noise on the chosen layers: both answers re-generated next to the clean ones
    at.button(key="ror.ablate.run_noise").click().run()
    ok(at)
    metrics = {m.label: m.value for m in at.metric}
    assert "Z clean" in metrics and "Z perturbed" in metrics
    assert any("tokens changed" in c.value for c in at.caption)
    assert len(at.get("plotly_chart")) >= 4  # two token diffs, the KL curves, the trajectory
    assert "‖d_ℓ‖₂" in _texts(at) or "LTS" in _texts(at)  # the trajectory says which quantity it shows

    # a re-render does not re-run: the stored result is shown
    charts = len(at.get("plotly_chart"))
    at.run()
    assert len(ok(at).get("plotly_chart")) == charts

    # dose–response with two seeds on a short grid
    at.multiselect(key="ror.w.ablate.grid").set_value([0.0, 0.5]).run()
    at.number_input(key="ror.w.ablate.grid_seeds").set_value(2).run()
    at.number_input(key="ror.w.ablate.grid_tokens").set_value(4).run()
    at.button(key="ror.ablate.run_dose").click().run()
    ok(at)
    assert any("ε" in df.value.columns for df in at.dataframe)

    # the single-layer sweep at ε
    at.number_input(key="ror.w.ablate.sweep_tokens").set_value(4).run()
    at.button(key="ror.ablate.run_sweep").click().run()
    ok(at)

    # activation patching combined with noise
    at.checkbox(key="ror.w.ablate.patch_noise").check().run()
    at.button(key="ror.ablate.run_patch").click().run()
    ok(at)
    assert len(at.get("plotly_chart")) >= charts + 2 + 4

    # the exports are JSON / CSV
    downloads = at.get("download_button")
    assert len(downloads) >= 5


def test_ablations_page_presets_and_custom_layers(tiny_app):
    at = _clean_run()
    preset = at.selectbox(key="ror.w.ablate.preset")
    assert "flagged" not in preset.options or "No CRM basis" not in _texts(at)
    preset.set_value("late").run()
    assert "layers 2" in _texts(ok(at))
    at.radio(key="ror.w.ablate.mode").set_value("Custom list").run()
    at.text_input(key="ror.w.ablate.custom").input("0,9").run()
    assert any("out of range" in e.value for e in ok(at).error)
    assert at.button(key="ror.ablate.run_noise").disabled
    # a huge range is refused before it is expanded, with a short message (issue 17 item 1)
    at.text_input(key="ror.w.ablate.custom").input("0-100000000").run()
    errors = [e.value for e in ok(at).error if "out of range" in e.value]
    assert errors and max(len(e) for e in errors) < 200
    assert at.button(key="ror.ablate.run_noise").disabled
    at.text_input(key="ror.w.ablate.custom").input("early,2").run()
    assert "layers 0,2" in _texts(ok(at))
    at.radio(key="ror.w.ablate.mode").set_value("Single layer").run()
    at.slider(key="ror.w.ablate.single").set_value(1).run()
    assert "layer 1" in _texts(ok(at))


def test_ablations_page_without_inputs_asks_for_them(tiny_app):
    at = _page()
    assert "Run it first" in _texts(at)
    at.button(key="ror.ablate.run_clean").click().run()
    ok(at)
    assert any("empty" in e.value for e in at.error)  # the engine's message, shown, nothing run


def test_ablations_json_export_is_valid(tiny_app):
    at = _clean_run()
    at.button(key="ror.ablate.run_noise").click().run()
    ok(at)
    perturbed = [r for r in at.session_state["ror.ablate.results"].values() if hasattr(r, "extras")]
    assert perturbed
    data = json.loads(perturbed[-1].to_json())
    assert data["extras"]["intervention"]["noise"]["eps"] == at.slider(key="ror.w.ablate.eps").value


def test_ablations_page_keeps_the_last_noise_run_when_the_choice_changes(tiny_app):
    at = _clean_run()
    at.slider(key="ror.w.ablate.eps").set_value(0.5).run()
    at.button(key="ror.ablate.run_noise").click().run()
    ok(at)
    stored = len(at.session_state["ror.ablate.results"])
    assert "Showing the last noise run" not in _texts(at)

    # another ε: nothing runs, the last noise run on this clean result stays on screen (and says so)
    at.slider(key="ror.w.ablate.eps").set_value(1.0).run()
    ok(at)
    assert len(at.session_state["ror.ablate.results"]) == stored
    assert "Showing the last noise run" in _texts(at) and "ε = 0.5" in _texts(at)
    assert any(m.label == "Z perturbed" for m in at.metric)

    # back to the ε that ran: its stored run is shown again, without the notice
    at.slider(key="ror.w.ablate.eps").set_value(0.5).run()
    assert "Showing the last noise run" not in _texts(ok(at))
    assert len(at.session_state["ror.ablate.results"]) == stored


def test_the_clean_run_button_has_an_estimate(tiny_app) -> None:
    at = open_script(PAGE, TIMEOUT)
    at.text_area(key="ror.w.query").input("Where is the tower?")
    at.text_area(key="ror.w.context").input("The tower stands in Quillmere.").run()
    ok(at)
    assert any("on this machine" in c.value for c in at.caption), "an estimate under 'Run the clean analysis'"
