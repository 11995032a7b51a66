"""The Evaluate page's calibration tab: RePCS' τ (constant or length-aware τ(L)) set on chosen clean rows,
checked on held-out rows, per answer length and against the PAC sample size, and adopted for the whole app.

The maths comes from :mod:`core.evaluation.calibration` and :mod:`core.evaluation.length_rates`; adopting a τ
whose held-out figures are poor is a deliberate, explained action (:func:`adoption_problems`).
"""

from __future__ import annotations

import math
from typing import Any

import streamlit as st

from components import controls, keys, widgets
from components.text import escape_markdown
from components.threshold_state import (
    active_threshold,
    clear_active_threshold,
    session_threshold,
    set_active_threshold,
    tau_mode,
)
from core.engine.calibration_record import ModelCalibration, record_for
from core.engine.tau_resolution import tau_in_force
from core.engine.threshold import (
    DEFAULT_TAU_MODE,
    TAU_LENGTH,
    TAU_MODE_LABELS,
    TAU_PAPER,
    describe_in_force,
)
from core.evaluation import (
    DEFAULT_ALPHA,
    DEFAULT_EPSILON,
    EvaluationJob,
    calibrate_records,
)
from core.evaluation.length_rates import length_report
from core.methods.repcs_length import min_rows_per_bucket
from core.model.handle import ModelHandle
from figures import calibration as cf


def draw_reset_threshold(container: Any, model: str, *, key: str) -> None:
    """The button that drops this session's τ for ``model`` (back to the bundled default; disabled without one)."""
    own, _ = session_threshold(model)
    container.button(
        "Back to the default τ", key=key, disabled=own is None, on_click=clear_active_threshold, args=(model,)
    )


def draw_calibration_tab(handle: ModelHandle, main_job: EvaluationJob, records: list[dict[str, Any]]) -> None:
    """The calibration tab: choose the rows and α, see τ (and τ(L)) checked on held-out rows, adopt it."""
    st.caption(
        "RePCS (Alg. 1, Thm III.4): τ is the α-quantile of Z over clean (grounded) calibration rows; a row is "
        "flagged memorized when Z < τ. The FPR/FNR below are measured on rows *not* used to set τ. The PAC n "
        "holds only under the paper's assumptions, with γ and Δ estimated from these rows."
    )
    grounded = [r["row"] for r in records if r["label"] == "grounded"]
    if not grounded:
        st.warning("No grounded row has been scored: τ needs clean rows.")
        return
    choice = _draw_choice(grounded)
    if choice is None:
        return
    alpha, epsilon, chosen, fraction = choice
    spec = main_job.spec
    settings = spec.settings

    def run_calibration(mode: str) -> Any:
        return calibrate_records(
            records,
            chosen,
            T=settings.score_window,
            model=spec.model,
            alpha=alpha,
            epsilon=epsilon,
            fraction=fraction,
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
    _draw_report(report, records, alpha, epsilon, settings.score_window)
    _draw_adoption(handle.info.name, spec.model, report, alpha, record_for(handle, settings.template))


def _draw_choice(grounded: list[int]) -> tuple[float, float, set[int] | None, float] | None:
    """α, ε and the calibration rows (picked rows, or a seeded share); ``None`` when no row is picked."""
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
            return None
    else:
        fraction = st.slider(
            "Share of grounded rows used to set τ (seed 42)", 0.1, 1.0, 0.5, 0.05, key=keys.EVAL_CAL_FRACTION
        )
    return float(alpha), float(epsilon), chosen, float(fraction)


def _draw_report(report: Any, records: list[dict[str, Any]], alpha: float, epsilon: float, window: int) -> None:
    """τ, its held-out FPR/FNR and PAC n, τ(L), the per-length rates, the warnings and both figures."""
    m = st.columns(4)
    m[0].metric(
        "τ (nats)",
        f"{report.tau:.3f}",
        help=f"{alpha:g}-quantile of Z over {report.n_calibration} clean rows (the paper's one constant τ)"
        + ("; the length-aware τ(L) is below" if report.threshold.length_tau is not None else ""),
    )
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
        f"T = {window} · ε = {epsilon:g} · calibration rows: {report.n_calibration}"
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
        draw_length_rates(report.rates_by_length, alpha, key=keys.EVAL_CAL_LENGTH_FIG)
    if report.pac:
        draw_pac_table(report.pac)
    for warning in report.warnings:
        st.warning(escape_markdown(warning))
    cal_rows = set(report.threshold.extra.get("calibration_rows", []))
    st.plotly_chart(
        cf.calibration_figure(
            [r["repcs_score"] for r in records],
            [r["label"] for r in records],
            [r["row"] in cal_rows for r in records],
            report.tau,
        ),
        key=keys.EVAL_CALIBRATION_FIG,
    )
    if lt is not None and all(r.get("n_tokens") is not None for r in records):
        st.plotly_chart(
            cf.length_tau_figure(
                [r["repcs_score"] for r in records],
                [min(window, int(r["n_tokens"])) for r in records],
                [r["label"] for r in records],
                lt,
                report.tau,
            ),
            key=keys.EVAL_LENGTH_TAU_FIG,
        )


def _draw_adoption(model: str, job_model: str, report: Any, alpha: float, record: ModelCalibration) -> None:
    """The button that makes this τ the app's (behind an explicit "use anyway" with the reasons when
    :func:`adoption_problems` finds any), the download, the reset, and which τ is in force now (the session's τ,
    else the one of ``record``, the model's calibration record: the same door a run's τ comes through)."""
    current, source = active_threshold(model, record)
    problems = adoption_problems(report, alpha)
    confirmed = True
    if problems:
        st.warning(
            "This τ does not hold up on the held-out rows, or was set on too few: "
            + "; ".join(problems)
            + ". Using it for the whole app would change every page's verdict. Keep it for a look, or adopt it "
            "only deliberately.",
            icon=":material/warning:",
        )
        confirmed = st.checkbox("Use this τ anyway: I have read why it may not hold (above)", key=keys.EVAL_TAU_CONFIRM)
    left, mid, right = st.columns([1.3, 1, 1.2])
    left.button(
        "Use this τ for the whole app",
        type="secondary" if problems else "primary",
        key=keys.EVAL_USE_TAU,
        on_click=set_active_threshold,
        args=(model, report.threshold, report.threshold.source),
        disabled=model != job_model or not confirmed,
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
    st.caption(f"In force now: {describe_in_force(current)} — {escape_markdown(source)}")


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
    st.plotly_chart(cf.length_rates_figure(rows, alpha), key=key)
    st.dataframe(cf.length_rates_frame(rows), hide_index=True, key=f"{key}.table")


def draw_length_rates_in_force(records: list[dict[str, Any]], handle: ModelHandle, template: str, T: int) -> None:
    """The τ in force (both calibrations: its τ(L) and its constant τ) on the scored rows, by answer length.

    The τ is the engine's one meaning of "the τ in force" (:func:`core.engine.threshold.tau_in_force`: this
    session's τ, else the model's default) taken whole, so both its calibrations can be compared; the caption
    says which one the session's τ setting applies (:func:`components.threshold_state.tau_mode`)."""
    model = handle.info.name
    record = record_for(handle, template)  # the model's default τ: its calibration record's (the one door)
    full, _ = tau_in_force(model, *session_threshold(model), mode=TAU_LENGTH, calibration=record)
    report = length_report(records, full, T)
    if report is None:
        return
    with st.expander(
        "The τ in force on these rows, by answer length (constant τ and τ(L))", icon=":material/straighten:"
    ):
        st.caption(
            "Every scored row, none of them used to set the τ in force (unless they were its calibration rows). "
            "FPR = grounded rows flagged recalled, FNR = memorized rows not flagged, by the rule Z < τ (resp. "
            "τ(L)); the inconclusive columns are the shares τ(L)'s band or length range holds back. The τ "
            f"setting applies: {TAU_MODE_LABELS[tau_mode()]}."
        )
        draw_length_rates(report["rows"], float(full.alpha), key=keys.EVAL_LENGTH_FIG)


def adoption_problems(report: Any, alpha: float) -> list[str]:
    """Why a calibrated τ should not be adopted without a second thought (empty when it is fine): fewer clean
    calibration rows than ⌈1/α⌉ (an α-quantile of fewer rows is the smallest value seen, not an estimate), no
    held-out grounded row, a held-out FPR above max(2α, α + 0.1), or a held-out FNR above 50 %."""
    problems = []
    need = min_rows_per_bucket(alpha)
    if report.n_calibration < need:
        problems.append(
            f"it was set on only {report.n_calibration} clean row{'s' if report.n_calibration != 1 else ''}, "
            f"fewer than the ⌈1/α⌉ = {need} an α = {alpha:g} quantile needs (with fewer, τ is just the smallest "
            "Z seen, not an estimate of the α-quantile)"
        )
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
