"""Source attribution (SMA): which input units does the answer depend on, with the context and without it?

The page reads top to bottom like the UI: inputs and the SMA controls, the run (a progress bar over every
perturbed generation), the two unperturbed answers, the thresholds, the colored input text and the ADS bar
chart with the three-way labels, the perturbed samples, the faster context-sentence ablation, and the
exports. Runs and ablations are kept in this session (a :func:`~components.lru.session_lru` each): the same
inputs and settings show the stored run, and moving a threshold only relabels it. All maths lives in
:mod:`core.methods.sma`; the controls in :mod:`components.sma_controls`; all figures in
:mod:`figures.detectors`.
"""

from __future__ import annotations

from components import frame

frame.first_paint(
    "Source Attribution",
    heading="Source Attribution (SMA)",
    plain="Which words of the query and the passage does the answer depend on? The page hides random parts of the "
    "input, asks again many times, and sees which parts change the answer when they are missing.",
    precise="Random masks perturb the input units; every perturbed input is answered again and scored by length "
    "ratio and semantic similarity to the full answer (eq. 14); ridge regression turns masks and scores "
    "into an attribution β per unit (captum Lime + ridge). Done with the context (RAG on) and without "
    "(RAG off): ADS = β_on − β_off per unit.",
    citation="SMA: Sun et al. (2025), arXiv:2508.09105.",
)  # on screen while the imports below run

from components import prologue

early = prologue.begin(with_inputs=True)  # the example picker, the query and the context: light modules only

import json
import time
from typing import Any

import streamlit as st

from components import keys, sma_controls, state, widgets
from components.lru import SessionLRU, session_lru
from components.page import PageContext, open_page
from components.progress import StepTicker, estimate_text
from components.run import run_guarded
from components.sma_controls import LabelThresholds
from components.state import AppConfig
from components.stored_runs import run_or_show, start_hint
from components.text import escape_markdown
from core.engine.estimate import observe_run
from core.methods.sma import (
    LABELS,
    ContextAblation,
    SMAResult,
    SMASettings,
    run_context_ablation,
    run_sma,
    split_units,
)
from core.methods.work import ABLATION, SMA, ablation_done, ablation_planned, observe_fills, sma_done, sma_planned
from core.model.handle import ModelHandle
from figures import detectors as figs

MAX_RESULTS = 8
"""SMA runs (and, separately, context ablations) kept per browser session, as plain dicts."""

CAVEAT = (
    "SMA is a zero-gradient, perturbation-based estimate: β assumes the answer responds roughly linearly to "
    "keeping or perturbing each unit, and with N samples for L units it is noisy when N is not much larger "
    "than L. The labels depend on thresholds the paper fixes only in part (τ₁ = 0.1, τ₂ = −0.1; τ is not "
    "given), and a small model's answers shift for many reasons — read the labels as hints about where the "
    "answer's sensitivity moves when retrieval is switched on, not as proof of training-data membership."
)


def _count_units(page: PageContext, text: str, settings: SMASettings) -> int:
    """How many units (tokens, words or sentences) ``text`` splits into."""
    return len(split_units(text.strip(), settings.granularity, page.handle.tokenizer)) if text.strip() else 0


def planned_generations(page: PageContext, query: str, context: str, settings: SMASettings) -> tuple[int, int, int]:
    """``(query units, context units, answers generated)`` of an SMA run on these inputs (0 answers without a
    query)."""
    nq = _count_units(page, query, settings)
    nc = _count_units(page, context, settings) if settings.scope != "query" else 0
    return nq, nc, (2 + settings.generations(nq + nc) + settings.generations(nq)) if nq else 0


def run_estimate(page: PageContext, query: str, context: str, settings: SMASettings, nq: int, nc: int) -> str:
    """The planned run's wait: the unit costs for its work (:func:`core.methods.work.sma_planned`: its batches of
    answers and the prompts they read) × the ratio the last SMA runs took (else the unit costs alone)."""
    return estimate_text(page.handle, SMA, sma_planned(page.handle, query, context, settings, nq, nc))


def plan_line(page: PageContext, query: str, context: str, settings: SMASettings) -> str:
    """What the planned run generates and how long it will take (``""`` without a query)."""
    nq, nc, _ = planned_generations(page, query, context, settings)
    if not nq:
        return ""
    on, off = 1 + settings.generations(nq + nc), 1 + settings.generations(nq)
    return (
        f"{nq} query units" + (f" + {nc} context units" if nc else "") + f" · this run generates {on + off:,} "
        f"answers of up to {settings.max_new_tokens} tokens ({on:,} with the context, {off:,} without): "
        f"{run_estimate(page, query, context, settings, nq, nc)}."
    )


def draw_controls(page: PageContext, query: str, context: str) -> tuple[SMASettings, bool, Any]:
    """The SMA settings, the planned cost and the Run button; returns (settings, run clicked, the estimate's line,
    redrawn after a run)."""
    settings = sma_controls.draw_settings(page.config.settings.template)
    line = st.empty()
    plan = plan_line(page, query, context, settings)
    if plan:
        line.caption(plan)
        if planned_generations(page, query, context, settings)[2] > 2000:
            st.warning("That is a very long run on this machine; lower N, use coarser units, or choose Lime.")
    clicked = st.button("Run SMA", type="primary", key=keys.SMA_RUN, icon=":material/play_arrow:")
    return settings, clicked, line


def result_key(config: AppConfig, query: str, context: str, settings: SMASettings) -> str:
    """Cache key of an SMA run: the model, the inputs and every SMA setting (not the label thresholds)."""
    return json.dumps(
        [config.model_spec, config.revision, query.strip(), context.strip(), settings.to_dict()], ensure_ascii=False
    )


def stored_runs() -> SessionLRU[dict[str, Any]]:
    """The session's SMA runs by :func:`result_key` (plain dicts); the current one is the run shown last."""
    return session_lru(keys.SMA_RESULTS, MAX_RESULTS, current=keys.SMA_LAST)


def stored_ablations() -> SessionLRU[dict[str, Any]]:
    """The session's context ablations (plain dicts)."""
    return session_lru(keys.SMA_ABLATIONS, MAX_RESULTS)


def run_with_progress(handle: ModelHandle, query: str, context: str, settings: SMASettings) -> SMAResult | None:
    """Run SMA under a progress bar over every generation; ``None`` (after an error box) on failure. The run's
    time is recorded with the work it did (:func:`core.methods.work.sma_done`) for the next estimate."""
    ticker = StepTicker(
        st.progress(0.0, text="Starting…"), steps_per_unit=settings.max_new_tokens, unit_size=settings.batch_size
    )
    bar = ticker.bar

    def on_progress(done: int, total: int, stage: str) -> None:
        ticker.report(done, total, f"{stage}: {done:,} / {total:,} generations")

    def run() -> SMAResult:
        with ticker.listening():
            return run_sma(handle, query, context, settings, on_progress=on_progress)

    started = time.monotonic()
    result = run_guarded(run, log="SMA run failed", on_failure=lambda _: bar.empty())
    if result is None:
        return None
    generations = result.on.generations + result.off.generations + 2
    done, share = sma_done(handle, result)
    observe_run(handle, SMA, time.monotonic() - started, done)
    observe_fills(handle, SMA, share)
    bar.progress(1.0, text=f"Done: {generations:,} generations in {result.timings['total_s']:.1f} s")
    return result


def draw_reference_answers(result: SMAResult) -> None:
    """The two unperturbed answers (RAG on, RAG off)."""
    left, right = st.columns(2, gap="medium")
    with left:
        st.subheader("Answer with the context (RAG on)")
        widgets.show_answer(st, result.on.reference_answer)
    with right:
        st.subheader("Answer without it (RAG off)")
        widgets.show_answer(st, result.off.reference_answer)


def draw_thresholds() -> LabelThresholds:
    """τ, τ₁, τ₂ and which β the first tier tests."""
    st.subheader("Labels")
    thresholds = sma_controls.draw_thresholds()
    st.caption(
        "Rule (eqs. 19, 21): β_j ≥ τ → pretrained member; else non-member when min(τ₁, τ₂) ≤ ADS_j < max(τ₁, τ₂); "
        "else retrieved member. (The paper prints the band as τ₁ ≤ ADS < τ₂ with τ₁ = 0.1 > τ₂ = −0.1, an empty "
        "interval; the band between the two is the evident reading.)"
    )
    return thresholds


def draw_attribution(result: SMAResult, labels: list[str], thresholds: LabelThresholds, tag: str) -> None:
    """The label counts, the colored input text, the ADS bars and the per-unit table."""
    counts = {label: labels.count(label) for label in LABELS}
    cols = st.columns(4)
    cols[0].metric(
        "mean |ADS| over query units",
        f"{result.membership_score():.4f}",
        help="The detector score `sma` (higher = the attribution moves more when retrieval is toggled).",
    )
    for col, label in zip(cols[1:], LABELS):
        col.metric(label, counts[label])
    color = st.radio(
        "Color the text by",
        ["ads", "beta_on", "beta_off"],
        horizontal=True,
        key=keys.scoped(keys.SMA_COLOR, tag),
        format_func={"ads": "ADS", "beta_on": "β with RAG on", "beta_off": "β with RAG off"}.__getitem__,
    )
    st.plotly_chart(figs.ads_text_figure(result, labels, value=color), key=keys.scoped(keys.SMA_TEXT, tag, color))
    st.plotly_chart(
        figs.ads_bar_figure(result, labels, tau1=thresholds.tau1, tau2=thresholds.tau2),
        key=keys.scoped(keys.SMA_BARS, tag),
    )
    st.dataframe(
        figs.attribution_frame(result, labels),
        hide_index=True,
        column_config={
            c: st.column_config.NumberColumn(c, format="%.4f") for c in ("β RAG on", "β RAG off", "ADS = β_on − β_off")
        },
    )
    st.caption(CAVEAT)


def draw_samples(result: SMAResult) -> None:
    """Every perturbed input and its answer, for both runs."""
    texts = [u.text for u in result.units]
    with st.expander(
        f"The perturbed inputs and their answers ({len(result.on.samples)} with the context, "
        f"{len(result.off.samples)} without)"
    ):
        st.caption("mask: 1 = unit kept, 0 = perturbed, in unit order. score r = γ₁·length ratio + γ₂·similarity.")
        st.markdown("**RAG on**")
        st.dataframe(figs.samples_frame(result.on, texts), hide_index=True)
        st.markdown("**RAG off**")
        st.dataframe(figs.samples_frame(result.off, texts), hide_index=True)


def draw_context_ablation(page: PageContext, query: str, context: str, settings: SMASettings) -> None:
    """Each context sentence removed in turn (captum FeatureAblation): the run, its chart, table and CSV."""
    st.subheader("Faster comparison: remove each context sentence in turn")
    st.caption(
        "With the context on and the query intact, each sentence is deleted once and the answer is scored by its "
        "agreement with the full-context answer: γ₁·min(ρ, 1/ρ) + γ₂·similarity, ρ the length ratio (captum "
        "FeatureAblation over sentences: S + 2 generations). Δr ≥ 0: 0 means the answer did not change, a large "
        "Δr means the answer leaned on that sentence. It says which part of the "
        "context was read, not whether the fact was also known."
    )
    inputs_key = [page.config.model_spec, page.config.revision, query.strip(), context.strip()]
    scoring = [settings.max_new_tokens, settings.gamma_length, settings.gamma_similarity, settings.reference]
    key = json.dumps([*inputs_key, *scoring, settings.template], ensure_ascii=False)
    clicked = st.button("Run the context ablation", key=keys.SMA_ABLATE)
    n_sentences = len(split_units(context.strip(), "sentence")) if context.strip() else 0
    found = state.cached_result(page.config, query, context)  # this session's Dual Path run on these inputs
    steps = len(getattr(getattr(found, "retrieval", None), "token_ids", ()) or ()) or None
    planned = ablation_planned(page.handle, query, context, settings, n_sentences, steps)
    wait = estimate_text(page.handle, ABLATION, planned)
    st.caption(f"{n_sentences + 2} generations: {wait}.")
    if clicked:
        ticker = StepTicker(st.progress(0.0, text="Starting…"), steps_per_unit=settings.max_new_tokens)

        def run() -> ContextAblation:
            with ticker.listening():
                return run_context_ablation(
                    page.handle,
                    query,
                    context,
                    settings,
                    on_progress=lambda d, t, s="": ticker.report(d, t, f"{d} / {t} generations"),
                )

        started = time.monotonic()
        ablation = run_guarded(run, log="context ablation failed")
        if ablation is not None:
            done = ablation_done(page.handle, ablation, settings)
            observe_run(page.handle, ABLATION, time.monotonic() - started, done)
            stored_ablations().put(key, ablation.to_dict())
        ticker.bar.empty()
    data = stored_ablations().get(key)
    if data is None:
        return
    ablation = ContextAblation.from_dict(data)
    tag = keys.tag(key)
    st.caption("Answer with the full context:")
    widgets.show_answer(st, ablation.reference_answer)
    st.plotly_chart(figs.context_ablation_figure(ablation), key=keys.scoped(keys.SMA_ABLATION, tag))
    frame = figs.context_ablation_frame(ablation)
    st.dataframe(frame, hide_index=True)
    csv = frame.to_csv(index=False)
    widgets.download(
        st, "Download the context ablation (CSV)", csv, "sma_context_ablation.csv", key=keys.SMA_ABLATION_CSV
    )


def draw_export(result: SMAResult, labels: list[str], thresholds: dict[str, Any]) -> None:
    """Downloads (JSON run with labels and thresholds, CSV per unit), the prompts, the model and time."""
    st.subheader("Export")
    payload = {**result.to_dict(), "labels": labels, "thresholds": thresholds}
    c1, c2 = st.columns(2)
    widgets.download(
        c1,
        "Download the SMA run (JSON)",
        json.dumps(payload, ensure_ascii=False, indent=2),
        "sma.json",
        key=keys.SMA_JSON,
    )
    csv = figs.attribution_frame(result, labels).to_csv(index=False)
    widgets.download(c2, "Download the per-unit table (CSV)", csv, "sma_units.csv", key=keys.SMA_CSV)
    with st.expander("The unperturbed prompts"):
        st.caption("RAG on")
        st.code(result.on.prompt, language=None, wrap_lines=True)
        st.caption("RAG off")
        st.code(result.off.prompt, language=None, wrap_lines=True)
    st.caption(f"Model: {escape_markdown(result.model)} · {result.timings.get('total_s', 0.0):.1f} s")


def draw_run(
    page: PageContext, query: str, context: str, settings: SMASettings, run: bool
) -> tuple[str, SMAResult, bool] | None:
    """Run SMA when asked (unless these inputs and settings are stored), then pick the run to show.

    Returns:
        ``(shown key, result, fresh)``: this key's stored run, else the last one shown; ``None`` when there is
        none (or the run failed).
    """
    return run_or_show(
        stored_runs(),
        result_key(page.config, query, context, settings),
        SMAResult,
        run=run,
        compute=lambda: run_with_progress(page.handle, query, context, settings),
        button="Run SMA",
        nothing_yet=start_hint(
            "Run SMA", query, context, needs_context=True, extra="Or try the faster context ablation below."
        ),
    )


def main() -> None:
    page = open_page("Source Attribution", early=early)
    query, context = early.query, early.context
    settings, run, estimate_line = draw_controls(page, query, context)
    st.divider()
    found = draw_run(page, query, context, settings, run)
    if found is not None:
        shown, result, fresh = found
        if fresh:  # the next run's estimate, from the run just made
            estimate_line.caption(plan_line(page, query, context, settings))
        tag = keys.tag(shown)
        draw_reference_answers(result)
        thresholds = draw_thresholds()
        labels = result.labels(**thresholds.to_dict())
        draw_attribution(result, labels, thresholds, tag)
        draw_samples(result)
        draw_export(result, labels, thresholds.to_dict())
    st.divider()
    if query.strip() and context.strip():
        draw_context_ablation(page, query, context, settings)


main()
