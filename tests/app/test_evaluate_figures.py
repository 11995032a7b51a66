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
    assert not any("grounded" == str(v) for v in table.to_numpy().ravel()), "no cell says higher = grounded"
