"""AppTest of the Attention page's "heads that copied the answer" on the tiny random Llama (3 layers × 4 heads), and
its figure."""

from __future__ import annotations

import numpy as np
import pytest

import core.methods.copying as copying
from components import keys
from core.engine.span import AnswerSpan
from core.methods.copying import CopyingHeads
from figures.copying import COPY_COLORBAR, chosen_heads_rows, copying_figure, top_heads_rows
from tests.app.conftest import APP, open_script
from tests.app.test_attention_lookback import _run
from tests.app.test_internals_pages import ATTENTION, ForwardCounter, _problems

pytestmark = pytest.mark.usefixtures("one_thread")


def _given_span(monkeypatch, text: str) -> None:
    """The tiny random model's answer is random bytes: the span the headline located is given instead."""
    span = AnswerSpan(text, text.lower(), (0,), (0,), 1.0, None, True, "given")
    monkeypatch.setattr(copying, "headline_span", lambda result: span)


def _charts(at) -> list[str]:
    return [d.proto.label for d in at.get("download_button")]


def test_the_copying_heads_are_found_on_request_once_and_kept(tiny_app, monkeypatch) -> None:
    _given_span(monkeypatch, "Quillmere")
    at = open_script(APP, 120)
    _run(at)
    with ForwardCounter() as forwards:
        at.switch_page(ATTENTION).run()
        assert not _problems(at)
        opened, charts = forwards.n, len(at.get("plotly_chart"))
        assert any(s.value == "The heads that copied the answer" for s in at.subheader)
        assert any("Attention is not attribution" in str(c.value) for c in at.caption)
        assert "Download the copying heads (JSON)" not in _charts(at), "nothing computed before the click"
        at.button(key=keys.ATTN_COPY_RUN).click().run()
        assert not _problems(at)
        assert forwards.n == opened + 1, "one traced forward of the retrieval path"
        assert len(at.get("plotly_chart")) == charts + 1
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Strongest copying head"].startswith("layer ")
        assert metrics["Span tokens in the context"].startswith("9 of ")  # "Quillmere": 9 byte tokens
        assert "Download the copying heads (JSON)" in _charts(at)
        assert any("No copying heads were chosen on this model's calibration rows" in str(c.value) for c in at.caption)
        at.switch_page("pages/3_Layer_Trajectories.py").run()
        at.switch_page(ATTENTION).run()
        assert not _problems(at)
        assert forwards.n == opened + 1, "kept for this run"
        assert "Download the copying heads (JSON)" in _charts(at)


def test_a_span_absent_from_the_context_says_there_is_nothing_to_copy(tiny_app, monkeypatch) -> None:
    _given_span(monkeypatch, "Zanzibar")
    at = open_script(APP, 120)
    _run(at)
    at.switch_page(ATTENTION).run()
    charts = len(at.get("plotly_chart"))
    with ForwardCounter() as forwards:
        at.button(key=keys.ATTN_COPY_RUN).click().run()
        assert forwards.n == 0, "no model call when there is nothing to copy"
    assert not _problems(at)
    assert any("does not occur in the context" in str(i.value) for i in at.info)
    assert len(at.get("plotly_chart")) == charts


def test_the_figure_marks_the_top_heads_and_escapes_the_span() -> None:
    copy = np.arange(12, dtype=np.float64).reshape(3, 4) / 20
    top = copying.top_heads(copy, 2)
    heads = CopyingHeads("<b>Rome</b>", "Rome", 1, 9, 1, (3, 4), 10, copy, copy + 0.1, top, "note", "forward")
    fig = copying_figure(heads)
    heat = fig.data[0]
    assert np.shape(heat.z) == (3, 4) and heat.z[2][3] == copy[2, 3]
    assert {(i, j) for i in range(3) for j in range(4) if heat.text[i][j] == "●"} == {(2, 3), (2, 2)}
    assert "&lt;b&gt;" in fig.layout.title.text and "<b>" not in fig.layout.title.text
    assert fig.data[0].colorbar.title.text == COPY_COLORBAR
    rows = top_heads_rows(heads)
    assert [(r["layer"], r["head"]) for r in rows] == [(2, 3), (2, 2)]
    assert rows[0]["span share of the context's"] == pytest.approx(copy[2, 3] / (copy[2, 3] + 0.1))
    empty = CopyingHeads("Rome", None, 0, None, note="“Rome” does not occur in the context")
    with pytest.raises(ValueError, match="does not occur"):
        copying_figure(empty)
    assert top_heads_rows(empty) == []


def test_the_figure_marks_the_heads_chosen_on_calibration_rows_apart_from_the_run_s() -> None:
    copy = np.arange(12, dtype=np.float64).reshape(3, 4) / 20
    top = copying.top_heads(copy, 2)  # (2, 3), (2, 2)
    heads = CopyingHeads("Rome", "Rome", 1, 9, 1, (3, 4), 10, copy, copy + 0.1, top, "note", "forward")
    fig = copying_figure(heads, chosen=[(2, 3), (0, 1), (7, 7)])  # (7, 7) is outside the map: skipped
    marks = {(i, j): fig.data[0].text[i][j] for i in range(3) for j in range(4) if fig.data[0].text[i][j]}
    assert marks == {(2, 3): "◉", (2, 2): "●", (0, 1): "○"}
    assert "chosen on the model's calibration rows" in fig.data[1].text[1]  # cell (0, 1), row-major
    rows = chosen_heads_rows(heads, [(2, 3), (0, 1), (7, 7)])
    assert [(r["layer"], r["head"], r["on the span"]) for r in rows] == [(2, 3, copy[2, 3]), (0, 1, copy[0, 1])]
