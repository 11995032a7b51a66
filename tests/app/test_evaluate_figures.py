"""components.evaluate_figures: the Evaluate metrics table follows the one orientation its caption states."""

from __future__ import annotations

from components import evaluate_figures as ef
from core.detectors.registry import GROUNDED_HIGH, MEMORIZED_HIGH

DETECTORS = {
    "repcs": {"auc": 0.8, "auc_ci": [0.6, 0.9], "higher_means": GROUNDED_HIGH, "n": 8, "label": "RePCS Z"},
    "sma": {"auc": 0.7, "auc_ci": [0.5, 0.85], "higher_means": MEMORIZED_HIGH, "n": 8, "label": "SMA"},
}


def test_the_table_says_how_each_score_is_oriented_not_which_label_is_high() -> None:
    table = ef.metrics_table(DETECTORS)
    assert "higher means" not in table.columns, "a 'higher means: grounded' cell contradicts the caption"
    scored = dict(zip(table["detector"], table[ef.ORIENTATION_COLUMN], strict=True))
    assert scored == {"repcs": "− raw score", "sma": "raw score"}
    assert "higher means memorized" in ef.ORIENTATION and "negated" in ef.ORIENTATION
    assert not any(str(v) == "grounded" for v in table.to_numpy().ravel()), "no cell says higher = grounded"


def test_the_calibration_charts_keep_their_legends_off_the_axis_titles() -> None:
    """Issue 26: a horizontal legend sits, by plotly's default, over the x-axis title."""
    rows = [
        {"calibration": "paper", "bucket": "1–8", "fpr": 0.2, "fpr_ci": [0.1, 0.4], "n_grounded": 5, "fnr": None},
        {"calibration": "length", "bucket": "1–8", "fpr": 0.1, "fpr_ci": [0.0, 0.3], "n_grounded": 5, "fnr": None},
    ]
    rates = ef.length_rates_figure(rows, 0.05)
    assert rates.layout.legend.yanchor == "top" and rates.layout.legend.y < -0.2, "below the axis titles"
    assert rates.layout.margin.b >= 90, "with the room it needs"
    curve = ef.length_tau_figure([1.0, 2.0], [4, 8], ["grounded", "memorized"], None, 3.0)
    assert curve.layout.legend.yanchor == "bottom" and curve.layout.legend.y > 1, "above the plot"
