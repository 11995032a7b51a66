"""figures.trajectory: the LTS curve of this run against the calibration band."""

from __future__ import annotations

import numpy as np

from figures.base import RETRIEVAL_COLOR


def test_the_lts_curve_is_drawn_over_the_band_with_its_z_score_in_the_hover() -> None:
    from figures.trajectory import lts_figure

    lts, mu, sigma = np.array([1.0, 3.0, 2.0]), np.array([1.0, 2.0, 2.0]), np.array([0.5, 0.5, 0.0])
    fig = lts_figure(lts, mu, sigma, kept=[1], flagged=[1], title="<t>")
    run = next(t for t in fig.data if t.name == "this run")
    assert (run.mode, run.line.color, run.line.width, run.marker.size) == ("lines+markers", RETRIEVAL_COLOR, 2, 6)
    assert [list(row[:2]) for row in run.customdata] == [["emb", 0.0], ["0", 2.0], ["1", 0.0]], "z = 0 where σ = 0"
    assert "z = %{customdata[1]:.2f}" in run.hovertemplate and fig.layout.title.text == "&lt;t&gt;"
    names = [t.name for t in fig.data]
    assert names.index("calibration μ") < names.index("this run") < names.index("outside μ ± 2σ (flagged)")
