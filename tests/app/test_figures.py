"""figures.base' shared plotly helpers: one line series, text as a grid of colored cells."""

from __future__ import annotations

import numpy as np

from figures.base import cell_grid, line_trace


def test_a_line_trace_is_lines_and_markers_in_its_color_with_the_rest_passed_on() -> None:
    trace = line_trace(
        [0, 1], [2.0, 3.0], "clean", "#123456", "t=%{x}<extra></extra>", line_dash="dot", customdata=["a", "b"]
    )
    assert (trace.mode, trace.name, trace.line.color, trace.line.dash) == ("lines+markers", "clean", "#123456", "dot")
    assert trace.hovertemplate == "t=%{x}<extra></extra>" and list(trace.customdata) == ["a", "b"]
    plain = line_trace([0], [1.0], "p", None, None, mode="lines").to_plotly_json()
    assert plain["mode"] == "lines" and "line" not in plain and "hovertemplate" not in plain, "plotly's defaults"


def test_a_cell_grid_shows_its_text_row_0_on_top_with_hidden_axes() -> None:
    z = np.array([[0.0, 1.0], [1.0, np.nan]])
    text = [["a", "&lt;b&gt;"], ["c", ""]]
    fig = cell_grid(z, text, text, hovertemplate="%{customdata}", gap=3, textfont={"size": 12}, zmin=0, zmax=1)
    (heat,) = fig.data
    assert heat.type == "heatmap" and heat.texttemplate == "%{text}" and (heat.xgap, heat.ygap) == (3, 3)
    assert heat.zmin == 0 and heat.zmax == 1 and heat.text[0][1] == "&lt;b&gt;", "the text as given (escaped)"
    assert fig.layout.yaxis.autorange == "reversed" and not fig.layout.xaxis.visible and not fig.layout.yaxis.visible
