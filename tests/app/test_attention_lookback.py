"""AppTest of the Attention page's Lookback Lens view on the tiny random Llama (3 layers × 4 heads)."""

from __future__ import annotations

import pytest

from components import keys
from tests.app.conftest import APP, open_script
from tests.app.test_internals_pages import ATTENTION, ForwardCounter, _problems

pytestmark = pytest.mark.usefixtures("one_thread")


def _run(at, max_new_tokens: int = 8) -> None:
    at.switch_page("pages/1_Dual_Path.py").run()
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(max_new_tokens).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input("Where is the tower?")
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input("The tower stands in Quillmere, by the river.")
    at.button(key=keys.RUN).click().run()
    assert not _problems(at)


def _downloads(at) -> list[str]:
    return [d.proto.label for d in at.get("download_button")]


def test_the_lookback_map_is_computed_on_request_once_and_exported(tiny_app, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))  # no classifier for the tiny model
    at = open_script(APP, 120)
    _run(at)
    with ForwardCounter() as forwards:
        at.switch_page(ATTENTION).run()
        assert not _problems(at)
        opened = forwards.n
        charts = len(at.get("plotly_chart"))
        assert "Download the lookback map (CSV)" not in _downloads(at), "nothing computed before the click"
        at.button(key=keys.ATTN_LOOKBACK_RUN).click().run()
        assert not _problems(at)
        assert forwards.n == opened + 1, "one traced forward of the retrieval path"
        assert len(at.get("plotly_chart")) >= charts + 1  # the map (and the window curve for ≥ 2 answer tokens)
        labels = {m.label: m.value for m in at.metric}
        assert labels["Lookback Lens P(recalled)"] == "—"  # the tiny model has no classifier: said, not guessed
        assert any("build_lookback.py" in str(c.value).replace("\\", "") for c in at.caption)
        assert "Download the lookback map (CSV)" in _downloads(at)
        at.run()
        at.switch_page("pages/3_Layer_Trajectories.py").run()
        at.switch_page(ATTENTION).run()
        assert not _problems(at)
        assert forwards.n == opened + 1, "the view and the internals are kept for this run"
        assert "Download the lookback map (CSV)" in _downloads(at)
