"""figures.detectors: the SMA colored text keeps its colour bar readable."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from figures.detectors import MIN_TEXT_FIGURE_PX, ads_text_figure


def test_the_colour_bar_title_runs_along_the_bar_with_few_labels() -> None:
    units = [SimpleNamespace(text=w, segment="query") for w in ("Where", "is", "the", "tower", "?")]
    values = np.array([0.3, -0.1, 0.0, 0.5, -0.2])
    result = SimpleNamespace(units=units, ads=values, beta_on=values, beta_off=values)
    fig = ads_text_figure(result, ["x"] * 5)
    bar = fig.data[0].colorbar
    assert bar.title.side == "right", "a title on top of a short bar overlapped its tick labels"
    assert bar.nticks <= 5
    assert fig.layout.height >= MIN_TEXT_FIGURE_PX >= 200, "one row of text still leaves room for the bar"
