"""AppTest of ReDeEP's per-token view on the Layer trajectories page (tiny random Llama: no stored choice, so
the label-free default — OV-chosen heads, every layer, α = β = 1 — is in force and says so)."""

from __future__ import annotations

import pytest

from components.redeep_view import HEADS_KEY, LAYERS_KEY, RUN_KEY
from tests.app.conftest import APP, open_script

pytestmark = pytest.mark.usefixtures("one_thread")


def _problems(at) -> list[str]:
    return [str(e.value) for e in at.exception] + [str(e.value) for e in at.error]


def test_the_view_computes_on_request_names_its_heads_and_takes_a_users_own(tiny_app):
    at = open_script(APP, 120)
    at.switch_page("pages/1_Dual_Path.py").run()
    at.number_input(key="ror.w.max_new_tokens").set_value(4)
    at.text_area(key="ror.w.query").input("Who wrote the note?")
    at.text_area(key="ror.w.context").input("The note was written by Ada on Tuesday.")
    at.run()
    at.button(key="ror.run").click().run()
    assert not _problems(at)
    at.switch_page("pages/3_Layer_Trajectories.py").run()
    assert not _problems(at)
    charts = len(at.get("plotly_chart"))
    at.button(key=RUN_KEY).click().run()
    assert not _problems(at)
    assert len(at.get("plotly_chart")) == charts + 1
    assert any(b.proto.label.startswith("Download per-token ReDeEP") for b in at.get("download_button"))
    captions = " ".join(str(c.value) for c in at.caption).replace("\\", "")  # markdown escapes
    assert "not fitted" in captions and "copying heads (ov)" in captions
    labels = {m.label: m.value for m in at.metric}
    assert labels["Mean PKS (recall)"].endswith("nats")

    at.text_input(key=HEADS_KEY).input("1.2").run()
    at.text_input(key=LAYERS_KEY).input("0").run()
    at.button(key=RUN_KEY).click().run()
    assert not _problems(at)
    captions = " ".join(str(c.value) for c in at.caption).replace("\\", "")  # markdown escapes
    assert "L1.H2" in captions and "(user)" in captions

    at.text_input(key=HEADS_KEY).input("12").run()
    assert any("layer.head" in str(e.value).replace("\\", "") for e in at.error)
