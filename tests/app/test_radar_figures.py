"""components.radar_figures (issue 14): the RADAR ensemble bar's labels are readable."""

from __future__ import annotations


def test_radar_ensemble_bar_label_is_readable() -> None:
    from components.radar_figures import probability_figure
    from core.methods.radar.classifier import RadarPrediction

    pred = RadarPrediction(0.95, "recall", 0.95, "recall", {}, {}, 0.5, 0.5)
    fig = probability_figure(pred)
    assert fig.layout.yaxis.showticklabels is False, "no clipped 'ensemble' tick"
    texts = [t.text[0] for t in fig.data]
    assert texts == ["recall 0.95", "0.05"], "a sliver gets its number only"
    assert all(t.textfont.color == "white" and t.insidetextanchor == "middle" for t in fig.data)
