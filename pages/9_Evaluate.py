"""Evaluate: every detector side by side on labelled probes; calibrate τ; robustness to logit noise.

The page reads top to bottom: the τ in force (and loading a saved one), the data (a bundled probe set or an
uploaded CSV), the detectors and run options, the run itself (progress with rows done / total and ETA, a Stop
button; rows already scored are kept), then five tabs: detectors (overlaid ROC curves, AUC with bootstrap 95%
CI, FPR@95%TPR, Precision@10, downloads), rows (per-row scores; open a row on the Dual Path page), calibration (τ from chosen clean rows,
held-out FPR/FNR, PAC n, "use this τ"), robustness (RePCS Table IV) and the conflict set.

Scoring runs batch by batch and keeps each finished batch in ``st.session_state``, so a Stop click (or a page
switch) never loses scored rows and re-rendering never re-runs the model. All maths lives in
``core.evaluate`` / ``core.calibration`` / ``core.robustness``; figures in ``components.evaluate_figures``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import streamlit as st

from components import evaluate_figures as ef
from components import session
from components.text import escape_markdown
from components.threshold_state import active_threshold, clear_active_threshold, session_threshold, set_active_threshold
from core.methods.baselines import DEFAULT_KS
from core.engine.batch import DEFAULT_BATCH_SIZE, plan_batches
from core.evaluation.calibration import DEFAULT_ALPHA, DEFAULT_EPSILON, calibrate_records
from core.detectors import available, get
from core.engine.dual_path import DualPathSettings, calibration_mismatch, prepare_prompts
from core.evaluation.evaluate import (
    CONFIRMED_COLUMN,
    ConflictRow,
    DataError,
    LabelledRow,
    build_report,
    label_confirmed,
    parse_labelled_bytes,
    read_conflict_csv,
    read_labelled_csv,
    resolve_detectors,
    score_records,
    stratified_sample,
    summarize,
)
from core.model.loading import ModelHandle
from core.methods.repcs import Threshold
from core.evaluation.robustness import DEFAULT_SIGMAS

st.set_page_config(page_title="Evaluate · Read or Recall", layout="wide")
logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
PROBES_DIR = ROOT / "assets" / "probes"
CONFLICT_FILE = PROBES_DIR / "conflict.csv"
DUAL_PATH_PAGE = "pages/1_Dual_Path.py"
MAX_UPLOAD_MB = 5
MAIN, CONFLICT = "ror.eval.job.main", "ror.eval.job.conflict"
RUNNING, STOPPED, DONE, FAILED = "running", "stopped", "done", "failed"
COST_LABEL = {
    "free": "free (from the run)",
    "forward": "extra forward passes",
    "generate": "extra generations",
    "heavy": "heavy: many generations",
}
SIGMA_CHOICES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
K_CHOICES = (5, 10, 20, 30, 50)
UPLOAD = "Upload a CSV"


# ----------------------------------------------------------------------------------------------------------
# Data


def bundled_sets() -> dict[str, Path]:
    """Labelled CSVs shipped in assets/probes, ``probes.csv`` first (the conflict set is shown separately; a
    hand-written ``*_source.csv`` only when its built file, with the behavioural column, is missing)."""
    if not PROBES_DIR.is_dir():
        return {}
    files = sorted(PROBES_DIR.glob("*.csv"), key=lambda p: (p.name != "probes.csv", p.name))
    return {
        p.name: p for p in files
        if p.name != CONFLICT_FILE.name
        and not (p.stem.endswith("_source") and (p.parent / f"{p.stem[: -len('_source')]}.csv").is_file())
    }


def _digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:16]


def draw_header() -> None:
    st.title("Evaluate")
    st.caption(
        "Run every detector on the same labelled rows and compare them: ROC curves, AUC with a bootstrap 95% "
        "CI, FPR at 95% TPR and Precision@10 (positive class: memorized). Then calibrate RePCS' τ on clean rows "
        "and check it on held-out rows."
    )
    st.caption(
        "Labels are only as good as the probe set: *memorized* means \"a well-known fact the model was likely "
        "trained on\", *grounded* \"a fact that exists only in the context\". An AUC describes this model on "
        "these rows, not any single answer."
    )


def draw_threshold_in_force(model: str) -> None:
    """The τ in force for this model and where it comes from; load a τ saved earlier (``threshold.json``)."""
    current, source = active_threshold(model)
    in_force = "no τ (uncalibrated)" if current is None else f"τ = {current.tau:.3f} nats (T = {current.T})"
    with st.expander(f"Threshold in force: {in_force} — load a saved τ", icon=":material/tune:"):
        st.caption(f"Source: {escape_markdown(source)}")
        upload = st.file_uploader(
            "A τ saved from this page (τ as JSON) or by `python -m core calibrate --write-threshold`",
            type=["json"], key="ror.eval.tau_upload", max_upload_size=1,
            help="Checked field by field (τ, T, model, …) before anything is applied.",
        )
        left, right = st.columns(2)
        own, _ = session_threshold(model)
        right.button("Back to the default τ", key="ror.eval.reset_tau_top", disabled=own is None,
                     on_click=clear_active_threshold, args=(model,))
        if upload is None:
            return
        try:
            loaded = Threshold.from_json_bytes(upload.getvalue())
        except ValueError as exc:
            st.error(f"The τ was not loaded. {escape_markdown(str(exc))}")
            return
        st.caption(
            f"{escape_markdown(upload.name)}: τ = {loaded.tau:.4f} nats · T = {loaded.T} · α = {loaded.alpha:g}"
            + ("" if loaded.fpr is None else f" · FPR {loaded.fpr:.1%}")
            + ("" if loaded.fnr is None else f" · FNR {loaded.fnr:.1%}")
            + f" · model {escape_markdown(loaded.model)} · {escape_markdown(loaded.source)}"
        )
        if loaded.model != model:
            st.error(
                f"This τ was calibrated for {escape_markdown(loaded.model)}, not for the loaded model "
                f"({escape_markdown(model)}): a τ is specific to one model, so it is not applied."
            )
            return
        left.button("Use the loaded τ for the whole app", type="primary", key="ror.eval.use_loaded_tau",
                    on_click=set_active_threshold, args=(model, loaded, f"loaded from {upload.name} ({loaded.source})"),
                    icon=":material/check:")


def draw_data_source() -> tuple[str, list[LabelledRow], str] | None:
    """Bundled probe set or an uploaded CSV (validated all or nothing). Returns (name, rows, digest)."""
    st.subheader("1 · Data")
    sets = bundled_sets()
    choices = [*sets, UPLOAD]
    if session.stored("eval.source") not in choices:
        session.set_stored("eval.source", choices[0])
    source = session.persistent(
        st.radio, "Rows to evaluate", "eval.source", choices[0], options=choices, horizontal=True,
        format_func=lambda c: c if c == UPLOAD else f"Bundled: {c}",
    )
    if not sets:
        st.info("No bundled probe set is installed (assets/probes/probes.csv). Upload a labelled CSV instead.")
    if source == UPLOAD:
        upload = st.file_uploader(
            f"Labelled CSV (columns query, context, label = memorized | grounded; up to {MAX_UPLOAD_MB} MB)",
            type=["csv"], key="ror.eval.upload", max_upload_size=MAX_UPLOAD_MB,
            help="Every row is checked before anything runs; a bad row is reported by number and column and "
                 "nothing from the file is kept.",
        )
        if upload is None:
            return None
        data = upload.getvalue()
        try:
            rows = parse_labelled_bytes(data, name=upload.name, max_bytes=MAX_UPLOAD_MB * 1024 * 1024)
        except DataError as exc:
            st.error(f"The file was not loaded. {escape_markdown(str(exc))}")
            return None
        return upload.name, rows, _digest(data)
    path = sets[source]
    try:
        rows = read_labelled_csv(path)
    except DataError as exc:
        st.error(f"The bundled set could not be read. {escape_markdown(str(exc))}")
        return None
    return path.name, rows, _digest(path.read_bytes())


def draw_data_summary(name: str, rows: list[LabelledRow]) -> list[LabelledRow]:
    """Counts per label, the confirmed-label column if present, and an optional stratified sample."""
    n_mem = sum(r.label == "memorized" for r in rows)
    confirmed = [label_confirmed(r.label, r.extra) for r in rows]
    line = f"{escape_markdown(name)}: {len(rows)} rows · {n_mem} memorized · {len(rows) - n_mem} grounded"
    if any(c is not None for c in confirmed):
        line += f" · labels confirmed by the model's behaviour (`{CONFIRMED_COLUMN}`): {sum(bool(c) for c in confirmed)}"
    st.caption(line)
    store = f"eval.sample.{_digest(name.encode())}.{len(rows)}"
    stored = session.stored(store)
    if stored is not None and not 1 <= int(stored) <= len(rows):
        session.set_stored(store, len(rows))
    column, _ = st.columns([1, 2])
    with column:
        n = int(session.persistent(
            st.number_input, "Rows to score (a stratified sample when fewer than all; seed 42)", store,
            len(rows), min_value=1, max_value=len(rows), step=10,
        ) or len(rows))
    return stratified_sample(rows, min(n, len(rows)))


# ----------------------------------------------------------------------------------------------------------
# Options


def _detector_label(name: str) -> str:
    det = available().get(name)
    if det is None:
        return name
    return f"{name} — {det.label} · {COST_LABEL.get(det.cost, det.cost)}"


def draw_options() -> dict[str, Any]:
    """Detectors (heavy ones off by default), Min-K% k values, noise σ values and the batch size."""
    st.subheader("2 · Detectors")
    ks = session.persistent(
        st.multiselect, "Min-K% / Min-K%++ k values (% of the lowest-probability context tokens)", "eval.ks",
        list(DEFAULT_KS), options=list(K_CHOICES),
    )
    for k in ks:
        get(f"min_k_{int(k)}"), get(f"min_kpp_{int(k)}")
    registry = available()
    options = list(registry)
    default = [n for n, d in registry.items() if d.cost in ("free", "forward")
               and not (n.startswith("min_k") and int(n.rsplit("_", 1)[1]) not in ks)]
    stored = session.stored("eval.detectors")
    if stored is not None:
        session.set_stored("eval.detectors", [n for n in stored if n in options])
    names = session.persistent(
        st.multiselect, "Detectors to compare (each adds a curve)", "eval.detectors", default, options=options,
        format_func=_detector_label,
        help="Generation-based detectors (Self-Critique, CRM L1) and heavy ones (SMA: many masked generations "
             "per row) are off by default; they can take minutes per row on a CPU.",
    )
    slow = [n for n in names if registry[n].cost in ("generate", "heavy")]
    if slow:
        st.warning(f"{', '.join(slow)} run extra generations for every row: expect a long run.")
    left, right = st.columns(2)
    with left:
        sigmas = session.persistent(
            st.multiselect, "Logit-noise σ for the robustness tab (RePCS Table IV)", "eval.sigmas",
            list(DEFAULT_SIGMAS), options=list(SIGMA_CHOICES),
        )
    with right:
        batch = session.persistent(
            st.slider, "Rows per batch", "eval.batch", DEFAULT_BATCH_SIZE, min_value=1, max_value=16,
            help="Rows generated together in one padded batch (the results are the same as one by one, up to "
                 "float rounding).",
        )
    return {"detectors": list(names), "sigmas": sorted(float(s) for s in sigmas), "batch_size": int(batch)}


# ----------------------------------------------------------------------------------------------------------
# Jobs: scored batch by batch, each batch kept in session state as soon as it finishes


def _job(key: str) -> dict[str, Any] | None:
    return st.session_state.get(key)


def _any_running() -> bool:
    """Whether a job is running, or still finishing a batch after a Stop."""
    jobs = [j for j in (_job(MAIN), _job(CONFLICT)) if j]
    return any(j["status"] == RUNNING or j["claimed"] - j["finished"] for j in jobs)


def _spec(config: session.AppConfig, handle: ModelHandle, name: str, digest: str, rows: list, options: dict[str, Any]) -> dict[str, Any]:
    return {
        "dataset": name,
        "digest": digest,
        "rows_key": [r.row for r in rows],
        "model": handle.info.name,
        "settings": config.settings.to_dict(),
        **options,
    }


def _start(key: str, spec: dict[str, Any], rows: list) -> None:
    """Callback of the Run buttons: a fresh job (its batches are planned on the first run step).

    ``claimed``/``finished`` are sets of batch indices guarded by ``lock``: with ``runner.fastReruns`` a
    rerun starts a new script thread while the old one finishes the batch it is scoring, so two threads can
    share a job; each claims a different batch and the old one stores its rows before it stops.
    """
    st.session_state[key] = {
        "spec": spec, "rows": rows, "batches": None, "claimed": set(), "finished": set(), "records": {},
        "status": RUNNING, "seconds": 0.0, "error": None, "version": 0, "summary": None,
        "lock": threading.Lock(),
    }


def _set_status(key: str, status: str) -> None:
    job = _job(key)
    if job is not None:
        job["status"] = status


def _discard(key: str) -> None:
    st.session_state.pop(key, None)


def _progress_text(job: dict[str, Any]) -> str:
    total = len(job["rows"])
    done = len(job["records"])
    text = f"{done} / {total} rows scored"
    if done and job["seconds"] > 0:
        per_row = job["seconds"] / done
        text += f" · {per_row:.1f} s per row"
        if done < total and job["status"] == RUNNING:
            text += f" · about {_duration(per_row * (total - done))} left"
    return text


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _claim(job: dict[str, Any]) -> int | None:
    with job["lock"]:
        for b in range(len(job["batches"])):
            if b not in job["claimed"]:
                job["claimed"].add(b)
                return b
    return None


def _wait_in_flight(job: dict[str, Any], timeout_s: float = 900.0) -> None:
    """Wait (with a spinner) for a batch another script thread of this session is still scoring."""
    if not job["claimed"] - job["finished"]:
        return
    deadline = time.monotonic() + timeout_s
    with st.spinner("Finishing the batch in progress (its rows are kept)…"):
        while job["claimed"] - job["finished"] and time.monotonic() < deadline:
            time.sleep(0.25)


def _plan(handle: ModelHandle, job: dict[str, Any], settings: DualPathSettings) -> None:
    with job["lock"]:
        if job["batches"] is not None:
            return
        lengths = []
        for r in job["rows"]:
            try:
                lengths.append(len(prepare_prompts(handle, r.query, r.context, settings).retrieval.ids))
            except ValueError as exc:
                raise DataError(f"Row {r.row}, column 'context': {exc}") from exc
        job["batches"] = plan_batches(lengths, job["spec"]["batch_size"], settings.max_new_tokens)


def run_job(handle: ModelHandle, key: str) -> None:
    """Score the job's remaining batches with a progress bar (rows done / total, ETA).

    Each batch's rows are stored the moment it finishes, before any Streamlit call, so a Stop click (which
    interrupts the script at its next Streamlit call) never loses a scored row.
    """
    job = _job(key)
    if job is None:
        return
    total = len(job["rows"])
    if job["status"] != RUNNING:
        before = len(job["records"])
        _wait_in_flight(job)
        if len(job["records"]) != before:
            st.rerun()  # the batch that was in flight when Stop was clicked has landed: show its rows too
        st.progress(len(job["records"]) / max(1, total), text=_progress_text(job))
        return
    bar = st.progress(len(job["records"]) / max(1, total), text=_progress_text(job))
    spec = job["spec"]
    if handle.info.name != spec["model"]:
        job["status"] = STOPPED
        st.warning("The model in the sidebar differs from the one this run started with; switch back to resume.")
        return
    settings = DualPathSettings(**spec["settings"])
    try:
        detectors = resolve_detectors(spec["detectors"])
        if spec["kind"] == "conflict":
            detectors = {n: d for n, d in detectors.items() if not (d.needs_fit and d.features is not None)}
        _plan(handle, job, settings)
    except ValueError as exc:
        job["status"], job["error"] = FAILED, str(exc)
        st.error(f"Not run: {escape_markdown(str(exc))}")
        return
    threshold, source = active_threshold(handle.info.name)
    while job["status"] == RUNNING:
        b = _claim(job)
        if b is None:
            break
        batch = job["batches"][b]
        t0 = time.perf_counter()
        ok = False
        try:
            records = score_records(
                handle, [job["rows"][i] for i in batch], settings, detectors, threshold=threshold,
                threshold_source=source, noise_sigmas=spec["sigmas"], free_parametric=spec["kind"] == "conflict",
            )
            with job["lock"]:
                for i, rec in zip(batch, records):
                    job["records"][i] = rec
                job["seconds"] += time.perf_counter() - t0
                job["version"] += 1
            ok = True
        except Exception as exc:  # noqa: BLE001 - keep what was scored and say what failed
            logger.exception("evaluation batch failed")
            job["status"], job["error"] = FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            with job["lock"]:
                (job["finished"].add if ok else job["claimed"].discard)(b)
        bar.progress(len(job["records"]) / max(1, total), text=_progress_text(job))
    _wait_in_flight(job)
    if job["status"] == RUNNING and len(job["finished"]) == len(job["batches"]):
        job["status"] = DONE
    st.rerun()  # redraw the controls (Stop → Run) and the results from the stored rows


def draw_run_controls(key: str, spec: dict[str, Any], rows: list, *, run_label: str) -> None:
    """Run / Stop / Resume / Discard for one job, and a line saying what the shown results are for."""
    job = _job(key)
    running = job is not None and job["status"] == RUNNING
    cols = st.columns([1.5, 1.2, 1, 1, 2.3])
    cols[0].button(run_label, type="primary", key=f"{key}.run", disabled=_any_running() or not rows,
                   on_click=_start, args=(key, spec, rows), icon=":material/play_arrow:")
    cols[1].button("Stop scoring", key=f"{key}.stop", disabled=not running, on_click=_set_status, args=(key, STOPPED),
                   icon=":material/stop:", help="Rows already scored are kept.")
    resumable = job is not None and job["status"] in (STOPPED, FAILED) and len(job["records"]) < len(job["rows"])
    cols[2].button("Resume", key=f"{key}.resume", disabled=not resumable or _any_running(),
                   on_click=_set_status, args=(key, RUNNING), icon=":material/replay:")
    cols[3].button("Discard", key=f"{key}.discard", disabled=job is None or running, on_click=_discard, args=(key,),
                   icon=":material/delete:")
    if job is None:
        return
    js = job["spec"]
    if job["status"] == FAILED and job["error"]:
        st.error(f"The run stopped with an error: {escape_markdown(job['error'])}")
    elif job["status"] == STOPPED and len(job["records"]) < len(job["rows"]):
        st.info(f"Stopped: {len(job['records'])} of {len(job['rows'])} rows scored; the results below use them.")
    if {k: v for k, v in js.items() if k != "kind"} != {k: v for k, v in spec.items() if k != "kind"}:
        st.caption(
            f"The results below are for {escape_markdown(js['dataset'])} ({len(job['rows'])} rows, "
            f"T = {js['settings']['score_window']}, {len(js['detectors'])} detectors); the choices above have "
            "changed since — press the run button to start over with them."
        )


# ----------------------------------------------------------------------------------------------------------
# Results


def _records(job: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not job:
        return []
    return [job["records"][i] for i in sorted(job["records"])]


def _summary(job: dict[str, Any], records: list[dict[str, Any]], confirmed_only: bool) -> tuple[dict, list]:
    """Metrics for the job's scored rows, cached per (rows scored, filter) so re-renders are cheap."""
    cache_key = (job["version"], confirmed_only)
    if job.get("summary") and job["summary"][0] == cache_key:
        return job["summary"][1]
    detectors = resolve_detectors(job["spec"]["detectors"])
    result = summarize(records, detectors)
    job["summary"] = (cache_key, result)
    return result


def draw_results(handle: ModelHandle) -> None:
    job = _job(MAIN)
    records = _records(job)
    if records:
        has_flag = any(r.get(f"extra.{CONFIRMED_COLUMN}") not in (None, "") for r in records)
        confirmed_only = False
        if has_flag:
            confirmed_only = bool(session.persistent(
                st.toggle, "Only rows whose label the model's behaviour confirms", "eval.confirmed", False,
                help=f"Uses the `{CONFIRMED_COLUMN}` column: memorized rows whose parametric answer (no context) "
                     "already contains the expected answer, and grounded rows whose parametric answer does not.",
            ))
        if confirmed_only:
            records = [r for r in records if label_confirmed(r["label"], {CONFIRMED_COLUMN: r.get(f"extra.{CONFIRMED_COLUMN}", "")})]
        labels = {r["label"] for r in records}
        summary, rows = _summary(job, records, confirmed_only) if records else ({"detectors": {}, "robustness": None}, [])
    tabs = st.tabs(["Detectors", "Rows", "Calibration", "Robustness", "Conflict set"])
    with tabs[0]:
        if not records:
            st.info("Run an evaluation to compare the detectors.")
        elif len(labels) < 2:
            st.warning("The scored rows have only one label so far; ROC metrics need both.")
        else:
            draw_detectors_tab(handle, job, summary, rows)
    with tabs[1]:
        if records:
            draw_rows_tab(job, rows)
        else:
            st.info("Per-row scores appear here after a run.")
    with tabs[2]:
        if records:
            draw_calibration_tab(handle, job, records)
        else:
            st.info("Calibration uses the scored rows: run an evaluation first.")
    with tabs[3]:
        draw_robustness_tab(job, summary if records else None)
    with tabs[4]:
        draw_conflict_tab(handle)


def draw_detectors_tab(handle: ModelHandle, job: dict[str, Any], summary: dict, rows: list) -> None:
    st.caption(
        "Each detector's score is oriented so that higher = more likely memorised (e.g. −Z for RePCS). Fitted "
        "detectors are scored out of fold (stratified 5-fold, seed 42): no row is scored by a model that saw "
        "its label. The CI is a percentile bootstrap over rows (1,000 resamples, seed 42)."
    )
    detectors = summary["detectors"]
    st.plotly_chart(ef.roc_figure(detectors), key="ror.eval.roc")
    table = ef.metrics_table(detectors)
    st.dataframe(
        table, hide_index=True, key="ror.eval.metrics",
        column_config={c: st.column_config.NumberColumn(format="%.3f")
                       for c in ("AUC", "AUC 95% CI low", "AUC 95% CI high", "FPR @ 95% TPR", "Precision@10")},
    )
    spec = job["spec"]
    report = build_report(spec["model"], DualPathSettings(**spec["settings"]), *active_threshold(spec["model"]),
                          summary, rows)
    report["dataset"] = spec["dataset"]
    left, right, _ = st.columns([1, 1, 3])
    left.download_button("Metrics (CSV)", table.to_csv(index=False), file_name="evaluation_metrics.csv",
                         mime="text/csv", key="ror.eval.dl_csv", on_click="ignore", icon=":material/download:")
    right.download_button("Full report (JSON)", json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False),
                          file_name="evaluation.json", mime="application/json", key="ror.eval.dl_json",
                          on_click="ignore", icon=":material/download:")


def _open_row(record: dict[str, Any]) -> None:
    session.set_inputs(record["query"], record["context"])
    session.request_run()
    st.switch_page(DUAL_PATH_PAGE)


def draw_rows_tab(job: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    names = job["spec"]["detectors"]
    frame = ef.rows_table(rows, names)
    st.caption("Raw scores in each detector's own units (see its description). Select a row to open it.")
    event = st.dataframe(frame, hide_index=True, key="ror.eval.rows", on_select="rerun", selection_mode="single-row")
    picked = list(getattr(getattr(event, "selection", None), "rows", []) or [])
    by_row = {r["row"]: r for r in rows}
    if picked:
        number = int(frame.iloc[picked[0]]["row"])
    else:
        number = st.selectbox("Row to open", list(by_row), key="ror.eval.open_row",
                              format_func=lambda n: f"row {n} · {by_row[n]['label']} · {by_row[n]['query'][:70]}")
    left, right, _ = st.columns([2, 1, 2])
    if number is not None and left.button(f"Open row {number} on the Dual Path page", key="ror.eval.open",
                                          icon=":material/open_in_new:"):
        _open_row(by_row[number])
    right.download_button("Rows (CSV)", frame.to_csv(index=False), file_name="evaluation_rows.csv", mime="text/csv",
                          key="ror.eval.dl_rows", on_click="ignore", icon=":material/download:")


def draw_calibration_tab(handle: ModelHandle, job: dict[str, Any], records: list[dict[str, Any]]) -> None:
    st.caption(
        "RePCS (Alg. 1, Thm III.4): τ is the α-quantile of Z over clean (grounded) calibration rows; a row is "
        "flagged memorised when Z < τ. The FPR/FNR below are measured on rows *not* used to set τ. The PAC n "
        "holds only under the paper's assumptions, with γ and Δ estimated from these rows."
    )
    spec = job["spec"]
    grounded = [r["row"] for r in records if r["label"] == "grounded"]
    if not grounded:
        st.warning("No grounded row has been scored: τ needs clean rows.")
        return
    c1, c2, c3 = st.columns(3)
    alpha = c1.number_input("Target false-positive rate α", 0.001, 0.5, DEFAULT_ALPHA, step=0.01, format="%.3f",
                            key="ror.eval.alpha")
    epsilon = c2.number_input("ε (PAC confidence / FNR target)", 0.001, 0.5, DEFAULT_EPSILON, step=0.01,
                              format="%.3f", key="ror.eval.epsilon")
    mode = c3.radio("Calibration rows", ["A random share of the grounded rows", "Rows I pick"],
                    key="ror.eval.cal_mode")
    chosen: set[int] | None = None
    fraction = 0.5
    if mode == "Rows I pick":
        chosen = set(st.multiselect("Grounded rows used to set τ (the rest are held out)", grounded,
                                    default=grounded[: max(1, len(grounded) // 2)], key="ror.eval.cal_rows"))
        if not chosen:
            st.info("Pick at least one grounded row.")
            return
    else:
        fraction = st.slider("Share of grounded rows used to set τ (seed 42)", 0.1, 1.0, 0.5, 0.05,
                             key="ror.eval.cal_fraction")
    settings = spec["settings"]
    try:
        report = calibrate_records(
            records, chosen, T=int(settings["score_window"]), model=spec["model"], alpha=float(alpha),
            epsilon=float(epsilon), fraction=float(fraction), template=settings.get("template"),
            source=f"calibrated on the Evaluate page ({spec['dataset']})",
        )
    except ValueError as exc:
        st.error(escape_markdown(str(exc)))
        return
    m = st.columns(4)
    m[0].metric("τ (nats)", f"{report.tau:.3f}", help=f"{alpha:g}-quantile of Z over {report.n_calibration} clean rows")
    m[1].metric("Held-out FPR", "–" if report.fpr_heldout is None else f"{report.fpr_heldout:.1%}",
                help=f"grounded rows flagged, of {report.n_heldout_clean} held out (target α = {alpha:g})")
    m[2].metric("Held-out FNR", "–" if report.fnr_heldout is None else f"{report.fnr_heldout:.1%}",
                help=f"memorized rows missed, of {report.n_heldout_memorized}")
    m[3].metric("PAC n", "–" if report.n_required is None else f"{report.n_required:,}",
                help="n ≥ 8 γ² T Δ⁻² log(2/ε)")
    st.caption(
        f"γ̂ = {report.gamma:.3f} nats (largest per-token |log P_rag − log P_para| in any row) · "
        f"Δ̂ = {'–' if report.delta is None else f'{report.delta:.3f}'} nats (mean Z grounded − mean Z memorized) · "
        f"T = {settings['score_window']} · ε = {epsilon:g} · calibration rows: {report.n_calibration}"
    )
    for warning in report.warnings:
        st.warning(escape_markdown(warning))
    cal_rows = set(report.threshold.extra.get("calibration_rows", []))
    st.plotly_chart(
        ef.calibration_figure([r["repcs_score"] for r in records], [r["label"] for r in records],
                              [r["row"] in cal_rows for r in records], report.tau),
        key="ror.eval.calibration_fig",
    )
    model = handle.info.name
    current, source = active_threshold(model)
    left, mid, right = st.columns([1.3, 1, 1.2])
    left.button("Use this τ for the whole app", type="primary", key="ror.eval.use_tau",
                on_click=set_active_threshold, args=(model, report.threshold, report.threshold.source),
                disabled=model != spec["model"], icon=":material/check:")
    mid.download_button("τ as JSON", report.threshold.to_json(), file_name="threshold.json", mime="application/json",
                        key="ror.eval.dl_tau", on_click="ignore", icon=":material/download:",
                        help="Use it from the command line: python -m core run … --threshold-file threshold.json")
    own, _ = session_threshold(model)
    right.button("Back to the default τ", key="ror.eval.reset_tau", disabled=own is None,
                 on_click=clear_active_threshold, args=(model,))
    st.caption(
        "In force now: " + ("no τ" if current is None else f"τ = {current.tau:.3f} (T = {current.T})")
        + f" — {escape_markdown(source)}"
    )


def draw_robustness_tab(job: dict[str, Any] | None, summary: dict | None) -> None:
    st.caption(
        "RePCS §V, Table IV: Gaussian noise of standard deviation σ is added to the logits of both paths "
        "before the softmax and the KL; AUC per σ shows how much of the separation survives. The same noise "
        "draw per row is scaled by every σ. The paper's numbers (dashed) come from its own data and models."
    )
    table = (summary or {}).get("robustness")
    if not table:
        if job and not job["spec"]["sigmas"]:
            st.info("Choose σ values before running to get this table.")
        else:
            st.info("Needs scored rows of both labels (with σ values chosen before the run).")
        return
    st.plotly_chart(ef.robustness_figure(table), key="ror.eval.robustness")
    st.dataframe(ef.robustness_frame(table), hide_index=True, key="ror.eval.robustness_table")


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
    main_job = _job(MAIN)
    spec = st.session_state.get("ror.eval.current_spec")
    if spec is None:
        st.info("Choose detectors above first.")
        return
    conflict_spec = {**spec, "dataset": CONFLICT_FILE.name, "digest": _digest(CONFLICT_FILE.read_bytes()),
                     "rows_key": [r.row for r in rows], "kind": "conflict", "sigmas": []}
    st.caption(f"{len(rows)} rows. Both paths answer freely, so this costs one more generation per row.")
    draw_run_controls(CONFLICT, conflict_spec, rows, run_label="Score the conflict set")
    run_job(handle, CONFLICT)
    job = _job(CONFLICT)
    records = _records(job)
    if not records:
        return
    st.dataframe(ef.conflict_counts(records), hide_index=True, key="ror.eval.conflict_counts")
    names = [n for n in job["spec"]["detectors"] if any(r["scores"].get(n) is not None for r in records)]
    if names:
        name = st.selectbox("Detector", names, key="ror.eval.conflict_detector", format_func=_detector_label)
        det = available().get(name)
        st.plotly_chart(ef.conflict_score_figure(records, name, det.label if det else name),
                        key="ror.eval.conflict_fig")
    frame = ef.rows_table(records, names)
    st.dataframe(frame, hide_index=True, key="ror.eval.conflict_rows")
    st.download_button("Conflict rows (CSV)", frame.to_csv(index=False), file_name="conflict_rows.csv",
                       mime="text/csv", key="ror.eval.dl_conflict", on_click="ignore", icon=":material/download:")
    if main_job is None:
        st.caption("Run the main evaluation too to compare these scores with the labelled rows.")


def main() -> None:
    config = session.sidebar()
    handle = session.get_handle(config.model_spec, config.revision)
    session.draw_model_facts(handle)
    draw_header()
    draw_threshold_in_force(handle.info.name)
    data = draw_data_source()
    rows: list[LabelledRow] = []
    name, digest = "", ""
    if data is not None:
        name, all_rows, digest = data
        rows = draw_data_summary(name, all_rows)
    options = draw_options()
    spec = _spec(config, handle, name, digest, rows, options)
    spec["kind"] = "labelled"
    st.session_state["ror.eval.current_spec"] = spec
    st.subheader("3 · Run")
    s = config.settings
    st.caption(
        f"Settings from the sidebar: T = {s.score_window} answer tokens summed into Z, at most {s.max_new_tokens} "
        f"new tokens, template {escape_markdown(s.template)}. Rows are scored in padded batches: one generation "
        "and one teacher-forced pass per batch, as on the Dual Path page row by row."
    )
    threshold, _ = active_threshold(handle.info.name)
    for warning in calibration_mismatch(threshold, s) if threshold is not None else []:
        st.caption(f"Verdicts: {escape_markdown(warning)}")
    if not options["detectors"]:
        st.info("Choose at least one detector.")
    draw_run_controls(MAIN, spec, rows if options["detectors"] else [], run_label="Run the evaluation")
    run_job(handle, MAIN)
    st.divider()
    draw_results(handle)


main()
