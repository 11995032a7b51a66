"""figures.evaluate: the Evaluate metrics table follows the one orientation its caption states."""

from __future__ import annotations

from core.detectors.registry import GROUNDED_HIGH, MEMORIZED_HIGH
from figures import evaluate as ef

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


GROUPED = {
    "ppl": {"auc": 0.9, "auc_ci": [0.8, 0.95], "higher_means": GROUNDED_HIGH, "n": 8, "label": "Perplexity"},
    "radar": {"auc": 0.95, "auc_ci": [0.9, 0.99], "higher_means": MEMORIZED_HIGH, "n": 8, "label": "RADAR"},
    "repcs": {"auc": 0.6, "auc_ci": [0.4, 0.8], "higher_means": GROUNDED_HIGH, "n": 8, "label": "RePCS Z"},
    "min_k_10": {"auc": 0.7, "auc_ci": [0.5, 0.8], "higher_means": MEMORIZED_HIGH, "n": 8, "label": "Min-10%"},
    "max_token_kl": {"auc": 0.8, "auc_ci": [0.6, 0.9], "higher_means": GROUNDED_HIGH, "n": 8, "label": "max KL"},
}


def test_the_metrics_come_group_by_group_each_under_its_question() -> None:
    """Issue 23 part 3: RADAR's 0.95 and perplexity's 0.9 no longer rank above RePCS as if on its question."""
    from core.detectors.registry import GROUPS

    table = ef.metrics_table(GROUPED)
    assert list(table["detector"]) == ["max_token_kl", "repcs", "ppl", "min_k_10", "radar"], "GROUPS order, then AUC"
    parts = ef.by_group(table)
    assert [g for g, _ in parts] == ["context_reliance", "context_familiarity", "recall_vs_reasoning"]
    assert all(ef.GROUP_COLUMN not in frame.columns for _, frame in parts)
    assert ef.group_heading("context_familiarity") == (
        "**Familiarity of the context text** — " + GROUPS["context_familiarity"]
    )
    raw = dict(zip(table["detector"], table[ef.RAW_DIRECTION_COLUMN], strict=True))
    assert raw["ppl"] == "higher = the context text looks less familiar to the model"
    assert raw["radar"] == "higher = the query looks more like a recall task"
    assert raw["repcs"].startswith("higher = more reliance on the context")
    assert not any("Read from" in v or "Recalled" in v for v in raw.values())
    grouped = ef.with_groups(table[["detector", "AUC"]])
    assert list(grouped[ef.GROUP_COLUMN]) == list(table[ef.GROUP_COLUMN])
    assert ef.by_group(ef.metrics_table({})) == []


def _roc_entries(n: int) -> dict[str, dict]:
    """``n`` detectors with distinct AUCs (detector ``d7`` has AUC 0.57) and a two-point ROC each."""
    return {
        f"d{i}": {"auc": 0.5 + i / 100, "auc_ci": [0.4, 0.9], "label": f"D{i}", "roc": {"fpr": [0, 1], "tpr": [0, 1]}}
        for i in range(n)
    }


def test_the_roc_chart_draws_the_best_few_and_lists_the_rest_on_demand() -> None:
    """Issue 45: 23 curves and a ten-row legend; now the ROC_SHOWN best by AUC are drawn, the rest one click away."""
    fig = ef.roc_figure(_roc_entries(23))
    curves = [t for t in fig.data if not t.name.startswith("chance")]
    drawn = [t.name.split(" ·")[0] for t in curves if t.visible is True]
    assert drawn == [f"d{i}" for i in range(22, 22 - ef.ROC_SHOWN, -1)], drawn
    hidden = [t for t in curves if t.visible == "legendonly"]
    assert len(hidden) == 23 - ef.ROC_SHOWN and all(t.legendgroup == "more" for t in hidden)
    everything = ef.roc_figure(_roc_entries(23), shown=None)
    assert all(t.visible is True for t in everything.data if not t.name.startswith("chance"))
    few = ef.roc_figure(_roc_entries(3))
    assert all(t.visible is True for t in few.data[1:]), "fewer curves than ROC_SHOWN: all drawn"
