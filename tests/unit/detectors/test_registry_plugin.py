"""core.detectors.registry: a detector registered from outside the project (here, this test file; in docs/detectors.md,
a notebook) appears in the agreement view, ``evaluate``, the behavior report and the combined detector's candidates,
with no file of the project touched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.detectors import (
    CONTEXT_RELIANCE,
    GROUNDED_HIGH,
    Detector,
    DetectorInput,
    available,
    register,
    unregister,
)
from core.detectors import combined as combined_module
from core.detectors.agreement import assess
from core.engine import DualPathSettings, run_dual_path
from core.engine.verdict import READ, RECALLED
from core.evaluation.behavior import behavior_report
from core.evaluation.data import ConflictRow, LabeledRow
from core.evaluation.evaluate import evaluate_rows
from core.evaluation.scoring import resolve_detectors, score_records

NAME = "kl_share"
SETTINGS = DualPathSettings(max_new_tokens=5, score_window=5, top_k=4)
DOC = Path(__file__).resolve().parents[3] / "docs" / "detectors.md"


def docs_example() -> str:
    """The first Python block of docs/detectors.md: the fifteen lines a notebook user writes."""
    text = DOC.read_text(encoding="utf-8")
    return text.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def user_detector():
    """The docs' example, run as a notebook would (no file of the project touched), removed afterwards."""
    namespace: dict = {}
    exec(compile(docs_example(), str(DOC), "exec"), namespace)
    yield available()[NAME]
    unregister(NAME)
    assert NAME not in available()


def kl_share(inp: DetectorInput) -> float:
    """The example's score, written again here: the registered detector must give the same number."""
    kl = np.asarray(inp.result.token_kl[: inp.result.score_window])
    return float((kl > 0.5).mean()) if kl.size else 0.0


def test_the_example_is_about_fifteen_lines():
    lines = [line for line in docs_example().splitlines() if line.strip()]
    assert len(lines) <= 16


@pytest.fixture(scope="module")
def run(tiny_handle):
    return run_dual_path(tiny_handle, "Where is the tower?", "The tower stands in Quillmere.", SETTINGS)


def test_it_appears_in_the_agreement_view_in_its_groups_words(tiny_handle, run, user_detector):
    agreement = assess(tiny_handle, run)
    (row,) = [v for v in agreement.verdicts if v.name == NAME]
    assert row.score == pytest.approx(kl_share(DetectorInput(tiny_handle, run, SETTINGS)))
    assert (row.threshold, row.source) == (0.25, "my choice: a quarter of the tokens")
    assert row.verdict == (RECALLED if row.score < 0.25 else READ), "higher = grounded: below τ is recalled"
    assert row.group == CONTEXT_RELIANCE and "reliance on the context" in row.direction
    groups = {g["group"]: g for g in agreement.groups()}
    assert NAME in groups[CONTEXT_RELIANCE]["detectors"]
    assert NAME in agreement.to_dict()


def test_it_is_scored_by_evaluate(tiny_handle, user_detector):
    rows = [
        LabeledRow(i + 1, q, c, label)
        for i, (q, c, label) in enumerate(
            [
                ("Where is the tower?", "The tower stands in Quillmere.", "grounded"),
                ("Who wrote the ode?", "The ode was written by Marrow Vale.", "grounded"),
                ("What is the capital of France?", "The capital of France is Paris.", "memorized"),
                ("Who wrote Hamlet?", "Hamlet was written by Shakespeare.", "memorized"),
            ]
        )
    ]
    report = evaluate_rows(tiny_handle, rows, SETTINGS, detectors=["repcs", NAME], n_boot=20, noise_sigmas=())
    entry = report["detectors"][NAME]
    assert entry["n"] == 4 and entry["higher_means"] == GROUNDED_HIGH and entry["auc"] is not None
    assert all(r["scores"][NAME] is not None for r in report["rows"])


def test_it_is_in_the_behavior_report(tiny_handle, user_detector):
    rows = [
        ConflictRow(1, "Where is the tower?", "The tower stands in Quillmere.", "Quillmere", "Paris"),
        ConflictRow(2, "Who wrote the ode?", "The ode was written by Marrow Vale.", "Marrow Vale", "Keats"),
        ConflictRow(3, "Where is the bridge?", "The bridge spans the Oslow.", "Oslow", "Thames"),
    ]
    detectors = resolve_detectors(["repcs", NAME])
    records = score_records(tiny_handle, rows, SETTINGS, detectors)
    for record, answer in zip(records, ("Quillmere.", "Keats.", "Oslow.")):  # a random model's answers name neither
        record["rag_answer"] = answer
    report = behavior_report(records, detectors, n_boot=20)
    assert report is not None
    entry = report["subsets"]["conflict"]["detectors"][NAME]
    assert entry["n"] == 3 and entry["label"] == user_detector.label


def test_it_is_a_candidate_of_the_combined_detector(tiny_handle, run, user_detector):
    candidates = combined_module.candidates()
    assert NAME in candidates and set(combined_module.FEATURES) <= set(candidates)
    assert combined_module.cv_candidates()[-1] == NAME, "combined_cv refits with it"
    inp = DetectorInput(tiny_handle, run, SETTINGS)
    assert combined_module.raw_features(inp, (NAME,))[0] == pytest.approx(kl_share(inp))


def test_without_it_the_combined_detector_is_as_bundled():
    assert NAME not in combined_module.candidates()
    assert combined_module.cv_candidates() == combined_module.CV_FEATURES


def test_a_declaration_the_project_cannot_use_is_refused():
    with pytest.raises(ValueError, match="reads must be among"):
        register(Detector("zz_bad", "bad", GROUNDED_HIGH, kl_share, reads=frozenset({"the weather"})))
    with pytest.raises(ValueError, match="cost must be one of"):
        register(Detector("zz_bad", "bad", GROUNDED_HIGH, kl_share, cost="cheap"))
    assert "zz_bad" not in available()
