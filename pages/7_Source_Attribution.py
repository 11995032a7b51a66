"""Source attribution (SMA): which input units does the answer depend on, with the context and without it?

The page reads top to bottom like the UI: inputs and the SMA controls, the run (a progress bar over every
perturbed generation), the two unperturbed answers, the thresholds, the coloured input text and the ADS bar
chart with the three-way labels, the perturbed samples, the faster context-sentence ablation, and the
exports. All maths lives in ``core.sma``; all drawing in ``components``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import streamlit as st

from components import detector_figures as figs
from components import inputs, session
from components.text import escape_markdown
from core.model.loading import ModelHandle
from core.methods.sma.legacy import (
    DEFAULT_TAU,
    DEFAULT_TAU1,
    DEFAULT_TAU2,
    GRANULARITIES,
    LABELS,
    METHOD_LABELS,
    METHODS,
    ContextAblation,
    SMAResult,
    SMASettings,
    run_context_ablation,
    run_sma,
    split_units,
)

logger = logging.getLogger(__name__)
st.set_page_config(page_title="Source Attribution · Read or Recall", layout="wide")

RESULTS_KEY = "ror.sma.results"
LAST_KEY = "ror.sma.last"
ABLATIONS_KEY = "ror.sma.ablations"
MAX_RESULTS = 8
_DEFAULTS = SMASettings()

CAVEAT = (
    "SMA is a zero-gradient, perturbation-based estimate: β assumes the answer responds roughly linearly to "
    "keeping or perturbing each unit, and with N samples for L units it is noisy when N is not much larger "
    "than L. The labels depend on thresholds the paper fixes only in part (τ₁ = 0.1, τ₂ = −0.1; τ is not "
    "given), and a small model's answers shift for many reasons — read the labels as hints about where the "
    "answer's sensitivity moves when retrieval is switched on, not as proof of training-data membership."
)


def draw_header() -> None:
    st.title("Source Attribution (SMA)")
    st.caption(
        "Random masks perturb the input units; every perturbed input is answered again and scored by length "
        "ratio and semantic similarity (eq. 14); ridge regression turns masks and scores into an attribution β "
        "per unit (captum Lime + ridge). Done with the context (RAG on) and without (RAG off): "
        "ADS = β_on − β_off per unit (Sun et al., arXiv:2508.09105)."
    )


def draw_inputs() -> tuple[str, str]:
    inputs.example_picker()
    return inputs.query_and_context()


def draw_controls(config: session.AppConfig, handle: ModelHandle, query: str, context: str) -> tuple[SMASettings, bool]:
    """The SMA settings, the planned cost and the Run button."""
    c1, c2, c3 = st.columns(3, gap="medium")
    with c1:
        n_samples = session.persistent(
            st.number_input, "N — random masks (Shapley: permutations)", "sma.n_samples", _DEFAULTS.n_samples,
            min_value=1, max_value=1024, step=8, help="The paper finds accuracy stable from about 60–80 perturbations.",
        )
        granularity = session.persistent(
            st.radio, "Units", "sma.granularity", _DEFAULTS.granularity, options=list(GRANULARITIES), horizontal=True,
            help="token: the model's own tokens; word: whitespace-separated (the paper); sentence: for long inputs.",
        )
        scope = session.persistent(
            st.radio, "Perturb", "sma.scope", _DEFAULTS.scope, options=["query", "query+context"],
            format_func=lambda v: "the query only (the paper)" if v == "query" else "the query and the context",
            help="In the paper the auditor perturbs the user input; retrieval appends its passages intact. "
            "Perturbing the context too gives its units a β with RAG on (their β_off is 0: the RAG-off prompt "
            "does not contain them).",
        )
    with c2:
        method = session.persistent(
            st.selectbox, "Attribution method (captum)", "sma.method", _DEFAULTS.method, options=list(METHODS),
            format_func=METHOD_LABELS.__getitem__,
        )
        perturbation = session.persistent(
            st.selectbox, "A masked unit is", "sma.perturbation", _DEFAULTS.perturbation, options=["unicode", "remove"],
            format_func=lambda v: "altered: letters → Unicode look-alikes (the paper)" if v == "unicode" else "removed",
        )
        reference = session.persistent(
            st.selectbox, "Response score compares the new answer with", "sma.reference", _DEFAULTS.reference,
            options=["answer", "input"],
            format_func=lambda v: "the unperturbed answer ŷ (§IV-E)" if v == "answer" else "the perturbed input x̃ (eq. 14 as printed)",
        )
        max_new_tokens = session.persistent(
            st.number_input, "Max new tokens per answer", "sma.max_new_tokens", _DEFAULTS.max_new_tokens,
            min_value=1, max_value=256, step=4, help="Every perturbed input is answered again: keep this short.",
        )
    with c3:
        gamma_length = session.persistent(st.number_input, "γ₁ (length ratio)", "sma.gamma_length", _DEFAULTS.gamma_length,
                                          min_value=0.0, max_value=10.0, step=0.1)
        gamma_similarity = session.persistent(st.number_input, "γ₂ (semantic similarity)", "sma.gamma_similarity",
                                              _DEFAULTS.gamma_similarity, min_value=0.0, max_value=10.0, step=0.1)
        alpha = session.persistent(st.number_input, "Ridge α", "sma.alpha", _DEFAULTS.alpha, min_value=0.001,
                                   max_value=1000.0, step=0.5, format="%.3f")
        fit_intercept = session.persistent(
            st.checkbox, "Fit an intercept", "sma.fit_intercept", _DEFAULTS.fit_intercept,
            help="Eq. 16 as printed has none; without one every β also carries a share of the mean response.",
        )
        seed = session.persistent(st.number_input, "Seed", "sma.seed", _DEFAULTS.seed, min_value=0, max_value=2**31 - 1, step=1)
    settings = SMASettings(
        n_samples=int(n_samples), granularity=str(granularity), method=str(method), perturbation=str(perturbation),
        scope=str(scope), gamma_length=float(gamma_length), gamma_similarity=float(gamma_similarity),
        alpha=float(alpha), fit_intercept=bool(fit_intercept), reference=str(reference),
        max_new_tokens=int(max_new_tokens), template=config.settings.template, seed=int(seed),
    )
    nq = len(split_units(query.strip(), settings.granularity, handle.tokenizer)) if query.strip() else 0
    nc = len(split_units(context.strip(), settings.granularity, handle.tokenizer)) if context.strip() and scope != "query" else 0
    if nq:
        on, off = 1 + settings.generations(nq + nc), 1 + settings.generations(nq)
        st.caption(
            f"{nq} query units" + (f" + {nc} context units" if nc else "") + f" · this run generates {on + off:,} "
            f"answers of up to {settings.max_new_tokens} tokens ({on:,} with the context, {off:,} without)."
        )
        if on + off > 2000:
            st.warning("That is a very long run on this machine; lower N, use coarser units, or choose Lime.")
    clicked = st.button("Run SMA", type="primary", key="ror.sma.run", icon=":material/play_arrow:")
    return settings, clicked


def result_key(config: session.AppConfig, query: str, context: str, settings: SMASettings) -> str:
    return json.dumps([config.model_spec, config.revision, query.strip(), context.strip(), settings.to_dict()], ensure_ascii=False)


def _store(name: str) -> dict[str, dict[str, Any]]:
    return st.session_state.setdefault(name, {})


def _keep(name: str, key: str, value: dict[str, Any]) -> None:
    store = _store(name)
    store.pop(key, None)
    store[key] = value
    while len(store) > MAX_RESULTS:
        store.pop(next(iter(store)))


def run_with_progress(handle: ModelHandle, query: str, context: str, settings: SMASettings) -> SMAResult | None:
    bar = st.progress(0.0, text="Starting…")

    def on_progress(done: int, total: int, stage: str) -> None:
        bar.progress(min(1.0, done / max(1, total)), text=f"{stage}: {done:,} / {total:,} generations")

    try:
        result = run_sma(handle, query, context, settings, on_progress=on_progress)
    except ValueError as exc:
        bar.empty()
        st.error(str(exc))
        return None
    except Exception as exc:  # noqa: BLE001 - keep the page alive, details in the log
        logger.exception("SMA run failed")
        bar.empty()
        st.error(f"The run failed ({type(exc).__name__}). Details are in the server log.")
        return None
    bar.progress(1.0, text=f"Done: {result.on.generations + result.off.generations + 2:,} generations in {result.timings['total_s']:.1f} s")
    return result


def draw_reference_answers(result: SMAResult) -> None:
    left, right = st.columns(2, gap="medium")
    with left:
        st.subheader("Answer with the context (RAG on)")
        session.show_answer(st, result.on.reference_answer)
    with right:
        st.subheader("Answer without it (RAG off)")
        session.show_answer(st, result.off.reference_answer)


def draw_thresholds() -> tuple[float, float, float, str]:
    st.subheader("Labels")
    c1, c2, c3, c4 = st.columns(4)
    with c1:
        tau = session.persistent(st.slider, "τ (β ≥ τ → pretrained member)", "sma.tau", DEFAULT_TAU,
                                 min_value=-1.0, max_value=1.0, step=0.01, help="The paper gives no value.")
    with c2:
        tau1 = session.persistent(st.slider, "τ₁ (upper edge of the non-member band)", "sma.tau1", DEFAULT_TAU1,
                                  min_value=-1.0, max_value=1.0, step=0.01, help="The paper: τ₁ = 0.1.")
    with c3:
        tau2 = session.persistent(st.slider, "τ₂ (lower edge)", "sma.tau2", DEFAULT_TAU2,
                                  min_value=-1.0, max_value=1.0, step=0.01, help="The paper: τ₂ = −0.1.")
    with c4:
        first = session.persistent(
            st.radio, "β tested against τ", "sma.first_tier", "off", options=["off", "on"],
            format_func=lambda v: "β with RAG off (the model alone)" if v == "off" else "β with RAG on",
            help="The paper does not say which run's β the first tier uses.",
        )
    st.caption(
        "Rule (eqs. 19, 21): β_j ≥ τ → pretrained member; else non-member when min(τ₁, τ₂) ≤ ADS_j < max(τ₁, τ₂); "
        "else retrieved member. (The paper prints the band as τ₁ ≤ ADS < τ₂ with τ₁ = 0.1 > τ₂ = −0.1, an empty "
        "interval; the band between the two is the evident reading.)"
    )
    return float(tau), float(tau1), float(tau2), str(first)


def draw_attribution(result: SMAResult, labels: list[str], tau1: float, tau2: float, tag: str) -> None:
    counts = {label: labels.count(label) for label in LABELS}
    cols = st.columns(4)
    cols[0].metric("mean |ADS| over query units", f"{result.membership_score():.4f}",
                   help="The detector score `sma` (higher = the attribution moves more when retrieval is toggled).")
    for col, label in zip(cols[1:], LABELS):
        col.metric(label, counts[label])
    colour = st.radio("Colour the text by", ["ads", "beta_on", "beta_off"], horizontal=True, key=f"ror.sma.colour.{tag}",
                      format_func={"ads": "ADS", "beta_on": "β with RAG on", "beta_off": "β with RAG off"}.__getitem__)
    st.plotly_chart(figs.ads_text_figure(result, labels, value=colour), key=f"ror.sma.text.{tag}.{colour}")
    st.plotly_chart(figs.ads_bar_figure(result, labels, tau1=tau1, tau2=tau2), key=f"ror.sma.bars.{tag}")
    st.dataframe(
        figs.attribution_frame(result, labels), hide_index=True,
        column_config={c: st.column_config.NumberColumn(c, format="%.4f") for c in ("β RAG on", "β RAG off", "ADS = β_on − β_off")},
    )
    st.caption(CAVEAT)


def draw_samples(result: SMAResult) -> None:
    texts = [u.text for u in result.units]
    with st.expander(f"The perturbed inputs and their answers ({len(result.on.samples)} with the context, "
                     f"{len(result.off.samples)} without)"):
        st.caption("mask: 1 = unit kept, 0 = perturbed, in unit order. score r = γ₁·length ratio + γ₂·similarity.")
        st.markdown("**RAG on**")
        st.dataframe(figs.samples_frame(result.on, texts), hide_index=True)
        st.markdown("**RAG off**")
        st.dataframe(figs.samples_frame(result.off, texts), hide_index=True)


def draw_context_ablation(handle: ModelHandle, config: session.AppConfig, query: str, context: str, settings: SMASettings) -> None:
    st.subheader("Faster comparison: remove each context sentence in turn")
    st.caption(
        "With the context on and the query intact, each sentence is deleted once and the answer is scored "
        "against the full-context answer with the same response score (captum FeatureAblation over sentences: "
        "S + 2 generations). A large Δr means the answer leaned on that sentence. It says which part of the "
        "context was read, not whether the fact was also known."
    )
    key = json.dumps([config.model_spec, config.revision, query.strip(), context.strip(),
                      settings.max_new_tokens, settings.gamma_length, settings.gamma_similarity, settings.reference,
                      settings.template], ensure_ascii=False)
    if st.button("Run the context ablation", key="ror.sma.ablate"):
        bar = st.progress(0.0, text="Starting…")
        try:
            ablation = run_context_ablation(
                handle, query, context, settings,
                on_progress=lambda d, t, s: bar.progress(min(1.0, d / max(1, t)), text=f"{d} / {t} generations"),
            )
            _keep(ABLATIONS_KEY, key, ablation.to_dict())
        except ValueError as exc:
            st.error(str(exc))
        except Exception as exc:  # noqa: BLE001
            logger.exception("context ablation failed")
            st.error(f"The run failed ({type(exc).__name__}). Details are in the server log.")
        bar.empty()
    data = _store(ABLATIONS_KEY).get(key)
    if data is None:
        return
    ablation = _ablation_from_dict(data)
    tag = hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]
    st.caption("Answer with the full context:")
    session.show_answer(st, ablation.reference_answer)
    st.plotly_chart(figs.context_ablation_figure(ablation), key=f"ror.sma.ablation.{tag}")
    frame = figs.context_ablation_frame(ablation)
    st.dataframe(frame, hide_index=True)
    st.download_button("Download the context ablation (CSV)", data=frame.to_csv(index=False), file_name="sma_context_ablation.csv",
                       mime="text/csv", on_click="ignore", icon=":material/download:", key="ror.sma.dl.ablation")


def _ablation_from_dict(data: dict[str, Any]) -> ContextAblation:
    import numpy as np

    return ContextAblation(
        model=data["model"], query=data["query"], context=data["context"], settings=data["settings"],
        reference_answer=data["reference_answer"], sentences=list(data["sentences"]), full_score=float(data["full_score"]),
        scores=np.asarray(data["scores"], dtype=np.float64), delta=np.asarray(data["delta"], dtype=np.float64),
        answers=list(data["answers"]), similarities=np.asarray(data["similarities"], dtype=np.float64),
        length_ratios=np.asarray(data["length_ratios"], dtype=np.float64), seconds=float(data["seconds"]),
    )


def draw_export(result: SMAResult, labels: list[str], thresholds: dict[str, Any]) -> None:
    st.subheader("Export")
    payload = {**result.to_dict(), "labels": labels, "thresholds": thresholds}
    c1, c2 = st.columns(2)
    c1.download_button("Download the SMA run (JSON)", data=json.dumps(payload, ensure_ascii=False, indent=2),
                       file_name="sma.json", mime="application/json", on_click="ignore", icon=":material/download:",
                       key="ror.sma.dl.json")
    c2.download_button("Download the per-unit table (CSV)", data=figs.attribution_frame(result, labels).to_csv(index=False),
                       file_name="sma_units.csv", mime="text/csv", on_click="ignore", icon=":material/download:",
                       key="ror.sma.dl.csv")
    with st.expander("The unperturbed prompts"):
        st.caption("RAG on")
        st.code(result.on.prompt, language=None, wrap_lines=True)
        st.caption("RAG off")
        st.code(result.off.prompt, language=None, wrap_lines=True)
    st.caption(f"Model: {escape_markdown(result.model)} · {result.timings.get('total_s', 0.0):.1f} s")


def main() -> None:
    config = session.sidebar()
    handle = session.get_handle(config.model_spec, config.revision)
    session.draw_model_facts(handle)
    draw_header()
    query, context = draw_inputs()
    settings, run = draw_controls(config, handle, query, context)
    st.divider()
    key = result_key(config, query, context, settings)
    shown = key
    if run and key not in _store(RESULTS_KEY):
        result = run_with_progress(handle, query, context, settings)
        if result is not None:
            _keep(RESULTS_KEY, key, result.to_dict())
            st.session_state[LAST_KEY] = key
    elif run:
        st.toast("Same inputs and settings as an earlier run: showing its stored result.")
    if key in _store(RESULTS_KEY):
        st.session_state[LAST_KEY] = key
    else:
        shown = st.session_state.get(LAST_KEY, "")
    data = _store(RESULTS_KEY).get(shown)
    if data is None:
        st.info("Type or pick a query and a context, then press **Run SMA** (or try the faster context ablation below).")
    else:
        if shown != key:
            st.info("Showing the previous run: the inputs or settings have changed since. Press **Run SMA** to analyse them.")
        result = SMAResult.from_dict(data)
        tag = hashlib.sha1(shown.encode("utf-8")).hexdigest()[:12]
        draw_reference_answers(result)
        tau, tau1, tau2, first = draw_thresholds()
        labels = result.labels(tau=tau, tau1=tau1, tau2=tau2, first_tier=first)
        draw_attribution(result, labels, tau1, tau2, tag)
        draw_samples(result)
        draw_export(result, labels, {"tau": tau, "tau1": tau1, "tau2": tau2, "first_tier": first})
    st.divider()
    if query.strip() and context.strip():
        draw_context_ablation(handle, config, query, context, settings)


main()
