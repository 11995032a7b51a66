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
        assert any("calibrate-model" in str(c.value).replace("\\", "") for c in at.caption)  # the one step
        assert "Download the lookback map (CSV)" in _downloads(at)
        at.run()
        at.switch_page("pages/3_Layer_Trajectories.py").run()
        at.switch_page(ATTENTION).run()
        assert not _problems(at)
        assert forwards.n == opened + 1, "the view and the internals are kept for this run"
        assert "Download the lookback map (CSV)" in _downloads(at)


def test_the_figures_draw_every_head_and_token_and_escape_tokens() -> None:
    import numpy as np

    from figures.attention import lookback_curve, lookback_heatmap

    lr = np.random.default_rng(0).uniform(size=(3, 4, 10))
    lr[:, :, 0] = np.nan
    tokens = ["<b>", *[f"t{i}" for i in range(1, 10)]]
    fig = lookback_heatmap(lr, tokens, title="map")
    heat = fig.data[0]
    assert np.shape(heat.z) == (12, 10) and heat.z[5][0] is None and heat.z[5][3] == lr[1, 1, 3]
    assert heat.customdata[5][0][0] == "layer 1 · head 1" and "&lt;b&gt;" in heat.customdata[0][0][1]
    with pytest.raises(ValueError, match="layers, heads"):
        lookback_heatmap(lr, tokens[:-1], title="map")
    curve = np.concatenate([[np.nan], lr[:, :, 1:].mean(axis=(0, 1))])
    windows = [(1, 9), (2, 10)]
    fig = lookback_curve(curve, tokens, windows, np.array([0.4, 0.5]), np.array([0.2, 0.9]), tau=0.5)
    assert [d.name for d in fig.data] == [
        "per token (mean over heads)",
        "window mean (8 tokens, at its last token)",
        "window P(recalled)",
    ]
    assert list(fig.data[2].x) == [8, 9]
    assert len(lookback_curve(curve, tokens, windows, np.array([0.4, 0.5]), np.zeros(0)).data) == 2
    with pytest.raises(ValueError, match="window_p"):
        lookback_curve(curve, tokens, windows, np.array([0.4, 0.5]), np.zeros(3))
