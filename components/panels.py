"""Result panels of the dual-path view. Each takes a :class:`DualPathResult` and draws one section.

User and model text is only ever shown through ``st.code``/``st.text``/dataframes/plotly (escaped), or
through ``st.markdown`` after :func:`components.text.escape_markdown`.
"""

from __future__ import annotations

import streamlit as st

from components import keys, widgets
from components.frame import draw_intro as draw_intro  # the pages draw it before their imports
from components.text import escape_markdown, plain_message
from core.engine.axes import Axis, Headline, with_headline
from core.engine.result import DualPathResult, result_digest
from core.engine.swap import SwapTest, with_swap_test
from core.engine.threshold import TAU_LENGTH
from core.engine.verdict import INCONCLUSIVE, READ, RECALLED, display, normalize_verdict, repcs_question
from figures import base as figures

RESULT_FILE_NAME = "read_or_recall_result.json"

CAVEAT = (
    "Z measures how much the context moved the model's next-token distributions over the first T answer "
    "tokens. A small Z says the context changed little — consistent with recall — but cannot prove that the "
    "fact was in the training data, and a single generation is not a certificate."
)


def _num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _clip(text: str, most: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 1] + "…"


def draw_run_context(result: DualPathResult, *, what: str = "This page analyzes the last run") -> None:
    """A collapsed box at the top of an analysis page: the query, context and both answers it is about."""
    with st.expander(f"{what}: “{escape_markdown(_clip(result.query))}”", icon=":material/info:"):
        st.caption("Query")
        st.code(result.query, language=None, wrap_lines=True)
        st.caption("Context")
        st.code(result.context, language=None, wrap_lines=True)
        st.caption(f"Answer with the context ({result.n_tokens} tokens)")
        st.code(result.retrieval.answer, language=None, wrap_lines=True)
        if result.parametric.answer:
            st.caption("Answer without the context")
            st.code(result.parametric.answer, language=None, wrap_lines=True)
        st.caption(
            f"Model {escape_markdown(result.model)} · verdict: {display(result.verdict)} · run it again or change "
            "it on the Dual Path page."
        )


def draw_answers(result: DualPathResult) -> None:
    """Both answers side by side (the same layout as the live run)."""
    left, right = widgets.answer_columns()
    with left:
        widgets.show_answer(st, result.retrieval.answer)
        st.caption(f"{result.n_tokens} tokens · {_finish(result.retrieval.finish)}")
    with right:
        widgets.show_answer(st, result.parametric.answer)
        st.caption(f"{len(result.parametric.token_ids)} tokens · {_finish(result.parametric.finish)}")


def _finish(reason: str) -> str:
    return {
        "eos": "ended at end of sequence",
        "length": "stopped at the token limit",
        "turn": "ended where the model began a turn of its own (a new “Question:” line)",
    }.get(reason, reason)


_AXIS_LABELS = {
    "context_reliance": ("Context reliance", "P(read)"),
    "parametric_support": ("Parametric support", "log-prob"),
}


def _axis_help(axis: Axis) -> str:
    band = "" if axis.band is None else f"; inconclusive band [{axis.band[0]:.2f}, {axis.band[1]:.2f}]"
    text = f"{axis.direction}. Threshold {_num(axis.threshold, 2)}{band}."
    if axis.decided_by == "text":
        text += " Decided by the text, not the score: the answer without the context contains the span."
    return text


def draw_span(head: Headline) -> None:
    """Where the headline looked: the located answer span, why it was chosen, and the other candidates."""
    span = (head.span or {}).get("span")
    if not span:
        st.caption("Answer span: none — the answer has no content word (only the query's words and function words).")
        return
    others = ", ".join(f"“{escape_markdown(w)}” {k:.2f}" for w, k in span.get("candidates", []))
    obs = head.span or {}
    at = f"per-token KL {_num(obs.get('kl'), 2)} nats, log-probability {_num(obs.get('lp_retrieval'), 2)} nats with "
    at += f"the context and {_num(obs.get('lp_parametric'), 2)} without it (change {_num(obs.get('llr'), 2)} nats)"
    st.markdown(
        f"**Answer span:** “{escape_markdown(span['text'])}” — {escape_markdown(span['why'])}. "
        f"Both axes read the run at this span: {at}."
    )
    if others:
        st.caption(f"Content words and their largest per-token KL (nats): {others}.")


def draw_headline(head: Headline) -> None:
    """The two-axis headline (:func:`core.engine.axes.headline`): the verdict, its sentence of why (computed by
    core from this run), the answer span it read, and both axes with their scores, thresholds and direction."""
    st.subheader("Verdict")
    st.markdown(f"#### {escape_markdown(head.title)}")
    st.markdown(escape_markdown(head.reason))
    draw_span(head)
    columns = st.columns(2)
    for column, axis in zip(columns, (head.reliance, head.support)):
        name, unit = _AXIS_LABELS[axis.name]
        state = f"{axis.state} (by the text)" if axis.decided_by == "text" else axis.state
        column.metric(
            f"{name}: {state}", "—" if axis.score is None else f"{unit} {axis.score:.2f}", help=_axis_help(axis)
        )
    if head.internals is not None:
        st.caption(
            "The swap test below decided this verdict: the context and the model's answer without it agree on the "
            f"span, so what the answer did when the context changed is the evidence. The internals alone said: "
            f"{escape_markdown(str(head.internals.get('title', '')))}."
        )
    if head.joint is not None and head.joint.get("resolver") == "agreement":
        low, high = head.joint["band"]
        st.caption(
            f"The context and the model's answer without it agree on the span, so no text can tell reading from "
            f"recalling: the agreement resolver decided (a logistic regression fitted on swap tests of such "
            f"calibration rows): P(the answer follows the context) {head.joint['score']:.2f}, inconclusive band "
            f"[{low:.2f}, {high:.2f}]. The swap test below checks it on this example."
        )
    elif head.joint is not None:
        low, high = head.joint["band"]
        st.caption(
            f"The decision table was inconclusive, so both axes' observations were weighed together (a logistic "
            f"regression on the calibration rows): P(read) {head.joint['score']:.2f}, inconclusive band "
            f"[{low:.2f}, {high:.2f}]."
        )
    st.caption(
        "Context reliance: did the answer need the context (how much the context moved the answer at its span: "
        "the per-token KL there and the change of the span's log-probability). Parametric support: would the model "
        "give this answer without the context (its own answer without the context, and the log-probability it "
        "gives the span). Calibration: " + escape_markdown(head.calibration)
    )


def draw_verdict(result: DualPathResult) -> None:
    """The RePCS verdict: Z, the threshold τ in force and where it comes from, the flag and the caveat."""
    st.subheader("RePCS verdict")
    window = min(result.score_window, result.n_tokens)
    c1, c2, c3 = st.columns(3)
    c1.metric(
        "Z = Σ KL over the window",
        f"{result.repcs_score:.3f} nats",
        help=f"Sum of KL_t over the first T = {result.score_window} answer tokens ({window} here).",
    )
    length_aware = result.tau_mode == TAU_LENGTH
    c2.metric(
        f"Threshold τ({window}), length-aware" if length_aware else "Threshold τ (one constant)",
        "none" if result.threshold is None else f"{result.threshold:.3f} nats",
        help=(
            f"τ(L) at this answer's L = {window} scored tokens; flag “{display(RECALLED)}” when Z < τ(L)."
            if length_aware
            else f"One τ for every answer length (RePCS, paper); flag “{display(RECALLED)}” when Z < τ."
        ),
    )
    c3.metric("Tokens scored", f"{window} of {result.n_tokens}", help=f"T = {result.score_window}")
    verdict = normalize_verdict(result.repcs_verdict)  # RePCS' own; the result's `verdict` is the headline's
    words = display(verdict)
    if verdict == RECALLED:
        st.warning(f"**{words}** — Z = {result.repcs_score:.3f} < τ = {result.threshold:.3f}.")
    elif verdict == READ:
        st.success(f"**{words}** — Z = {result.repcs_score:.3f} ≥ τ = {result.threshold:.3f}.")
    elif verdict == INCONCLUSIVE:
        st.info(
            f"**{words}** — "
            + escape_markdown(
                result.repcs_verdict_reason
                or f"Z = {result.repcs_score:.3f} is too close to τ = {_num(result.threshold)}."
            )
        )
    else:
        st.info(
            f"**{words}** — no threshold τ is available for this model, so Z is shown without a verdict. "
            "Calibrate τ on clean (context-dependent) prompts to get one."
        )
    question = repcs_question(result.repcs_verdict, result.verdict)  # never side by side with the headline unexplained
    if question is not None:
        st.caption(escape_markdown(question))
    st.caption("τ source: " + escape_markdown(result.threshold_source))
    if result.tau_band is not None and verdict in (RECALLED, READ):
        st.caption(escape_markdown(result.repcs_verdict_reason))  # τ(L) at this answer's length and its band
    st.caption(CAVEAT)


def draw_divergence_chart(result: DualPathResult) -> None:
    """The per-token KL bars with both paths' entropies underneath."""
    st.subheader("Where the two paths diverge")
    st.caption(
        "Each bar is KL_t between the two paths' next-token distributions at answer position t (both predict "
        "the same retrieval-answer token). Tall bars mark tokens the context changed; the lines show how "
        "uncertain each path was."
    )
    st.plotly_chart(figures.kl_entropy_figure_for(result), key=keys.scoped(keys.KL_CHART, result_digest(result)))


def draw_topk(result: DualPathResult) -> None:
    """A position selector and both paths' top-k candidates at that position, side by side."""
    st.subheader("Top candidates at one position")
    if result.n_tokens == 0:
        st.info("The answer has no tokens.")
        return
    start = figures.default_position(result.token_kl)
    position = st.selectbox(
        "Answer position (starts at the largest KL)",
        list(range(result.n_tokens)),
        index=start,
        format_func=lambda t: f"{figures.position_label(result.answer_tokens, t)}   (KL {result.token_kl[t]:.3f})",
        key=keys.scoped(keys.TOPK_POSITION, result_digest(result)),
    )
    retrieval, parametric = figures.topk_frames(result, int(position))
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("KL at this position", f"{result.token_kl[position]:.4f} nats")
    m2.metric("log p(token), retrieval", f"{result.retrieval.logprob[position]:.3f}")
    m3.metric("log p(token), parametric", f"{result.parametric.logprob[position]:.3f}")
    m4.metric(
        "Entropy rag / para", f"{result.retrieval.entropy[position]:.2f} / {result.parametric.entropy[position]:.2f}"
    )
    config = {
        "rank": st.column_config.NumberColumn("rank", width="small"),
        "token": st.column_config.TextColumn("token"),
        "probability": st.column_config.ProgressColumn("probability", min_value=0.0, max_value=1.0, format="%.3f"),
        "chosen": st.column_config.CheckboxColumn("answer token", width="small"),
    }
    left, right = st.columns(2, gap="medium")
    with left:
        st.markdown(f"**{widgets.RETRIEVAL_TITLE}**")
        st.dataframe(retrieval, hide_index=True, column_config=config)
    with right:
        st.markdown(f"**{widgets.PARAMETRIC_TITLE}**")
        st.dataframe(parametric, hide_index=True, column_config=config)


def draw_crm_statistics(result: DualPathResult) -> None:
    """The CRM level-2 statistics of KL_t over the score window."""
    st.subheader("KL statistics (CRM level 2)")
    stats = result.kl_stats
    split = stats.get("split")
    cols = st.columns(6)
    cols[0].metric("mean KL", _num(stats.get("mean")))
    cols[1].metric("max KL", _num(stats.get("max")))
    cols[2].metric("variance", _num(stats.get("var")))
    cols[3].metric(f"early mean (t < {split})", _num(stats.get("early")))
    cols[4].metric(
        f"late mean (t ≥ {split})", _num(stats.get("late")), help="— when the answer is not longer than the split."
    )
    cols[5].metric(
        "trend (nats / token)", _num(stats.get("trend"), 4), help="Slope of a straight-line fit of KL_t on t."
    )
    st.caption(
        "Computed over the first T answer tokens, in nats. These summarize one generation; CRM uses them as "
        "features of a classifier trained on labeled data, not as a verdict on their own."
    )


def draw_warnings(result: DualPathResult) -> None:
    """Warnings the engine attached to the result."""
    for warning in result.warnings:
        st.warning(plain_message(warning))


def draw_export(result: DualPathResult, swap: SwapTest | None = None) -> None:
    """Download the result as JSON (the same JSON the command line prints, with the swap test when one ran) and
    show both exact prompts."""
    t = result.timings
    st.caption(
        f"Model: {escape_markdown(result.model)} · template {escape_markdown(result.template)} · "
        f"generation {t.get('generate_s', 0.0):.2f} s, scoring {t.get('score_s', 0.0):.2f} s"
    )
    exported = with_headline(result)  # the headline on top, as `run --json` prints it
    exported = (exported if swap is None else with_swap_test(exported, swap)).to_json(indent=2)
    widgets.download(st, "Download the result (JSON)", exported, RESULT_FILE_NAME)
    with st.expander("The exact prompts"):
        st.caption(f"Retrieval prompt ({result.retrieval.prompt_len} tokens)")
        st.code(result.retrieval.prompt, language=None, wrap_lines=True)
        st.caption(f"Parametric prompt ({result.parametric.prompt_len} tokens)")
        st.code(result.parametric.prompt, language=None, wrap_lines=True)
