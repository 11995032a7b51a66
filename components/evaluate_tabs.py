"""The Evaluate page's result tabs: detectors, rows, calibration, robustness and the conflict set.

Each ``draw_*`` function draws one tab from scored records (:class:`core.evaluation.EvaluationJob`); the maths
comes from :mod:`core.evaluation`, the figures from :mod:`components.evaluate_figures`. Every text from a file
or the model is escaped before it reaches Markdown.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any

import streamlit as st

from components import controls, keys, state, widgets
from components import evaluate_figures as ef
from components.evaluate_jobs import draw_run_controls, job, run_job
from components.text import escape_markdown
from components.threshold_state import (
    active_threshold,
    clear_active_threshold,
    session_threshold,
    set_active_threshold,
    tau_mode,
)
from core.detectors import available
from core.engine.estimate import describe_estimate, estimate_seconds, format_seconds
from core.evaluation import (
    CONFLICT,
    DEFAULT_ALPHA,
    DEFAULT_EPSILON,
    ConflictRow,
    DataError,
    EvaluationJob,
    JobSpec,
    build_report,
    calibrate_records,
    read_conflict_csv,
)
from core.evaluation.data import CONFLICT_FILE
from core.evaluation.length_rates import length_report
from core.evaluation.sample_size import small_sample_message
from core.methods.repcs import DEFAULT_TAU_MODE, TAU_LENGTH, TAU_MODE_LABELS, TAU_PAPER, threshold_for
from core.model.handle import ModelHandle

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


def run_estimate(handle: ModelHandle, n_rows: int, batch_size: int, max_new_tokens: int, names: Any) -> str:
    """Before a run: how long it will take on this machine and when the progress bar first moves.

    Each batch decodes up to ``max_new_tokens`` steps for ``batch_size`` rows at once (a wider batch costs more
    per step: × (1 + batch/8), a rough allowance), then one teacher-forced pass, plus one forward per row for
    each detector that needs one; generation-based detectors add a generation per row.
    """
    registry = available()
    forward = sum(registry[n].cost == "forward" for n in names if n in registry)
    generate = sum(registry[n].cost in ("generate", "heavy") for n in names if n in registry)
    batches = -(-n_rows // max(1, batch_size))
    factor = 1.0 + min(batch_size, n_rows) / 8

    def seconds(n_batches: int, rows: int) -> float | None:
        return estimate_seconds(
            handle,
            generated_tokens=n_batches * max_new_tokens + rows * generate * max_new_tokens / factor,
            forwards=n_batches + rows * forward,
            batch_factor=factor,
        )

    total, first = seconds(batches, n_rows), seconds(1, min(batch_size, n_rows))
    return (
        f"{n_rows} rows in {batches} batches of up to {batch_size}: {describe_estimate(total)}. The bar moves "
        "at every generated token; the first batch's rows are stored after "
        f"{format_seconds(first) if first is not None else 'a while'}."
    )


def detector_label(name: str) -> str:
    """``name — label · cost`` for pickers."""
    det = available().get(name)
    if det is None:
        return name
    return f"{name} — {det.label} · {COST_LABEL.get(det.cost, det.cost)}"


def draw_reset_threshold(container: Any, model: str, *, key: str) -> None:
    """The button that drops this session's τ for ``model`` (back to the bundled default; disabled without one)."""
    own, _ = session_threshold(model)
    container.button(
        "Back to the default τ", key=key, disabled=own is None, on_click=clear_active_threshold, args=(model,)
    )


def draw_detectors_tab(main_job: EvaluationJob, summary: dict, rows: list) -> None:
    st.caption(
        "Each detector's score is oriented so that higher = more likely memorized (e.g. −Z for RePCS). Fitted "
        "detectors are scored out of fold (stratified 5-fold, seed 42): no row is scored by a model that saw "
        "its label. The CI is a percentile bootstrap over rows (1,000 resamples, seed 42)."
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
    st.dataframe(
        table,
        hide_index=True,
        key=keys.EVAL_METRICS,
        column_config=widgets.fitted_columns(
            table,
            pinned=("detector",),
            text=("description", "note", "source"),
            numbers=dict.fromkeys(
                ("AUC", "AUC 95% CI low", "AUC 95% CI high", "FPR @ 95% TPR", "Precision@10"), "%.3f"
            ),
        ),
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


def draw_calibration_tab(handle: ModelHandle, main_job: EvaluationJob, records: list[dict[str, Any]]) -> None:
    st.caption(
        "RePCS (Alg. 1, Thm III.4): τ is the α-quantile of Z over clean (grounded) calibration rows; a row is "
        "flagged memorized when Z < τ. The FPR/FNR below are measured on rows *not* used to set τ. The PAC n "
        "holds only under the paper's assumptions, with γ and Δ estimated from these rows."
    )
    spec = main_job.spec
    grounded = [r["row"] for r in records if r["label"] == "grounded"]
    if not grounded:
        st.warning("No grounded row has been scored: τ needs clean rows.")
        return
    c1, c2, c3 = st.columns(3)
    alpha = c1.number_input(
        "Target false-positive rate α", 0.001, 0.5, DEFAULT_ALPHA, step=0.01, format="%.3f", key=keys.EVAL_ALPHA
    )
    epsilon = c2.number_input(
        "ε (PAC confidence / FNR target)", 0.001, 0.5, DEFAULT_EPSILON, step=0.01, format="%.3f", key=keys.EVAL_EPSILON
    )
    mode = c3.radio("Calibration rows", ["A random share of the grounded rows", "Rows I pick"], key=keys.EVAL_CAL_MODE)
    chosen: set[int] | None = None
    fraction = 0.5
    if mode == "Rows I pick":
        chosen = set(
            st.multiselect(
                "Grounded rows used to set τ (the rest are held out)",
                grounded,
                default=grounded[: max(1, len(grounded) // 2)],
                key=keys.EVAL_CAL_ROWS,
            )
        )
        if not chosen:
            st.info("Pick at least one grounded row.")
            return
    else:
        fraction = st.slider(
            "Share of grounded rows used to set τ (seed 42)", 0.1, 1.0, 0.5, 0.05, key=keys.EVAL_CAL_FRACTION
        )
    settings = spec.settings

    def run_calibration(mode: str) -> Any:
        return calibrate_records(
            records,
            chosen,
            T=settings.score_window,
            model=spec.model,
            alpha=float(alpha),
            epsilon=float(epsilon),
            fraction=float(fraction),
            template=settings.template,
            source=f"calibrated on the Evaluate page ({spec.dataset})",
            mode=mode,
        )

    try:
        try:
            report = run_calibration(tau_mode())
        except ValueError as exc:
            if tau_mode() != TAU_LENGTH:
                raise
            st.warning(f"{escape_markdown(str(exc))} Below: the paper's constant τ on these rows.")
            report = run_calibration(TAU_PAPER)
    except ValueError as exc:
        st.error(escape_markdown(str(exc)))
        return
    m = st.columns(4)
    m[0].metric("τ (nats)", f"{report.tau:.3f}", help=f"{alpha:g}-quantile of Z over {report.n_calibration} clean rows")
    m[1].metric(
        "Held-out FPR",
        "–" if report.fpr_heldout is None else f"{report.fpr_heldout:.1%}",
        help=f"grounded rows flagged, of {report.n_heldout_clean} held out (target α = {alpha:g})",
    )
    m[2].metric(
        "Held-out FNR",
        "–" if report.fnr_heldout is None else f"{report.fnr_heldout:.1%}",
        help=f"memorized rows missed, of {report.n_heldout_memorized}",
    )
    m[3].metric("PAC n", "–" if report.n_required is None else f"{report.n_required:,}", help="n ≥ 8 γ² T Δ⁻² log(2/ε)")
    st.caption(
        f"γ̂ = {report.gamma:.3f} nats (largest per-token |log P_rag − log P_para| in any row) · "
        f"Δ̂ = {'–' if report.delta is None else f'{report.delta:.3f}'} nats (mean Z grounded − mean Z memorized) · "
        f"T = {settings.score_window} · ε = {epsilon:g} · calibration rows: {report.n_calibration}"
    )
    lt = report.threshold.length_tau
    if lt is not None:
        inconclusive = report.inconclusive_heldout or {}
        st.caption(
            f"Length-aware τ(L) = {math.exp(lt.intercept):.3f} · L^{lt.slope:.3f} nats for L = {lt.L_min}–{lt.L_max} "
            f"scored tokens (the {alpha:g}-quantile regression of ln Z on ln L); the held-out FPR/FNR above are "
            f"τ(L)'s, the constant τ's are {_pct(report.fpr_heldout_constant)} / "
            f"{_pct(report.fnr_heldout_constant)}. Within the {lt.band_level:.0%} bootstrap band of τ(L), or outside "
            f"those lengths, a verdict is *inconclusive*: {_pct(inconclusive.get('grounded'))} of held-out "
            f"grounded and {_pct(inconclusive.get('memorized'))} of memorized rows here."
        )
    if report.rates_by_length:
        st.caption("Held-out rows by answer length (Wilson 95% intervals):")
        draw_length_rates(report.rates_by_length, float(alpha), key=keys.EVAL_CAL_LENGTH_FIG)
    if report.pac:
        draw_pac_table(report.pac)
    for warning in report.warnings:
        st.warning(escape_markdown(warning))
    cal_rows = set(report.threshold.extra.get("calibration_rows", []))
    st.plotly_chart(
        ef.calibration_figure(
            [r["repcs_score"] for r in records],
            [r["label"] for r in records],
            [r["row"] in cal_rows for r in records],
            report.tau,
        ),
        key=keys.EVAL_CALIBRATION_FIG,
    )
    if lt is not None and all(r.get("n_tokens") is not None for r in records):
        st.plotly_chart(
            ef.length_tau_figure(
                [r["repcs_score"] for r in records],
                [min(settings.score_window, int(r["n_tokens"])) for r in records],
                [r["label"] for r in records],
                lt,
                report.tau,
            ),
            key=keys.EVAL_LENGTH_TAU_FIG,
        )
    model = handle.info.name
    current, source = active_threshold(model)
    problems = adoption_problems(report, float(alpha))
    confirmed = True
    if problems:
        st.warning(
            "This τ does not hold up on the held-out rows: "
            + "; ".join(problems)
            + ". Using it for the whole app would change every page's verdict. Keep it for a look, or adopt it "
            "only deliberately.",
            icon=":material/warning:",
        )
        confirmed = st.checkbox(
            "I understand these held-out figures and still want this τ for the whole app", key=keys.EVAL_TAU_CONFIRM
        )
    left, mid, right = st.columns([1.3, 1, 1.2])
    left.button(
        "Use this τ for the whole app",
        type="secondary" if problems else "primary",
        key=keys.EVAL_USE_TAU,
        on_click=set_active_threshold,
        args=(model, report.threshold, report.threshold.source),
        disabled=model != spec.model or not confirmed,
        icon=":material/check:",
    )
    widgets.download(
        mid,
        "τ as JSON",
        report.threshold.to_json(),
        "threshold.json",
        key=keys.EVAL_TAU_JSON,
        help="Use it from the command line: python -m core run … --threshold-file threshold.json",
    )
    draw_reset_threshold(right, model, key=keys.EVAL_RESET_TAU)
    st.caption(
        "In force now: "
        + ("no τ" if current is None else f"τ = {current.tau:.3f} (T = {current.T})")
        + f" — {escape_markdown(source)}"
    )


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def draw_tau_setting() -> str:
    """The app-wide τ setting: the length-aware τ(L) with its inconclusive band (default) or the paper's constant
    τ; every page's verdict follows it (:func:`components.threshold_state.tau_mode`)."""
    return controls.choice(
        st.radio,
        "How τ is applied",
        keys.TAU_MODE,
        TAU_MODE_LABELS,
        default=DEFAULT_TAU_MODE,
        horizontal=True,
        help="Length-aware: τ(L) grows with the number L of scored answer tokens (Z sums one KL per token); a Z "
        "within the calibration's uncertainty of τ(L), or an answer shorter or longer than every calibration "
        "answer, is *Inconclusive*. RePCS (paper): one τ for every answer, Z < τ ⇒ recalled.",
    )


def draw_length_rates(rows: list[dict[str, Any]], alpha: float, *, key: str) -> None:
    """FPR/FNR per answer length for the constant τ and τ(L): the figure and the table."""
    st.plotly_chart(ef.length_rates_figure(rows, alpha), key=key)
    st.dataframe(ef.length_rates_frame(rows), hide_index=True, key=f"{key}.table")


def draw_length_rates_in_force(records: list[dict[str, Any]], model: str, T: int) -> None:
    """The τ in force (both calibrations: its τ(L) and its constant τ) on the scored rows, by answer length."""
    full, _ = session_threshold(model)
    if full is None:
        full, _ = threshold_for(model)
    report = length_report(records, full, T)
    if report is None:
        return
    with st.expander(
        "The τ in force on these rows, by answer length (constant τ and τ(L))", icon=":material/straighten:"
    ):
        st.caption(
            "Every scored row, none of them used to set the τ in force (unless they were its calibration rows). "
            "FPR = grounded rows flagged recalled, FNR = memorized rows not flagged, by the rule Z < τ (resp. "
            "τ(L)); the inconclusive columns are the shares τ(L)'s band or length range holds back."
        )
        draw_length_rates(report["rows"], float(full.alpha), key=keys.EVAL_LENGTH_FIG)


def adoption_problems(report: Any, alpha: float) -> list[str]:
    """Why a calibrated τ should not be adopted without a second thought (empty when its held-out figures are
    fine): no held-out grounded row, a held-out FPR above max(2α, α + 0.1), or a held-out FNR above 50 %."""
    problems = []
    if report.fpr_heldout is None:
        problems.append("no grounded row was held out, so its false-positive rate is unknown")
    elif report.fpr_heldout > max(2 * alpha, alpha + 0.1):
        problems.append(
            f"it flags {report.fpr_heldout:.0%} of held-out grounded rows as recalled (target α = {alpha:.0%})"
        )
    if report.fnr_heldout is not None and report.fnr_heldout > 0.5:
        problems.append(f"it misses {report.fnr_heldout:.0%} of the memorized rows")
    return problems


def pac_rows(pac: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per reading of γ (vocabulary, as Lemma III.3 uses it; realised token) with the PAC n for each
    reading of T (nominal; max / mean / median scored tokens), from :func:`core.evaluation.calibration.pac_table`."""
    names = {"vocabulary": "vocabulary (Lemma III.3)", "realised_token": "realised token only"}
    rows = []
    for g_name, gamma in pac["gamma"].items():
        row: dict[str, Any] = {"γ": names.get(g_name, g_name), "γ (nats)": "–" if gamma is None else f"{gamma:.2f}"}
        for t_name, t in pac["T"].items():
            n = pac["n"][g_name][t_name]
            label = f"n at T {t_name} ({'–' if t is None else f'{t:.3g}'})"
            row[label] = "–" if n is None else f"{n:,}"
        rows.append(row)
    return rows


def draw_pac_table(pac: dict[str, Any]) -> None:
    """The PAC n for each reading of γ and T, with one line saying what they are."""
    st.caption(
        "PAC n ≥ 8 γ² T Δ⁻² log(2/ε) for each reading of γ and T: Lemma III.3 bounds the log-ratio over every "
        "vocabulary entry in the KL (the realised answer token alone understates γ), and Z sums only the "
        "scored tokens L = min(T, answer length) — the effective T — not the nominal T."
    )
    st.dataframe(pac_rows(pac), hide_index=True)


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


def draw_conflict_tab(handle: ModelHandle) -> None:
    st.caption(
        "Each context contradicts a well-known fact. Which source does the answer repeat — the context's claim "
        "or the remembered fact? And how does each detector score these rows? There is no ground-truth label "
        "here: a model that follows the context *read* it; one that repeats the fact *recalled* it."
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
