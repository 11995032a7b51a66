"""figures.radar (issue 14): the RADAR ensemble bar's labels are readable."""

from __future__ import annotations


def test_radar_ensemble_bar_label_is_readable() -> None:
    from core.methods.radar.classifier import RadarPrediction
    from figures.radar import probability_figure

    pred = RadarPrediction(0.95, "recall", 0.95, "recall", {}, {}, 0.5, 0.5)
    fig = probability_figure(pred)
    assert fig.layout.yaxis.showticklabels is False, "no clipped 'ensemble' tick"
    texts = [t.text[0] for t in fig.data]
    assert texts == ["recall 0.95", "0.05"], "a sliver gets its number only"
    assert all(t.textfont.color == "white" and t.insidetextanchor == "middle" for t in fig.data)


def test_the_layer_trajectory_shows_confidence_over_entropy_with_each_layers_top_token() -> None:
    import numpy as np

    from core.methods.radar import RadarTrace
    from figures.radar import CONFIDENCE_COLOR, ENTROPY_COLOR, trajectory_figure

    c, h = np.array([0.1, 0.7, 0.4]), np.array([3.0, 1.0, 2.0])
    trace = RadarTrace("x", [1], ["x"], c, h, [1, 2, 3], [" a", "<b>", "c"], np.ones((3, 2)), c, c, c)
    fig = trajectory_figure(trace)
    assert [(t.name, t.mode, t.line.color, t.xaxis, t.yaxis) for t in fig.data] == [
        ("confidence", "lines+markers", CONFIDENCE_COLOR, "x", "y"),
        ("entropy", "lines+markers", ENTROPY_COLOR, "x2", "y2"),
    ]
    assert list(fig.data[0].customdata) == ["␣a", "&lt;b&gt;", "c"] and list(fig.data[1].y) == [3.0, 1.0, 2.0]
    assert fig.data[1].hovertemplate == "layer %{x}<br>H = %{y:.3f} nats<br>top token %{customdata}<extra></extra>"
    assert fig.layout.annotations[-1].text == "ℓ* = 1", "the confidence peak"


def test_the_accuracy_legend_sits_below_the_plot_not_over_the_bars() -> None:
    """Issue 38: a horizontal legend at y = 1.1 hung down over the plot and hid the top of the 100 % bars (they
    read ~82 %); the legend now sits at the figure's bottom edge, outside the plot area (checked in chromium by
    tests/e2e/test_layout_browser.py)."""
    from figures.radar import accuracy_figure

    categories = [
        {"title": t, "accuracy": a, "paper": 0.9, "length_accuracy": 1.0}
        for t, a in (("Clear recall", 1.0), ("Clear reasoning", 0.95), ("Challenging", 0.6), ("Complex", 0.9))
    ]
    overall = {"accuracy": 0.86, "paper": 0.92, "length_accuracy": 1.0}
    fig = accuracy_figure({"categories": categories, "overall": overall})
    legend = fig.layout.legend
    assert (legend.orientation, legend.yref, legend.yanchor, legend.y) == ("h", "container", "bottom", 0)
    assert fig.layout.yaxis.range == (0, 1.05), "the 100 % bars reach the top of the plot area, which stays clear"
    assert [t.name for t in fig.data] == ["RADAR here", "prompt length only", "paper (DialoGPT-medium)"]
