"""The Evaluate page's AUCs against behavior labels (:mod:`components.evaluate_behavior`)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from components.evaluate_behavior import agreement_frame, auc_frame
from core.evaluation.behavior import behavior_report
from core.evaluation.scoring import resolve_detectors


def _records() -> list[dict]:
    rows = []
    for i, (answer, score, verdict) in enumerate(
        [("Warsaw", 0.9, "recalled"), ("Warsaw", 0.3, "inconclusive"), ("Krakow", 0.2, "read"), ("Krakow", 0.6, "read")]
    ):
        rows.append(
            {
                "row": i + 1,
                "rag_answer": answer,
                "answer_context": "Krakow",
                "answer_memory": "Warsaw",
                "scores": {"max_token_kl": -score},  # higher max-token KL means grounded: −score orients it
                "verdict": verdict,
            }
        )
    return rows


def test_frames_hold_the_auc_and_the_verdict_agreement():
    report = behavior_report(_records(), resolve_detectors(["max_token_kl"]), n_boot=20)
    aucs = auc_frame(report)
    row = aucs[(aucs["subset"] == "conflict") & (aucs["detector"] == "max_token_kl")].iloc[0]
    assert row["AUC"] == pytest.approx(0.75)  # pairs (0.9 > 0.2, 0.9 > 0.6, 0.3 > 0.2, 0.3 < 0.6): 3 of 4
    agreement = agreement_frame(report).set_index("subset")
    assert agreement.loc["conflict", "verdict matches"] == pytest.approx(0.75)
    assert agreement.loc["conflict", "inconclusive"] == pytest.approx(0.25)
    assert auc_frame(None).empty and agreement_frame(None).empty


def _draw() -> None:
    from components.evaluate_behavior import draw_behavior_aucs
    from tests.app.test_evaluate_behavior import _records

    draw_behavior_aucs(_records(), ["max_token_kl"], key="test.behavior")


def test_the_table_is_drawn_without_error():
    at = AppTest.from_function(_draw, default_timeout=60).run()
    assert not at.exception, at.exception
    assert any("AUC against the model's behavior" in m.value for m in at.markdown)
    assert len(at.dataframe) == 2


def _draw_two_groups() -> None:
    from components.evaluate_behavior import draw_behavior_aucs
    from tests.app.test_evaluate_behavior import _records

    rows = _records()
    for i, row in enumerate(rows):
        row["scores"]["ppl"] = float(i)
    draw_behavior_aucs(rows, ["ppl", "max_token_kl"], key="test.behavior")


def test_the_aucs_are_grouped_by_the_question_each_detector_answers():
    """Issue 23 part 3: each group's AUCs under its own question, context reliance first."""
    from core.detectors.registry import GROUPS

    at = AppTest.from_function(_draw_two_groups, default_timeout=60).run()
    assert not at.exception, at.exception
    headings = [m.value for m in at.markdown if m.value.startswith("**") and " — " in m.value]
    assert headings == [
        "**Context reliance** — " + GROUPS["context_reliance"],
        "**Familiarity of the context text** — " + GROUPS["context_familiarity"],
    ]
    tables = [d.value for d in at.dataframe if "AUC" in d.value.columns]
    assert [list(t["detector"]) for t in tables] == [["max_token_kl"], ["ppl"]]
    assert all(t["direction of the raw score"].str.startswith("higher = ").all() for t in tables)
