"""ReDeEP's per-token view ("read or recall", token by token) for the Layer trajectories page.

Draws what :func:`core.methods.redeep.decompose` computes: for each answer token, the copying heads' ECS
(read) against the knowledge layers' PKS (recall), next to the dual path's KL; the chosen heads and layers
named, with pointers to the Attention page (the head's pattern) and the Vocabulary lens page (the layer's
logit lens); the user's own heads/layers; the CSV export. No maths here.
"""

from __future__ import annotations

import streamlit as st

from components import widgets
from components.lru import session_lru
from components.run import run_guarded
from components.text import escape_markdown
from core.engine.result import DualPathResult, result_digest
from core.methods.redeep import ReDeEPView, decompose, is_fitted
from core.methods.redeep.choice import override_choice
from core.model.handle import ModelHandle
from figures.redeep import choice_frame, token_figure, token_frame

CACHE = "redeep_views"
HEADS_KEY, LAYERS_KEY, RUN_KEY, CSV_KEY, FIG_KEY = (
    "redeep_heads",
    "redeep_layers",
    "redeep_run",
    "redeep_csv",
    "redeep_figure",
)
ATTENTION_PAGE = "pages/2_Attention.py"
LENS_PAGE = "pages/4_Vocabulary_Lens.py"


def draw_intro() -> None:
    st.subheader("Read or recall, token by token (ReDeEP)")
    st.markdown(
        "For each answer token: did the heads that copy from the context agree with what the model wrote "
        "(**ECS**, read), and how much did the knowledge layers' MLPs rewrite the prediction (**PKS**, recall)?"
    )
    with st.expander("Precise definition"):
        st.markdown(
            r"$\mathrm{ECS}_n^{\ell,h} = \cos(x_n^L, \bar e)$: $x_n^L$ the last layer's (final-normed) state at the "
            r"step that predicts answer token $n$, $\bar e$ the mean of the same states over the top-10 % context "
            r"tokens head $(\ell, h)$ attends to most from there. "
            r"$\mathrm{PKS}_n^\ell = \mathrm{JSD}(q(x_n^{\mathrm{mid},\ell}) \,\|\, q(x_n^\ell))$: the logit lens "
            r"before and after layer $\ell$'s MLP, in nats ($0 \ldots \ln 2$). "
            r"Score $= \alpha \sum \mathrm{PKS} - \beta \sum \mathrm{ECS}$ over the chosen layers and heads (higher: "
            "more likely recalled). Sun et al., ReDeEP (ICLR 2025, arXiv 2410.11414). Built for hallucination in 7B "
            "models; a 135M model may have no clean copying heads — see docs/redeep.md."
        )


def draw_override(handle: ModelHandle, result: DualPathResult):
    c1, c2 = st.columns(2)
    heads = c1.text_input(
        "Your copying heads (layer.head, comma-separated)", key=HEADS_KEY, placeholder="e.g. 12.3, 14.0"
    )
    layers = c2.text_input("Your knowledge layers (comma-separated)", key=LAYERS_KEY, placeholder="e.g. 20, 21")
    return run_guarded(lambda: override_choice(handle, result.template, heads, layers), what="choice")


def draw_choice(view: ReDeEPView) -> None:
    c = view.choice
    fitted = (
        f"α = {c.alpha:.3g}, β = {c.beta:.3g} fitted on {c.n_recalled} recalled + {c.n_read} read calibration rows"
        + (f" (out-of-fold AUC {c.auc_oof:.3f})" if c.auc_oof is not None else "")
        if is_fitted(c)
        else "α = β = 1, not fitted: no calibration exists for this model (`python -m core calibrate-model` makes one, "
        "with every other per-model artifact; or “Calibrate this model” on the Dual Path page)"
    )
    st.caption(escape_markdown(f"{c.describe()}. {fitted}."))
    if view.trace.pks_refusal:
        st.info(escape_markdown(f"No PKS for this model: {view.trace.pks_refusal}."))
    with st.expander("Chosen heads and layers"):
        st.dataframe(choice_frame(view), hide_index=True)
        st.page_link(
            ATTENTION_PAGE, label="A head's attention pattern: Attention page", icon=":material/arrow_forward:"
        )
        st.page_link(LENS_PAGE, label="A layer's logit lens: Vocabulary lens page", icon=":material/arrow_forward:")


def draw_view(view: ReDeEPView) -> None:
    c1, c2, c3 = st.columns(3)
    c1.metric("Mean ECS (read)", f"{float(view.ecs.mean()):.3f}")
    c2.metric("Mean PKS (recall)", "—" if view.pks is None else f"{float(view.pks.mean()):.4f} nats")
    c3.metric("ReDeEP score", "—" if view.score is None else f"{view.score:+.3f}", help="α·ΣPKS − β·ΣECS")
    st.plotly_chart(token_figure(view), key=FIG_KEY)
    st.caption(
        "Column n is the step that predicts answer token n, as in the KL chart of the Dual Path page. High ECS "
        "with low PKS reads as 'copied from the context'; low ECS with high PKS as 'written by the MLPs'. On one "
        "row these are descriptions, not verdicts: the detectors' thresholds are on the Dual Path page."
    )
    frame = token_frame(view)
    with st.expander("Per-token values"):
        st.dataframe(frame, hide_index=True)
    widgets.download(st, "Download per-token ReDeEP (CSV)", frame.to_csv(index=False), "redeep_tokens.csv", key=CSV_KEY)


def draw_redeep(handle: ModelHandle, result: DualPathResult) -> None:
    """The whole section: intro, the user's heads/layers, a button (one forward pass), the view."""
    draw_intro()
    choice = draw_override(handle, result)
    if choice is None:
        return
    cache = session_lru(CACHE, 4)
    key = (result_digest(result), choice.describe(), choice.alpha, choice.beta)
    view = cache.get(key)
    if view is None and st.button("Compute ReDeEP (one forward pass)", key=RUN_KEY):
        with st.spinner("ReDeEP: one traced forward of the retrieval path…"):
            view = run_guarded(lambda: decompose(handle, result, choice), what="analysis")
        if view is not None:
            cache.put(key, view)
    if view is not None:
        draw_choice(view)
        draw_view(view)
