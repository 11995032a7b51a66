"""Evaluate: every detector side by side on labeled probes; calibrate τ; robustness to logit noise.

The page reads top to bottom: the τ in force (and loading a saved one), the data (a bundled probe set or an
uploaded CSV), the detectors and run options, the run itself (progress with rows done / total and ETA, a Stop
button; rows already scored are kept), then five tabs: detectors (overlaid ROC curves, AUC with bootstrap 95%
CI, FPR@95%TPR, Precision@10, downloads), rows (per-row scores; open a row on the Dual Path page), calibration
(τ from chosen clean rows, held-out FPR/FNR, PAC n, "use this τ"), robustness (RePCS Table IV) and the
conflict set.

Scoring runs batch by batch in a :class:`core.evaluation.EvaluationJob` kept in ``st.session_state``, so a
Stop click (or a page switch) never loses scored rows and redrawing never re-runs the model. All maths lives
in :mod:`core.evaluation`; the run widgets in :mod:`components.evaluate_jobs`, the result tabs in
:mod:`components.evaluate_tabs`, their figures in :mod:`figures.evaluate`.
"""

from __future__ import annotations

from components import frame

frame.first_paint(
    "Evaluate",
    plain="How well does each detector tell memorized answers from read ones? Upload rows you have labeled (or "
    "use the bundled probes), run every detector on them, and compare; then set RePCS' threshold from "
    "rows you trust.",
    precise="Every detector scores the same labeled rows (positive class: memorized). Reported: ROC curves, AUC with "
    "a bootstrap 95% CI, FPR at 95% TPR and Precision@k (only when k < n). RePCS' τ is calibrated on clean "
    "rows as a quantile of their Z (optionally length-aware, τ(L)) and checked on held-out rows.",
    citation="Metrics computed with scikit-learn; RePCS calibration as in RePCS (2025) §IV-A, with the PAC sample "
    "size of §III-G.",
)  # on screen while the imports below run

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from components import controls, keys, prologue
from core.bundled_sets import bundled_sets
from core.public import current_policy, evaluate_run_tokens

MAX_UPLOAD_MB = 5
UPLOAD = "Upload a CSV"
FIRST_SAMPLE = 10
"""Rows a first run of a bundled set scores by default (a stratified sample, seed 42): about a minute with the default
detectors on a 2-core CPU (docs/performance.md#the-evaluate-pages-first-run), where every row of the bundled probe
set takes about 40 min. "Score all rows" or the number box runs more; an uploaded file starts at all its rows."""


@dataclass(frozen=True)
class DataChoice:
    """Section 1's choice, drawn before the page's libraries: the bundled sets, the chosen source, the upload."""

    sets: dict[str, Path]
    source: str
    upload: Any | None
    limit_mb: int


def draw_data_choice() -> DataChoice:
    """Bundled probe set or an uploaded CSV: the radio and the uploader (read and validated by :func:`load_data`)."""
    st.subheader("1 · Data")
    sets = bundled_sets()
    source = controls.choice(
        st.radio,
        "Rows to evaluate",
        keys.EVAL_SOURCE,
        [*sets, UPLOAD],
        horizontal=True,
        format_func=lambda c: c if c == UPLOAD else f"Bundled: {c}",
    )
    if not sets:
        st.info("No bundled probe set is installed (assets/probes/probes.csv). Upload a labeled CSV instead.")
    limit_mb = current_policy().limit("upload_mb", MAX_UPLOAD_MB)  # lower in public mode
    upload = None
    if source == UPLOAD:
        upload = st.file_uploader(
            f"Labeled CSV (columns query, context, label = memorized | grounded; up to {limit_mb} MiB)",
            type=["csv"],
            key=keys.EVAL_UPLOAD,
            max_upload_size=limit_mb,
            help="Every row is checked before anything runs; a bad row is reported by number and column and "
            "nothing from the file is kept.",
        )
    return DataChoice(sets, source, upload, limit_mb)


# The data choice before the page's libraries (light modules only); the τ in force names the model, so its line
# is filled once the model is loaded, above the data.
early = prologue.begin()
tau_line = st.container()
data_choice = draw_data_choice()

from components import evaluate_calibration as ec
from components import evaluate_tabs as et
from components import state
from components.evaluate_jobs import draw_run_controls, estimate_kind, job, run_job
from components.evaluate_tabs import detector_label, file_digest
from components.page import open_page
from components.ray_panel import draw_ray_panel
from components.text import escape_markdown
from components.threshold_state import active_threshold, set_active_threshold
from core.detectors import available, get
from core.detectors.registry import is_family_member
from core.engine import DEFAULT_BATCH_SIZE, calibration_mismatch
from core.engine.threshold import describe_in_force, load_threshold
from core.evaluation import (
    CONFIRMED_COLUMN,
    DEFAULT_SIGMAS,
    LABELED,
    DataError,
    JobSpec,
    LabeledRow,
    label_confirmed,
    parse_labeled_bytes,
    read_labeled_csv,
    stratified_sample,
)
from core.methods.baselines import DEFAULT_KS
from core.model.handle import ModelHandle

SIGMA_CHOICES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
K_CHOICES = (5, 10, 20, 30, 50)


@dataclass(frozen=True)
class RunOptions:
    """The run choices of section 2: detector names, noise σ values, rows per batch and the swap test."""

    detectors: tuple[str, ...]
    sigmas: tuple[float, ...]
    batch_size: int
    swap_test: bool = False


def draw_threshold_in_force(model: str) -> None:
    """The τ setting (τ(L) or the paper's constant), the τ in force for this model and where it comes from; load
    a τ saved earlier (``threshold.json``)."""
    ec.draw_tau_setting()
    current, source = active_threshold(model)
    with st.expander(f"Threshold in force: {describe_in_force(current)} — load a saved τ", icon=":material/tune:"):
        st.caption(f"Source: {escape_markdown(source)}")
        upload = st.file_uploader(
            "A τ saved from this page (τ as JSON) or by `python -m core calibrate --write-threshold`",
            type=["json"],
            key=keys.EVAL_TAU_UPLOAD,
            max_upload_size=1,
            help="Checked field by field (τ, T, model, …) before anything is applied.",
        )
        left, right = st.columns(2)
        ec.draw_reset_threshold(right, model, key=keys.EVAL_RESET_TAU_TOP)
        if upload is None:
            return
        try:
            loaded = load_threshold(upload.getvalue(), model)  # the CLI's loader: same checks, this model's τ only
        except ValueError as exc:
            st.error(f"The τ was not loaded. {escape_markdown(str(exc))}")
            return
        st.caption(
            f"{escape_markdown(upload.name)}: τ = {loaded.tau:.4f} nats · T = {loaded.T} · α = {loaded.alpha:g}"
            + ("" if loaded.fpr is None else f" · FPR {loaded.fpr:.1%}")
            + ("" if loaded.fnr is None else f" · FNR {loaded.fnr:.1%}")
            + f" · model {escape_markdown(loaded.model)} · {escape_markdown(loaded.source)}"
        )
        left.button(
            "Use the loaded τ for the whole app",
            type="primary",
            key=keys.EVAL_USE_LOADED_TAU,
            on_click=set_active_threshold,
            args=(model, loaded, f"loaded from {upload.name} ({loaded.source})"),
            icon=":material/check:",
        )


def load_data(choice: DataChoice) -> tuple[str, list[LabeledRow], str] | None:
    """The chosen rows (validated all or nothing), with their name and digest; ``None`` when there are none."""
    if choice.source == UPLOAD:
        upload = choice.upload
        if upload is None:
            return None
        data = upload.getvalue()
        try:
            rows = parse_labeled_bytes(data, name=upload.name, max_bytes=choice.limit_mb * 1024 * 1024)
        except DataError as exc:
            st.error(f"The file was not loaded. {escape_markdown(str(exc))}")
            return None
        for note in getattr(rows, "notes", ()):
            st.warning(escape_markdown(note))
        return upload.name, rows, file_digest(data)
    path = choice.sets[choice.source]
    try:
        rows = read_labeled_csv(path)
    except DataError as exc:
        st.error(f"The bundled set could not be read. {escape_markdown(str(exc))}")
        return None
    return path.name, rows, file_digest(path.read_bytes())


def draw_data_summary(name: str, rows: list[LabeledRow], *, bundled: bool = True) -> list[LabeledRow]:
    """Counts per label, the confirmed-label column if present, and the rows to score: a bundled set starts at a
    stratified sample of :data:`FIRST_SAMPLE` rows (a first click ends in about a minute), an uploaded file at all
    its rows; "Score all" or the number box changes it."""
    n_mem = sum(r.label == "memorized" for r in rows)
    confirmed = [label_confirmed(r.label, r.extra) for r in rows]
    line = f"{escape_markdown(name)}: {len(rows)} rows · {n_mem} memorized · {len(rows) - n_mem} grounded"
    if any(c is not None for c in confirmed):
        n_confirmed = sum(bool(c) for c in confirmed)
        line += f" · labels confirmed by the model's behavior (`{CONFIRMED_COLUMN}`): {n_confirmed}"
    st.caption(line)
    if n_mem in (0, len(rows)):
        only, missing = ("memorized", "grounded") if n_mem else ("grounded", "memorized")
        st.warning(
            f"Every row is labeled {only}: ROC curves, AUC and the calibration of τ need rows of both labels. "
            f"Add rows labeled {missing} (scoring still runs, the metrics stay empty)."
        )
    store = f"{keys.EVAL_SAMPLE}.{file_digest(name.encode())}.{len(rows)}"
    stored = state.stored(store)
    if stored is not None and not 1 <= int(stored) <= len(rows):
        state.set_stored(store, len(rows))
    most = current_policy().limit("evaluate_rows", len(rows))  # lower in public mode
    if most < len(rows):
        st.caption(f"This public app scores at most {most} rows per run: a stratified sample of the file.")
    first = min(FIRST_SAMPLE, most) if bundled else most
    column, button = st.columns([1, 2], vertical_alignment="bottom")
    with column:
        n = int(
            controls.number(
                "Rows to score (a stratified sample when fewer than all; seed 42)", store, first, (1, most, 10)
            )
            or first
        )
    if n < most:
        button.button(
            f"Score all {most} rows",
            key=keys.scoped(keys.EVAL_SAMPLE_ALL, store),
            on_click=state.set_stored,
            args=(store, most),
            help="A first run scores a small stratified sample, so it ends in about a minute; this scores every row "
            "(the estimate under Run says how long).",
        )
    return stratified_sample(rows, min(n, most))


# ----------------------------------------------------------------------------------------------------------
# Options


def draw_options() -> RunOptions:
    """Detectors (heavy ones off by default), Min-K% k values, noise σ values and the batch size."""
    st.subheader("2 · Detectors")
    ks = controls.several(
        "Min-K% / Min-K%++ k values (% of the lowest-probability context tokens)", keys.EVAL_KS, K_CHOICES, DEFAULT_KS
    )
    chosen = [f"{family}_{int(k)}" for k in ks for family in ("min_k", "min_kpp")]
    for name in chosen:  # family members are registered on first use: register the chosen k before listing
        get(name)
    registry = available()
    default = [n for n, d in registry.items() if d.is_cheap and (n in chosen or not is_family_member(n))]
    names = controls.several(
        "Detectors to compare (each adds a curve)",
        keys.EVAL_DETECTORS,
        list(registry),
        default,
        format_func=detector_label,
        filter_mode="contains",  # typing "sma" lists SMA only, not every label with an s, an m and an a in order
        help="Generation-based detectors (Self-Critique, CRM L1) and heavy ones (SMA: many masked generations "
        "per row) are off by default; they can take minutes per row on a CPU.",
    )
    slow = [n for n in names if registry[n].cost in ("generate", "heavy")]
    if slow:
        st.warning(f"{', '.join(slow)} run extra generations for every row: expect a long run.")
    left, right = st.columns(2)
    with left:
        sigmas = controls.several(
            "Logit-noise σ for the robustness tab (RePCS Table IV)", keys.EVAL_SIGMAS, SIGMA_CHOICES, DEFAULT_SIGMAS
        )
    with right:
        batch = controls.number(
            "Rows per batch",
            keys.EVAL_BATCH,
            DEFAULT_BATCH_SIZE,
            (1, 16),
            widget=st.slider,
            help="Rows generated together in one padded batch (the results are the same as one by one, up to "
            "float rounding).",
        )
    swap = bool(
        state.persistent(
            st.toggle,
            "Run the swap test on every row",
            keys.EVAL_SWAP,
            False,
            help="Replace each row's answer span in its context by an alternative the model proposes and answer "
            "again: does the answer follow the context? One more generation per row. On rows whose context agrees "
            "with memory it is the only behavior label there is; the results then compare the headline with it.",
        )
    )
    return RunOptions(tuple(names), tuple(sorted(float(s) for s in sigmas)), int(batch), swap)


# ----------------------------------------------------------------------------------------------------------
# Results


def draw_results(handle: ModelHandle) -> None:
    """The five result tabs over the main job's scored rows (optionally only the behaviorally confirmed ones)."""
    main_job = job(keys.EVAL_JOB_MAIN)
    records = main_job.scored_records() if main_job else []
    if records:
        has_flag = any(r.get(f"extra.{CONFIRMED_COLUMN}") not in (None, "") for r in records)
        confirmed_only = False
        if has_flag:
            confirmed_only = bool(
                state.persistent(
                    st.toggle,
                    "Only rows whose label the model's behavior confirms",
                    keys.EVAL_CONFIRMED,
                    False,
                    help=f"Uses the `{CONFIRMED_COLUMN}` column: memorized rows whose parametric answer (no context) "
                    "already contains the expected answer, and grounded rows whose parametric answer does not.",
                )
            )
        if confirmed_only:
            records = [r for r in records if label_confirmed(r["label"], r)]
        labels = {r["label"] for r in records}
        summary, rows = main_job.summary(records, confirmed_only) if records else ({"detectors": {}}, [])
        st.caption(
            f"Results for the set **{escape_markdown(main_job.spec.dataset or 'unnamed')}** · {len(records)} rows"
            + (" (only those whose label the model's behavior confirms)" if confirmed_only else "")
        )
    tabs = st.tabs(["Detectors", "Rows", "Calibration", "Robustness", "Conflict set"])
    with tabs[0]:
        if not records:
            st.info("Run an evaluation to compare the detectors.")
        elif len(labels) < 2:
            st.warning("The scored rows have only one label so far; ROC metrics need both.")
        else:
            et.draw_detectors_tab(main_job, summary, rows)
            ec.draw_length_rates_in_force(
                records, handle, main_job.spec.settings.template, main_job.spec.settings.score_window
            )
    with tabs[1]:
        if records:
            et.draw_rows_tab(main_job, rows)
        else:
            st.info("Per-row scores appear here after a run.")
    with tabs[2]:
        if records:
            ec.draw_calibration_tab(handle, main_job, records)
        else:
            st.info("Calibration uses the scored rows: run an evaluation first.")
    with tabs[3]:
        et.draw_robustness_tab(main_job, summary if records else None)
    with tabs[4]:
        et.draw_conflict_tab(handle, rows if records else None)


def main() -> None:
    page = open_page("Evaluate", early=early)
    data = load_data(data_choice)
    rows: list[LabeledRow] = []
    name, digest = "", ""
    if data is not None:
        name, all_rows, digest = data
        rows = draw_data_summary(name, all_rows, bundled=data_choice.source != UPLOAD)
    options = draw_options()
    handle, config = page.handle, page.config
    with tau_line:
        draw_threshold_in_force(handle.info.name)
    spec = JobSpec(
        dataset=name,
        digest=digest,
        rows_key=tuple(r.row for r in rows),
        model=handle.info.name,
        settings=config.settings,
        detectors=options.detectors,
        sigmas=options.sigmas,
        batch_size=options.batch_size,
        kind=LABELED,
        swap_test=options.swap_test,
    )
    st.session_state[keys.EVAL_CURRENT_SPEC] = spec
    st.subheader("3 · Run")
    s = config.settings
    st.caption(
        f"Settings from the sidebar: T = {s.score_window} answer tokens summed into Z, at most {s.max_new_tokens} "
        f"new tokens, template {escape_markdown(s.template)}. Rows are scored in padded batches: one generation "
        "and one teacher-forced pass per batch, as on the Dual Path page row by row."
    )
    threshold, _ = active_threshold(handle.info.name)
    for warning in calibration_mismatch(threshold, s, handle.tokenizer) if threshold is not None else []:
        st.caption(f"Verdicts: {escape_markdown(warning)}")
    if not options.detectors:
        st.info("Choose at least one detector.")
    elif rows:
        kind = estimate_kind(spec)  # the last runs like this one (same detectors and settings), when there are some
        st.caption(et.run_estimate(handle, len(rows), options.batch_size, s.max_new_tokens, options.detectors, kind))
        costs = [available()[n].cost for n in options.detectors if n in available()]
        budget = current_policy().run_budget(evaluate_run_tokens(len(rows), s.max_new_tokens, costs))
        (st.caption if budget.ok else st.error)(budget.message)  # the public per-run token budget (issue 25)
        rows = rows if budget.ok else []
    draw_run_controls(keys.EVAL_JOB_MAIN, spec, rows if options.detectors else [], run_label="Run the evaluation")
    draw_ray_panel(handle, keys.EVAL_JOB_MAIN, spec, rows if options.detectors else [])  # READ_OR_RECALL_RAY_ADDRESS
    run_job(handle, keys.EVAL_JOB_MAIN)
    st.divider()
    draw_results(handle)


main()
