"""RADAR — is the model recalling or reasoning on this prompt? (RADAR 2025)

The page reads as the steps a user goes through: pick the prompt (the current query, optionally after its
context), see the ensemble's recall probability with RDS and RCI, the per-layer confidence and entropy
trajectories, the 37 features grouped as in the paper's appendix D, the per-head attention entropies, and
how well the classifier does on the bundled test set for this model next to the paper's Table 1. All maths
lives in ``core.methods.radar``; all figures in ``figures.radar``.
"""

from __future__ import annotations

from components import frame

frame.first_paint(
    "RADAR",
    heading="RADAR: recall or reasoning?",
    plain="Does the model treat this question as something it simply remembers, or as something it has to work "
    "out? RADAR guesses from how the model's layers behave while it reads the question.",
    precise="RADAR (Recall vs. Reasoning Detection through Activation Representation) reads 37 features off one "
    "forward pass over the prompt — 16 from the per-layer logit-lens confidence and entropy of the next "
    "token, 21 from attention entropies and hidden-state statistics — and a soft-vote ensemble "
    "(random forest, gradient boosting, SVM, logistic regression) says whether the model is recalling or "
    "reasoning.",
    citation="RADAR (2025) §2–§3 and appendix D.",
)  # on screen while the imports below run

import streamlit as st

from components import controls, inputs, keys, prologue, state

SOURCE_QUERY = "query"
SOURCE_CONTEXT = "context"
_SOURCES = {
    SOURCE_QUERY: "The query alone (default: the model's own recall vs reasoning)",
    SOURCE_CONTEXT: "The context, a blank line, then the query",
}


def typed_prompt() -> tuple[str, str]:
    """The shared inputs, for a session with no run to read (RADAR then reads the query typed here)."""
    st.info("No run yet in this session: RADAR reads the query typed below (after a Dual Path run, that run).")
    with st.expander("Change the prompt", expanded=not state.current_inputs()[0].strip()):
        return inputs.draw_inputs()


# The inputs before the page's libraries (light modules only): a session with no run types its prompt here at
# once; after a run, its query and context take this place once the model that made it is known.
early = prologue.begin()
prompt_place = st.container()
with prompt_place:
    typed = None if len(state.results()) else typed_prompt()
source = controls.choice(
    st.radio,
    "Text analyzed",
    keys.RADAR_SOURCE,
    _SOURCES,
    horizontal=True,
    help="RADAR is about the model's own knowledge, so by default the context is left out. The prompt is "
    "fed as raw text (no chat template), as the paper feeds its completion prompts.",
)

import json
from typing import Any

from components import panels, prefetch, widgets
from components.page import PageContext, open_page
from components.text import escape_markdown, plain_message
from core.engine.estimate import describe_estimate, estimate
from core.methods import radar
from core.model.handle import ModelHandle
from figures import radar as rf

CAVEAT = (
    "RADAR classifies the model's internal signature while it reads the prompt (one forward pass, no answer "
    "generated) with an ensemble trained on only 30 labeled prompts. A recall-like signature on a "
    "reasoning-type prompt is a hint of contamination, not proof: RADAR never sees the training data, and the "
    "paper's 93 % was measured on DialoGPT-medium with its own prompt sets."
)


# ----------------------------------------------------------------------------------------------------------
# Cached work (shared by sessions; the model never runs twice for the same prompt; nothing is fitted here)


@st.cache_resource(show_spinner="One instrumented forward pass over the prompt…", max_entries=128)
def _analysis(
    model_key: str,
    text: str,
    digest: str,
    _handle: ModelHandle,
    _table: radar.FeatureTable | None,
    _ready: radar.RadarAnalysis | None = None,
) -> radar.RadarAnalysis:
    """One instrumented forward pass over ``text``: its trace, its 37 features and (with a table) the prediction
    (``_ready``: the same analysis, computed after the run by :mod:`components.prefetch`)."""
    return _ready if _ready is not None else radar.analyze_with_table(_handle, text, _table)


def _digest(table: radar.FeatureTable | None) -> str:
    """The cache key part that changes with the feature table."""
    return "none" if table is None else radar.table_digest(table)


def _report(handle: ModelHandle, table: radar.FeatureTable | None) -> dict[str, Any] | None:
    """The stored test-set report of the table (the embedded model's ships with the app; another model's is
    computed once per server and kept in the user cache)."""
    if table is None:
        return None
    with st.spinner("Fitting the ensemble and scoring the 100 test prompts (once for this model)…"):
        return radar.evaluation_for(handle, table)


# ----------------------------------------------------------------------------------------------------------
# The steps


def draw_prompt(page: PageContext) -> str:
    """The last run's query and context, as on every other analysis page (the inputs, drawn before the page's
    imports, only before any run or when the run came from another model), then the exact text analyzed."""
    if typed is not None:
        query, context = typed
    else:
        with prompt_place:
            result = page.last_result()
            if result is not None:
                panels.draw_run_context(result)
                query, context = result.query, result.context
            else:
                query, context = typed_prompt()
    if source == SOURCE_CONTEXT and not context.strip():
        st.warning("There is no context: analyzing the query alone.")
    text = radar.radar_prompt(query, context if source == SOURCE_CONTEXT else None)
    if text:
        st.caption("Exact text analyzed")
        st.code(text, language=None, wrap_lines=True)
    return text


def draw_model_features(handle: ModelHandle) -> radar.FeatureTable | None:
    """The model's features of the bundled sets: shipped (embedded), cached, or computed on request."""
    table = radar.cached_feature_table(handle)
    if table is not None:
        return table
    st.info(
        "The classifier is trained on this model's own features of the 30 bundled training prompts, and "
        "evaluated on the 100 test prompts. They have not been extracted for this model yet (one forward pass "
        "per prompt, then cached on disk). Until then the page shows the features but no prediction."
    )
    clicked = st.button(
        "Extract the features of the 130 bundled prompts for this model",
        type="primary",
        key=keys.RADAR_EXTRACT,
        icon=":material/memory:",
    )
    st.caption(f"130 forward passes: {describe_estimate(estimate(handle, forwards=130))}.")
    if clicked:
        bar = st.progress(0.0, text="Extracting RADAR features…")

        def progress(done: int, total: int) -> None:
            bar.progress(done / total, text=f"Extracting RADAR features… {done} / {total} prompts")

        try:
            table = radar.feature_table_for(handle, compute=True, progress=progress)
        except ValueError as exc:
            st.error(plain_message(str(exc)))
            return None
        bar.progress(1.0, text="Done: the features are cached on this server for this model.")
    return table


def draw_prediction(analysis: radar.RadarAnalysis, length_p: float | None = None) -> None:
    """p̄(recall), the paper's label with the ensemble's confidence and the length-only control beside it, RDS
    and RCI, and each classifier's vote."""
    st.subheader("Recall or reasoning?")
    pred = analysis.prediction
    if pred is None:
        st.info("No classifier for this model yet: extract the features of the bundled prompts above.")
        return
    control = (
        ""
        if length_p is None
        else f" · prompt length alone says {'recall' if length_p > 0.5 else 'reasoning'} (p = {length_p:.2f})"
    )
    st.markdown(
        f"**RADAR says {pred.label}** with confidence {pred.confidence:.2f}{control}. "
        + (
            "When the length alone gives the same label, the features may be reading the prompt's length."
            if length_p is not None and (length_p > 0.5) == (pred.label == "recall")
            else ""
        )
    )
    c1, c2, c3, c4 = st.columns(4)
    c1.metric(
        "p̄(recall)",
        f"{pred.p_recall:.3f}",
        help="Mean of the four classifiers' recall probabilities (soft vote, RADAR §2.3).",
    )
    c2.metric(
        "Label (paper's rule)",
        pred.label,
        help="Recall when more than half of the four hard votes say recall (a 2–2 tie is reasoning).",
    )
    c3.metric("RDS", f"{pred.rds:.3f}", help=radar.RDS_FORMULA)
    c4.metric("RCI", f"{pred.rci:.3f}", help=radar.RCI_FORMULA)
    st.plotly_chart(rf.probability_figure(pred), key=keys.RADAR_PROBABILITY)
    left, right = st.columns([3, 2])
    with left:
        st.dataframe(
            rf.votes_frame(pred),
            hide_index=True,
            placeholder="—",
            column_config={
                "p(recall)": st.column_config.ProgressColumn("p(recall)", min_value=0.0, max_value=1.0, format="%.3f")
            },
        )
    with right:
        st.caption(
            f"Confidence {pred.confidence:.3f} (p̄ for a recall label, 1 − p̄ for reasoning). "
            + (
                "The soft vote agrees."
                if pred.soft_label == pred.label
                else f"The soft vote (p̄ > ½) would say {pred.soft_label}."
            )
        )
        st.caption(
            "RDS and RCI: the paper describes them only in words (appendix C). Here each is the logistic of "
            "the mean training-set z-score of the features the paper names as recall (RDS) or reasoning (RCI) "
            "signatures; 0.5 is the training-set average."
        )
    st.caption(CAVEAT)


def draw_trajectories(analysis: radar.RadarAnalysis) -> None:
    """The logit-lens confidence and entropy of the next token across layers."""
    st.subheader("Confidence and entropy across layers")
    st.caption(
        "The surface features come from these curves: the residual stream after each decoder layer, at the "
        "last prompt token, read through the model's final norm and unembedding (logit lens). Recall should "
        "show early, fast-converging confidence; reasoning a gradual build-up (RADAR §3.2). Logit-lens readings "
        "of early layers are rough for models not trained for them."
    )
    st.plotly_chart(rf.trajectory_figure(analysis.trace), key=keys.RADAR_TRAJECTORY)


FEATURE_COLUMNS_PX = {
    "feature": 175,
    "value": 75,
    "train mean (recall)": 95,
    "train mean (reasoning)": 115,
    "type": 50,
    "formula": 180,
    "paper's proxy note": 130,
    "implementation note": 130,
}
"""The feature tables' column widths, 950 px in all: a table fits the page's 978 px at a 1,440 px window, so no
column is cut at its right edge (tests/e2e/test_layout_browser.py); a longer formula or note shows whole on hover and
in the CSV export."""
SHORT_HEADERS = {"train mean (recall)": "mean, recall", "train mean (reasoning)": "mean, reasoning"}
"""Headers that fit their narrower columns (the frame and the CSV keep the full names)."""


def feature_columns(frame: Any) -> dict[str, Any]:
    """The pixel widths of :data:`FEATURE_COLUMNS_PX` for the columns ``frame`` has (the feature's name pinned)."""
    config: dict[str, Any] = {}
    for name, px in FEATURE_COLUMNS_PX.items():
        if name not in frame.columns:
            continue
        label = SHORT_HEADERS.get(name, name)
        if name == "feature":
            config[name] = st.column_config.Column(label, width=px, pinned=True)
        elif name in ("value", *SHORT_HEADERS):
            config[name] = st.column_config.NumberColumn(label, width=px, format="%.4g", help=name)
        else:
            config[name] = st.column_config.TextColumn(label, width=px)
    return config


def draw_features(analysis: radar.RadarAnalysis, table: radar.FeatureTable | None) -> None:
    """The 37 features by appendix-D group, with proxies named and the training means beside them."""
    st.subheader("The 37 features (appendix D)")
    st.caption(
        "Grouped as in the paper. The proxy column quotes where the paper itself says a feature is a proxy "
        "(several 'causal' and 'intervention' features are arithmetic on the attention entropy, and two are "
        "the number of layers); the implementation note says what had to be chosen where appendix D gives no "
        "formula. The last two columns are this model's means over the 15 + 15 training prompts."
    )
    frame = rf.feature_frame(analysis.features, table)
    config = feature_columns(frame)
    groups = list(dict.fromkeys(frame["group"]))
    for group in groups:
        st.markdown(f"**{escape_markdown(group)}**")
        st.dataframe(
            frame[frame["group"] == group].drop(columns=["group"]),
            hide_index=True,
            placeholder="—",
            column_config=config,
        )


def draw_head_entropies(analysis: radar.RadarAnalysis) -> None:
    """The attention entropy of every layer and head (folded away)."""
    with st.expander("Attention entropy per layer and head (the mechanistic features' source)"):
        st.caption(
            "$H_{\\ell,h} = -\\sum_{i,j} A(i,j) \\log A(i,j)$, summed over the prompt's query positions as the paper "
            "writes it, so it grows with the prompt length. Heads below τ = 1.5 nats count as specialized."
        )
        st.plotly_chart(rf.head_entropy_figure(analysis.trace), key=keys.RADAR_HEADS)


def draw_test_accuracy(report: dict[str, Any], analysis: radar.RadarAnalysis | None) -> None:
    """Accuracy on the bundled test set next to the paper's Table 1 and a length-only control; RDS vs RCI."""
    st.subheader("How well it separates recall from reasoning on this model")
    st.caption(
        "Trained on this model's features of the 30 bundled training prompts (15 recall, 15 reasoning) and "
        "tested on the 100 bundled test prompts, which follow the paper's design but are our own. The paper's "
        "column is its Table 1 for DialoGPT-medium on its sets — a reference, not a like-for-like comparison. "
        "'Prompt length only' is a control the paper does not report: a logistic regression on the log of "
        "the token count, trained on the same 30 prompts. Many RADAR features grow with the prompt length by "
        "construction, and our reasoning prompts are longer than our recall prompts (as in the paper's "
        "examples); where the control does as well, the features add little beyond length."
    )
    pct = st.column_config.NumberColumn(format="percent")
    st.dataframe(  # the page's whole width: beside the chart, its last columns were cut at 1,440 px
        rf.accuracy_frame(report),
        hide_index=True,
        placeholder="—",
        column_config={"RADAR here": pct, "soft vote (p̄ > ½)": pct, "prompt length only": pct, "paper": pct},
    )
    rds = report["rds_mean"]
    st.caption(
        f"Mean RDS on the test set: recall {rds['recall']:.3f}, reasoning {rds['reasoning']:.3f} "
        f"(paper: {rds['paper_recall']:.3f} and {rds['paper_reasoning']:.3f})."
    )
    st.plotly_chart(rf.accuracy_figure(report), key=keys.RADAR_ACCURACY)
    current = None
    if analysis is not None and analysis.prediction is not None:
        current = (analysis.prediction.rds, analysis.prediction.rci)
    st.plotly_chart(rf.rds_rci_figure(report["rows"], current), key=keys.RADAR_SCATTER)
    st.caption("Outlined markers are misclassified test prompts; the star is the prompt above.")
    with st.expander("Every test prompt and its prediction"):
        frame = rf.predictions_frame(report)
        st.dataframe(
            frame,
            hide_index=True,
            placeholder="—",
            column_config=widgets.fitted_columns(
                frame, pinned=("id",), text=("prompt",), numbers=dict.fromkeys(("p(recall)", "RDS", "RCI"), "%.3f")
            ),
        )


def draw_export(analysis: radar.RadarAnalysis | None, report: dict[str, Any] | None) -> None:
    """Downloads: this prompt's features and prediction (JSON), the test-set predictions (CSV)."""
    left, right = st.columns(2)
    if analysis is not None:
        data = json.dumps(analysis.to_dict(), indent=2, ensure_ascii=False, allow_nan=False)
        label = "Download this prompt's features and prediction (JSON)"
        widgets.download(left, label, data, "radar_prompt.json", key=keys.RADAR_JSON)
    if report is not None:
        csv = rf.predictions_frame(report).to_csv(index=False)
        widgets.download(
            right, "Download the test-set predictions (CSV)", csv, "radar_test_predictions.csv", key=keys.RADAR_CSV
        )


def draw_analysis(
    page: PageContext, text: str, table: radar.FeatureTable | None, report: dict[str, Any] | None
) -> radar.RadarAnalysis | None:
    """The analysis of ``text`` (cached across sessions), or ``None`` (after a message) when there is none."""
    if not text:
        st.info("Pick an example or type a query to see how the model processes it.")
        return None
    try:
        ready = prefetch.take(prefetch.RADAR, prefetch.radar_key(page.handle, text, _digest(table)))
        analysis = _analysis(page.config.model_key, text, _digest(table), page.handle, table, ready)
    except ValueError as exc:
        st.error(plain_message(str(exc)))
        return None
    st.divider()
    length_p = None
    if table is not None and report is not None and analysis.prediction is not None:
        length_p = radar.length_control_probability(table, report["token_counts"], len(analysis.trace.token_ids))
    draw_prediction(analysis, length_p)
    draw_trajectories(analysis)
    draw_features(analysis, table)
    draw_head_entropies(analysis)
    return analysis


def main() -> None:
    page = open_page("RADAR", early=early)
    text = draw_prompt(page)
    table = draw_model_features(page.handle)
    report = _report(page.handle, table)
    analysis = draw_analysis(page, text, table, report)
    if report is not None:
        st.divider()
        draw_test_accuracy(report, analysis)
    st.divider()
    draw_export(analysis, report)


main()
