"""components/evaluate_jobs.py: the Evaluate page scores through the CLI's loop (issue 27 item 5) —
:meth:`core.evaluation.scheduler.EvaluationJob.run`, the loop :func:`core.evaluation.evaluate.evaluate_rows` (``python
-m core evaluate``) runs — batch by batch with the same scoring, and gets the CLI's scores (tiny random model)."""

from __future__ import annotations

import math

from streamlit.testing.v1 import AppTest

from core.engine import DualPathSettings
from core.evaluation import scheduler
from core.evaluation.data import parse_labeled_bytes
from core.evaluation.evaluate import evaluate_rows
from tests.app.conftest import APP, ok

PAGE = "pages/9_Evaluate.py"
MAIN = "ror.eval.job.main"
DETECTORS = ["repcs", "ppl"]
CSV = (
    b"query,context,label\n"
    b"Where is the tower?,The tower stands in Quillmere.,grounded\n"
    b"Who wrote Hamlet?,Hamlet is a tragedy by William Shakespeare.,memorized\n"
    b"What is the capital of Veltria?,The capital of Veltria is Marrowgate.,grounded\n"
    b"What is the capital of France?,Paris is the capital of France.,memorized\n"
)


def _recording(monkeypatch) -> list[tuple[str, int]]:
    """Every call of the job loop and of its per-batch scoring, as (what, rows)."""
    calls: list[tuple[str, int]] = []
    run, score = scheduler.EvaluationJob.run, scheduler.score_records

    def recorded_run(self, *args, **kwargs):
        calls.append(("run", self.n_rows))
        return run(self, *args, **kwargs)

    def recorded_score(handle, rows, *args, **kwargs):
        calls.append(("batch", len(rows)))
        return score(handle, rows, *args, **kwargs)

    monkeypatch.setattr(scheduler.EvaluationJob, "run", recorded_run)
    monkeypatch.setattr(scheduler, "score_records", recorded_score)
    return calls


def test_the_page_runs_the_clis_loop_and_gets_the_clis_scores(tiny_app, monkeypatch) -> None:
    calls = _recording(monkeypatch)
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["ror.s.max_new_tokens"] = 4
    at.session_state["ror.s.score_window"] = 4
    ok(at.run())
    ok(at.switch_page(PAGE).run())
    at.radio(key="ror.w.eval.source").set_value("Upload a CSV").run()
    at.file_uploader(key="ror.eval.upload").set_value(("rows.csv", CSV, "text/csv")).run()
    at.multiselect(key="ror.w.eval.detectors").set_value(DETECTORS).run()
    at.slider(key="ror.w.eval.batch").set_value(2).run()
    ok(at.button(key=f"{MAIN}.run").click().run())
    job = at.session_state[MAIN]
    assert job.n_done == 4
    page_calls = list(calls)
    assert page_calls[0] == ("run", 4) and sorted(n for what, n in page_calls if what == "batch") == [2, 2]

    calls.clear()
    rows = parse_labeled_bytes(CSV, name="rows.csv")
    settings = DualPathSettings(max_new_tokens=4, score_window=4)
    report = evaluate_rows(tiny_app, list(rows), settings, detectors=DETECTORS, batch_size=2, n_boot=10)
    assert calls == page_calls, "the CLI runs the same loop with the same batches"
    cli = {r["row"]: r["scores"] for r in report["rows"]}
    page = {r["row"]: r["scores"] for r in job.scored_records()}
    assert cli.keys() == page.keys()
    for row in cli:
        for name in DETECTORS:
            assert math.isclose(cli[row][name], page[row][name], rel_tol=1e-5, abs_tol=1e-7), (row, name)
