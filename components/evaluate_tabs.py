"""The Evaluate page's result tabs: detectors, rows, robustness and the conflict set (the calibration tab is
:mod:`components.evaluate_calibration`).

Each ``draw_*`` function draws one tab from scored records (:class:`core.evaluation.EvaluationJob`); the maths
comes from :mod:`core.evaluation`, the figures from :mod:`figures.evaluate`. Every text from a file
or the model is escaped before it reaches Markdown.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import streamlit as st

from components import keys, state, widgets
from components.evaluate_behavior import draw_behavior_aucs, draw_by_group
from components.evaluate_jobs import ANY_EVALUATION, draw_run_controls, job, run_job
from components.text import count, escape_markdown
from components.threshold_state import (
    active_threshold,
)
from core.detectors import available
from core.engine.estimate import Estimate, describe_estimate, estimate, estimate_run, format_seconds
from core.evaluation import (
    CONFLICT,
    ConflictRow,
    DataError,
    EvaluationJob,
    JobSpec,
    build_report,
    read_conflict_csv,
)
from core.evaluation.behavior import has_behavior_columns
from core.evaluation.data import CONFLICT_FILE
from core.evaluation.sample_size import small_sample_message
from core.model.handle import ModelHandle
from figures import evaluate as ef

PRECISION_K = 10
"""The k of the Precision@k column (shown only when k < the number of scored rows)."""

DUAL_PATH_PAGE = "pages/1_Dual_Path.py"
COST_LABEL = {
    "free": "free (from the run)",
    "forward": "extra forward passes",
    "generate": "extra generations",
    "heavy": "heavy: many generations",
}


def file_digest(data: bytes) -> str:
    """A short hash of a file's bytes (names a data set in keys and specs)."""
    return hashlib.sha1(data).hexdigest()[:16]


def run_estimate(
    handle: ModelHandle,
    n_rows: int,
    batch_size: int,
    max_new_tokens: int,
    names: Any,
    kind: str | None = None,
) -> str:
    """Before a run: how long it will take on this machine and when the progress bar first moves.

    After a run of the same ``kind`` (:func:`components.evaluate_jobs.estimate_kind`: the same detectors, σ values,
    batch size and token budget), the last runs' seconds per row × the rows; else those of any evaluation run
    (:data:`components.evaluate_jobs.ANY_EVALUATION`). Before: each batch decodes up to
    ``max_new_tokens`` steps for ``batch_size`` rows at once (a wider batch costs more per step: × (1 + batch/8), a
    rough allowance), then one teacher-forced pass, plus one forward per row for each detector that needs one;
    generation-based detectors add a generation per row.
    """
    registry = available()
    forward = sum(registry[n].cost == "forward" for n in names if n in registry)
    generate = sum(registry[n].cost in ("generate", "heavy") for n in names if n in registry)
    batches = -(-n_rows // max(1, batch_size))
    factor = 1.0 + min(batch_size, n_rows) / 8

    def seconds(n_batches: int, rows: int) -> Estimate | None:
        units = estimate(
            handle,
            generated_tokens=n_batches * max_new_tokens + rows * generate * max_new_tokens / factor,
            forwards=n_batches + rows * forward,
            batch_factor=factor,
        )
        if kind is None or rows < 1:
            return units
        return estimate_run(handle, kind, rows, estimate_run(handle, ANY_EVALUATION, rows, units))

    total, first = seconds(batches, n_rows), seconds(1, min(batch_size, n_rows))
    return (
        f"{count(n_rows, 'row')} in {count(batches, 'batch')} of up to {batch_size}: {describe_estimate(total)}. "
        "The bar moves "
        "at every generated token; the first batch's rows are stored after "
        f"{format_seconds(first.seconds) if first is not None else 'a while'}."
    )


def detector_label(name: str) -> str:
    """``name — label · cost`` for pickers."""
    det = available().get(name)
    if det is None:
        return name
    return f"{name} — {det.label} · {COST_LABEL.get(det.cost, det.cost)}"


def draw_detectors_tab(main_job: EvaluationJob, summary: dict, rows: list) -> None:
    st.caption(
        f"{ef.ORIENTATION} Fitted detectors are scored out of fold (stratified 5-fold, seed 42): no row is "
        "scored by a model that saw its label. The CI is a percentile bootstrap over rows (1,000 resamples, "
        "seed 42)."
    )
    detectors = summary["detectors"]
    n_mem = sum(r.get("label") == "memorized" for r in rows)
    n_gr = sum(r.get("label") == "grounded" for r in rows)
    best = max((e.get("auc") for e in detectors.values() if e.get("auc") is not None), default=None)
    small = small_sample_message(n_mem, n_gr, best)
    if small:
        st.warning(small, icon=":material/warning:")
    st.plotly_chart(ef.roc_figure(detectors), key=keys.EVAL_ROC)
    table = ef.metrics_table(detectors)
    if len(rows) <= PRECISION_K and "Precision@10" in table.columns:
        table = table.drop(columns=["Precision@10"])
        st.caption(f"Precision@{PRECISION_K} is left out: it needs more than {PRECISION_K} rows ({len(rows)} here).")
    st.caption(
        "Detectors are grouped by the question each answers; compare AUCs within a group. Against labels built "
        "as memorized / grounded, a group other than context reliance measures how well its own question "
        "(is the context text familiar? does the query look like recall?) happens to separate the two."
    )
    draw_by_group(
        table,
        lambda group: keys.scoped(keys.EVAL_METRICS, group),
        text=("description", ef.RAW_DIRECTION_COLUMN, "note", "source"),
        numbers=dict.fromkeys(("AUC", "AUC 95% CI low", "AUC 95% CI high", "FPR @ 95% TPR", "Precision@10"), "%.3f"),
    )
    spec = main_job.spec
    report = build_report(spec.model, spec.settings, *active_threshold(spec.model), summary, rows)
    report["dataset"] = spec.dataset
    left, right, _ = st.columns([1, 1, 3])
    widgets.download(left, "Metrics (CSV)", table.to_csv(index=False), "evaluation_metrics.csv", key=keys.EVAL_CSV)
    data = json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False)
    widgets.download(right, "Full report (JSON)", data, "evaluation.json", key=keys.EVAL_JSON)


def _open_row(record: dict[str, Any]) -> None:
    state.set_inputs(record["query"], record["context"])
    state.request_run()
    st.switch_page(DUAL_PATH_PAGE)


def draw_rows_tab(main_job: EvaluationJob, rows: list[dict[str, Any]]) -> None:
    names = list(main_job.spec.detectors)
    frame = ef.rows_table(rows, names)
    st.caption("Raw scores in each detector's own units (see its description). Select a row to open it.")
    event = st.dataframe(
        frame,
        hide_index=True,
        key=keys.EVAL_ROWS,
        on_select="rerun",
        selection_mode="single-row",
        column_config=widgets.fitted_columns(
            frame,
            pinned=("row",),
            text=("query", "retrieval answer", "parametric answer"),
            numbers={"Z (nats)": "%.3f", **dict.fromkeys(names, "%.4g")},
        ),
    )
    picked = list(getattr(getattr(event, "selection", None), "rows", []) or [])
    by_row = {r["row"]: r for r in rows}
    if picked:
        number = int(frame.iloc[picked[0]]["row"])
    else:
        number = st.selectbox(
            "Row to open",
            list(by_row),
            key=keys.EVAL_OPEN_ROW,
            format_func=lambda n: f"row {n} · {by_row[n]['label']} · {by_row[n]['query'][:70]}",
        )
    left, right, _ = st.columns([2, 1, 2])
    if number is not None and left.button(
        f"Open row {number} on the Dual Path page", key=keys.EVAL_OPEN, icon=":material/open_in_new:"
    ):
        _open_row(by_row[number])
    widgets.download(right, "Rows (CSV)", frame.to_csv(index=False), "evaluation_rows.csv", key=keys.EVAL_ROWS_CSV)


def draw_robustness_tab(main_job: EvaluationJob | None, summary: dict | None) -> None:
    st.caption(
        "RePCS §V, Table IV: Gaussian noise of standard deviation σ is added to the logits of both paths "
        "before the softmax and the KL; AUC per σ shows how much of the separation survives. The same noise "
        "draw per row is scaled by every σ. The paper's numbers (dashed) come from its own data and models."
    )
    table = (summary or {}).get("robustness")
    if not table:
        if main_job and not main_job.spec.sigmas:
            st.info("Choose σ values before running to get this table.")
        else:
            st.info("Needs scored rows of both labels (with σ values chosen before the run).")
        return
    st.plotly_chart(ef.robustness_figure(table), key=keys.EVAL_ROBUSTNESS)
    st.dataframe(ef.robustness_frame(table), hide_index=True, key=keys.EVAL_ROBUSTNESS_TABLE)


def draw_conflict_tab(handle: ModelHandle, main_rows: list[dict[str, Any]] | None = None) -> None:
    """The conflict set's run, its follow counts and its AUCs against behavior; with ``main_rows`` (the main
    evaluation's rows, fitted detectors' scores out of fold) from a behavior-labeled set, their AUCs too."""
    main_job = job(keys.EVAL_JOB_MAIN)
    if main_rows and main_job is not None and has_behavior_columns(main_rows):
        st.markdown(f"**The evaluated set ({escape_markdown(main_job.spec.dataset or 'unnamed')})**")
        draw_behavior_aucs(main_rows, main_job.spec.detectors, key=keys.EVAL_BEHAVIOR_MAIN)
        st.divider()
    st.caption(
        "Each context contradicts a well-known fact. Which source does the answer repeat — the context's claim "
        "or the remembered fact? And how does each detector score these rows? The label is the model's own "
        "behavior: an answer that follows the context *read* it; one that repeats the fact *recalled* it."
    )
    if not CONFLICT_FILE.is_file():
        st.info("The bundled conflict set (assets/probes/conflict.csv) is not installed.")
        return
    try:
        rows: list[ConflictRow] = read_conflict_csv(CONFLICT_FILE)
    except DataError as exc:
        st.error(f"The conflict set could not be read. {escape_markdown(str(exc))}")
        return
    spec: JobSpec | None = st.session_state.get(keys.EVAL_CURRENT_SPEC)
    if spec is None:
        st.info("Choose detectors above first.")
        return
    conflict_spec = dataclasses.replace(
        spec,
        dataset=CONFLICT_FILE.name,
        digest=file_digest(CONFLICT_FILE.read_bytes()),
        rows_key=tuple(r.row for r in rows),
        kind=CONFLICT,
        sigmas=(),
    )
    st.caption(f"{len(rows)} rows. Both paths answer freely, so this costs one more generation per row.")
    draw_run_controls(keys.EVAL_JOB_CONFLICT, conflict_spec, rows, run_label="Score the conflict set")
    run_job(handle, keys.EVAL_JOB_CONFLICT)
    conflict_job = job(keys.EVAL_JOB_CONFLICT)
    records = conflict_job.scored_records() if conflict_job else []
    if not records:
        return
    st.dataframe(ef.conflict_counts(records), hide_index=True, key=keys.EVAL_CONFLICT_COUNTS)
    draw_behavior_aucs(records, conflict_job.spec.detectors, key=keys.EVAL_BEHAVIOR_CONFLICT)
    names = [n for n in conflict_job.spec.detectors if any(r["scores"].get(n) is not None for r in records)]
    if names:
        name = st.selectbox("Detector", names, key=keys.EVAL_CONFLICT_DETECTOR, format_func=detector_label)
        det = available().get(name)
        st.plotly_chart(ef.conflict_score_figure(records, name, det.label if det else name), key=keys.EVAL_CONFLICT_FIG)
    frame = ef.rows_table(records, names)
    st.dataframe(frame, hide_index=True, key=keys.EVAL_CONFLICT_ROWS)
    widgets.download(
        st, "Conflict rows (CSV)", frame.to_csv(index=False), "conflict_rows.csv", key=keys.EVAL_CONFLICT_CSV
    )
    if job(keys.EVAL_JOB_MAIN) is None:
        st.caption("Run the main evaluation too to compare these scores with the labeled rows.")
