"""AppTest of the Evaluate page with the embedded model: upload validation, a short run, the result tabs,
"use this τ", keeping rows of a stopped run, and the click-through to the Dual Path page."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from core.evaluation import JobStatus, read_conflict_csv
from tests.app.conftest import APP, ROOT, ok

PAGE = "pages/9_Evaluate.py"
MAIN = "ror.eval.job.main"
TIMEOUT = 300
UPLOAD = "Upload a CSV"
DETECTORS = ["repcs", "repcs_mean", "max_token_kl", "ppl", "min_k_20", "crm_l2_lr"]
GOOD = (
    b"query,context,label,parametric_correct\n"
    b"What is the capital of France?,Paris is the capital of France.,memorized,true\n"
    b"Who wrote Hamlet?,Hamlet is a tragedy by William Shakespeare.,memorized,true\n"
    b"What is the chemical symbol for gold?,Gold has the chemical symbol Au.,memorized,false\n"
    b"What is the capital of Veltria?,The capital of Veltria is Marrowgate.,grounded,false\n"
    b"Who founded the Orrin Guild?,The Orrin Guild was founded by Tamsin Vell.,grounded,false\n"
    b"How many moons does Kessarine have?,The planet Kessarine has five moons.,grounded,false\n"
)

pytestmark = pytest.mark.slow


def _page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["ror.s.max_new_tokens"] = 4  # short answers keep the test quick
    at.session_state["ror.s.score_window"] = 4
    at.run()
    at.switch_page(PAGE).run()
    ok(at)
    return at


def _frame(at: AppTest, column: str):
    """The first dataframe on the page with ``column`` (display-only dataframes carry no key in AppTest)."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def _upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.radio(key="ror.w.eval.source").set_value(UPLOAD).run()
    at.file_uploader(key="ror.eval.upload").set_value((name, data, "text/csv")).run()
    ok(at)
    return at


def test_bundled_set_offered_and_bad_upload_reported_by_row_and_column():
    at = _page()
    assert at.title[0].value == "Evaluate"
    options = at.radio(key="ror.w.eval.source").options
    if (ROOT / "assets" / "probes" / "probes.csv").is_file():
        assert options[0] == "Bundled: probes.csv"
        assert any("rows" in c.value and "memorized" in c.value for c in at.caption)
    elif len(options) == 1:
        assert any("No bundled probe set" in i.value for i in at.info)
    assert options[-1] == UPLOAD
    _upload(at, "bad.csv", b"query,context,label\nq,c,memorized\nq2,c2,sometimes\n")
    errors = " ".join(e.value for e in at.error)
    assert "Row 2" in errors and "label" in errors
    assert at.button(key=f"{MAIN}.run").disabled
    assert MAIN not in at.session_state


def test_upload_run_results_calibration_and_open_row():
    at = _page()
    _upload(at, "probes.csv", GOOD)
    assert any("6 rows" in c.value and "3 memorized" in c.value for c in at.caption)
    at.multiselect(key="ror.w.eval.detectors").set_value(DETECTORS).run()
    at.slider(key="ror.w.eval.batch").set_value(4).run()
    at.button(key=f"{MAIN}.run").click().run()
    ok(at)
    job = at.session_state[MAIN]
    assert job.status == "done" and job.n_done == 6
    assert len(job.batches) == 2  # 6 rows in batches of at most 4

    # detectors tab: one metrics row per detector, with an AUC and its CI, and the downloads; one table per group
    tables = [d.value for d in at.dataframe if {"detector", "AUC", "FPR @ 95% TPR"} <= set(d.value.columns)]
    metrics = pd.concat(tables, ignore_index=True)
    assert set(metrics["detector"]) == set(DETECTORS)
    assert [set(t["detector"]) for t in tables] == [
        {"repcs", "repcs_mean", "max_token_kl", "crm_l2_lr"},
        {"ppl", "min_k_20"},
    ], "context reliance, then familiarity of the context text (issue 23 part 3)"
    assert metrics["AUC"].between(0, 1).all()
    assert (metrics["AUC 95% CI low"] <= metrics["AUC"]).all() and (metrics["AUC"] <= metrics["AUC 95% CI high"]).all()
    assert len(at.get("plotly_chart")) >= 1 and len(at.get("download_button")) >= 3

    # robustness tab: AUC for each σ of RePCS Table IV
    table = _frame(at, "σ")
    assert list(table["σ"]) == [0.0, 0.02, 0.05, 0.1]

    # confirmed-labels filter: 5 of the 6 rows are confirmed (the gold row is not)
    at.toggle(key="ror.w.eval.confirmed").set_value(True).run()
    ok(at)
    assert len(at.dataframe(key="ror.eval.rows").value) == 5
    at.toggle(key="ror.w.eval.confirmed").set_value(False).run()

    # calibration tab: τ from the chosen clean rows, then "use this τ" for the whole app
    assert any(m.label == "τ (nats)" for m in at.metric)
    # six rows give poor held-out figures: adopting this τ is a deliberate, confirmed action
    assert at.button(key="ror.eval.use_tau").disabled
    at.checkbox(key="ror.eval.tau.confirm").check().run()
    at.button(key="ror.eval.use_tau").click().run()
    ok(at)
    active = at.session_state["ror.threshold.active"]
    (entry,) = active.values()
    assert entry["threshold"]["T"] == 4 and entry["threshold"]["n_clean"] >= 1

    # a stopped run keeps its rows and can be resumed: rewind the job to "stopped after its first batch"
    job = at.session_state[MAIN]
    job.records = {i: job.records[i] for i in job.batches[0]}
    job.claimed, job.finished = {0}, {0}
    job.status, job.version = JobStatus.STOPPED, job.version + 1
    at.run()
    assert any("Stopped: 4 of 6 rows scored" in i.value for i in at.info)
    assert len(at.dataframe(key="ror.eval.rows").value) == 4
    at.button(key=f"{MAIN}.resume").click().run()
    ok(at)
    assert at.session_state[MAIN].status == "done" and at.session_state[MAIN].n_done == 6

    # click-through: the chosen row opens on the Dual Path page with its query and context
    at.selectbox(key="ror.eval.open_row").set_value(4).run()
    at.button(key="ror.eval.open").click().run()
    ok(at)
    assert at.session_state["ror.s.query"] == "What is the capital of Veltria?"
    assert at.session_state["ror.s.context"] == "The capital of Veltria is Marrowgate."
    assert at.title[0].value == "Dual Path"
    # ... and runs it with the τ chosen on the Evaluate page
    result = at.session_state["ror.results"][at.session_state["ror.last"]]
    assert result.threshold == pytest.approx(entry["threshold"]["tau"])
    assert "Evaluate page" in result.threshold_source


def test_conflict_set_says_which_source_each_answer_follows():
    at = _page()
    at.multiselect(key="ror.w.eval.detectors").set_value(["repcs", "ppl"]).run()
    at.button(key="ror.eval.job.conflict.run").click().run()
    ok(at)
    job = at.session_state["ror.eval.job.conflict"]
    n = len(read_conflict_csv(ROOT / "assets" / "probes" / "conflict.csv"))
    assert job.status == "done" and job.n_done == n
    counts = _frame(at, "neither")
    assert list(counts["answer"]) == ["retrieval answer (with context)", "parametric answer (no context)"]
    assert (counts[["context", "memory", "both", "neither"]].sum(axis=1) == n).all()
    assert all(r["scores"]["repcs"] == r["repcs_score"] for r in job.records.values())
    assert MAIN not in at.session_state  # the labeled evaluation was not started


def test_a_saved_tau_is_checked_then_used_for_the_whole_app():
    """Load a τ saved earlier: a bad file or another model's τ is refused with the reason and changes
    nothing; a good one, once confirmed, is the τ in force (and "Back to the default τ" undoes it)."""
    from core.engine.threshold import EMBEDDED_THRESHOLD, Threshold

    at = _page()
    upload = at.file_uploader(key="ror.eval.tau_upload")
    upload.set_value(("threshold.json", b'{"tau": NaN, "T": 64, "model": "x"}', "application/json")).run()
    assert any("tau" in e.value and "must be a finite number" in e.value for e in at.error)
    assert not at.session_state["ror.threshold.active"], "a refused file changes nothing"

    mine = Threshold.load(EMBEDDED_THRESHOLD)
    mine.tau, mine.source = 11.25, "a test calibration"
    mine.length_tau = None  # a constant τ, so the page names it "τ = … nats"
    other = Threshold.from_dict({**json.loads(mine.to_json()), "model": "another-model"})
    upload = at.file_uploader(key="ror.eval.tau_upload")
    upload.set_value(("other.json", other.to_json().encode(), "application/json")).run()
    assert any("not for the loaded model" in e.value for e in at.error)
    assert not any(b.key == "ror.eval.use_loaded_tau" for b in at.button)

    upload = at.file_uploader(key="ror.eval.tau_upload")
    upload.set_value(("mine.json", mine.to_json().encode(), "application/json")).run()
    assert not at.error
    at.button(key="ror.eval.use_loaded_tau").click().run()
    ok(at)
    (entry,) = at.session_state["ror.threshold.active"].values()
    assert entry["threshold"]["tau"] == 11.25 and "loaded from mine.json" in entry["source"]
    assert any("τ = 11.250 nats" in e.label for e in at.expander)
    at.button(key="ror.eval.reset_tau_top").click().run()
    assert not at.session_state["ror.threshold.active"]
    bundled = Threshold.load(EMBEDDED_THRESHOLD).length_tau  # back to the bundled, length-aware τ(L)
    assert any(f"τ(L) from {bundled.tau(bundled.L_min):.2f}" in e.label for e in at.expander)
