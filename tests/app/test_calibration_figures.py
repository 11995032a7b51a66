"""figures.calibration: the Evaluate page's calibration charts (Z against τ, rates per length, τ(L))."""

from __future__ import annotations

import math

import numpy as np

from core.engine.threshold import LengthTau
from figures import calibration as cf


def test_the_calibration_charts_keep_their_legends_off_the_axis_titles() -> None:
    """Issue 26: a horizontal legend sits, by plotly's default, over the x-axis title."""
    rows = [
        {"calibration": "paper", "bucket": "1–8", "fpr": 0.2, "fpr_ci": [0.1, 0.4], "n_grounded": 5, "fnr": None},
        {"calibration": "length", "bucket": "1–8", "fpr": 0.1, "fpr_ci": [0.0, 0.3], "n_grounded": 5, "fnr": None},
    ]
    rates = cf.length_rates_figure(rows, 0.05)
    assert rates.layout.legend.yanchor == "top" and rates.layout.legend.y < -0.2, "below the axis titles"
    assert rates.layout.margin.b >= 90, "with the room it needs"
    curve = cf.length_tau_figure([1.0, 2.0], [4, 8], ["grounded", "memorized"], None, 3.0)
    assert curve.layout.legend.yanchor == "bottom" and curve.layout.legend.y > 1, "above the plot"


def _length_tau() -> LengthTau:
    """τ(L) = 0.5 · L^0.8 fitted on lengths 6–12, with a three-resample band."""
    return LengthTau(
        intercept=math.log(0.5),
        slope=0.8,
        alpha=0.05,
        L_min=6,
        L_max=12,
        n=100,
        boot_intercept=(math.log(0.4), math.log(0.6), math.log(0.5)),
        boot_slope=(0.8, 0.85, 0.75),
    )


def test_the_length_tau_chart_draws_tau_of_l_its_band_and_the_extrapolated_stretches() -> None:
    lt = _length_tau()
    z, n = [1.0, 0.0, 5.5, 7.0], [4, 8, 12, 70]
    fig = cf.length_tau_figure(z, n, ["grounded", "grounded", "memorized", "memorized"], lt, 5.0)
    names = [t.name for t in fig.data]
    assert names == [
        "grounded",
        "memorized",
        "90% band: inconclusive",
        "τ(L)",
        "τ(L) extrapolated: inconclusive",
        "τ(L) extrapolated: inconclusive",
    ]
    grounded, _, band, curve, below, above = fig.data
    assert list(grounded.y) == [1.0, 1e-3], "Z = 0 is drawn at 1e-3 on the log axis"
    assert curve.x[0] == 6 and math.isclose(curve.x[-1], 12)
    assert np.allclose(curve.y, [lt.tau(x) for x in curve.x]), "the curve is τ(L) itself"
    assert np.allclose(band.y[: len(curve.x)], [lt.band(x)[1] for x in curve.x]), "upper edge, then lower"
    assert (below.x[0], below.x[-1]) == (4, 6) and math.isclose(above.x[0], 12) and math.isclose(above.x[-1], 70)
    assert below.showlegend and not above.showlegend, "one legend entry for both dotted stretches"
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.layout.shapes[0].y0 == 5.0, "the constant τ as a dashed line"


def test_without_tau_of_l_only_the_rows_and_the_constant_tau_are_drawn() -> None:
    fig = cf.length_tau_figure([2.0], [5], ["grounded"], None, 3.0)
    assert [t.name for t in fig.data] == ["grounded"] and len(fig.layout.shapes) == 1
