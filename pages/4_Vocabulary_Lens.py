"""Vocabulary lens: which words the calibrated directions stand for, and at which depth the context changes
the prediction.

The page opens on the last dual-path run: the direction to read (PC1, supervised, or this run's own
displacement), its vocabulary back-projection per layer with both ends (CRM appendix U.2), the logit lens of
both paths at a chosen answer position layer by layer, and the export.
"""

from __future__ import annotations

from components import frame

frame.first_paint(
    "Vocabulary lens",
    plain="Which words does the model's internal state point to? The page turns the shift the passage causes into "
    "the words it makes more and less likely, and shows what each layer would answer if the model stopped "
    "there.",
    precise="A direction u in hidden space is read as words by projecting it through the unembedding: the logits "
    "W_U·u, top and bottom tokens (back-projection). The logit lens applies the final norm and W_U to each "
    "layer's hidden state h_ℓ of both paths and reads the result as a next-token prediction; early layers "
    "were not trained to be read this way, so their predictions are approximate.",
    citation="Back-projection as in CRM (2025) appendix U.2; the logit lens after nostalgebraist (2020).",
)  # on screen while the imports below run

import streamlit as st

from components import controls, keys, widgets
from components import internals_state as views
from core.engine.result import PARAMETRIC, RETRIEVAL, DualPathResult, result_digest
from core.methods.crm import PC1, SUPERVISED, CrmBasis
from core.methods.internals import Internals
from core.model.handle import ModelHandle
from figures.base import default_position, position_label
from figures.layer_axes import row_label
from figures.vocabulary import END_COLUMNS, lens_frame, lens_position_figure, projection_frame

RUN = "run"
DIRECTION_LABELS = {
    PC1: "PC1 (unsupervised)",
    SUPERVISED: "Supervised (class-mean difference)",
    RUN: "This run's displacement d_ℓ",
}


def draw_direction(basis: CrmBasis | None) -> str:
    options = [PC1, SUPERVISED, RUN] if basis is not None else [RUN]
    if basis is None:
        st.caption(
            "No CRM calibration for this model and template yet (compute it on the Layer trajectories page): "
            "only this run's own displacement can be projected."
        )
    labels = {option: DIRECTION_LABELS[option] for option in options}
    return str(
        controls.choice(st.radio, "Direction to read", keys.VOCAB_DIRECTION, labels, horizontal=True) or options[0]
    )


def draw_backprojection(
    handle: ModelHandle, internals: Internals, result: DualPathResult, basis: CrmBasis | None, direction: str
) -> None:
    st.subheader("Back-projection through the unembedding")
    k = int(controls.number("Tokens per end", keys.VOCAB_K, 10, (3, 25), widget=st.slider))
    if direction == RUN or basis is None:
        projection = views.run_projection_for(handle, internals, result, k)
    else:
        projection = views.projection_for(handle, basis, direction, k)
    defined = projection["defined"].tolist()
    kept = basis.kept_layers if basis is not None else []
    frame = projection_frame(projection["top_tokens"], projection["bottom_tokens"], kept=kept, defined=defined)
    only_kept = st.checkbox("Only kept layers", key=keys.VOCAB_ONLY_KEPT, disabled=not kept)
    shown = frame[frame["kept"]] if only_kept and kept else frame
    st.dataframe(
        shown,
        hide_index=True,
        height=min(1100, 38 + 35 * len(shown)),
        column_config=widgets.fitted_columns(shown, pinned=("layer",), text=END_COLUMNS, text_width="large"),
    )
    st.caption(
        "Each row lists the tokens whose unembedding vectors have the highest (+) and lowest (−) dot product with "
        "the layer's direction. PC1's sign is arbitrary, so read both ends. Early layers often give sub-word "
        "fragments: the unembedding is only calibrated for the last layer, so these lists are suggestive, not a "
        "decoding of what the layer computes (CRM appendix U.2 reads them the same way)."
    )
    csv = frame.to_csv(index=False)
    widgets.download(
        st, "Download back-projection (CSV)", csv, "vocabulary_backprojection.csv", key=keys.VOCAB_PROJ_CSV
    )


def draw_lens(internals: Internals, result: DualPathResult) -> None:
    st.subheader("Logit lens: each layer's prediction on both paths")
    n = internals.n_positions
    tokens = result.answer_tokens or [""]
    start = default_position(result.token_kl) if result.n_tokens else 0
    t = st.selectbox(
        "Answer position (starts at the largest KL)",
        list(range(n)),
        index=min(start, n - 1),
        format_func=lambda i: (
            f"{position_label(tokens, i)}   (KL {result.token_kl[i]:.3f})" if i < result.n_tokens else f"t={i}"
        ),
        key=keys.scoped(keys.VOCAB_POSITION, result_digest(result)),
    )
    lens = internals.lens
    top_retrieval, top_parametric = internals.lens_topk(RETRIEVAL, t, 5), internals.lens_topk(PARAMETRIC, t, 5)
    differs, settled = internals.first_divergent_row(t), internals.settled_row(t)
    answer_id = internals.answer_token_ids[t] if t < len(internals.answer_token_ids) else None
    c1, c2, c3 = st.columns(3)
    c1.metric(
        "Top-1 of the paths first differs at layer",
        row_label(differs) if differs is not None else "never",
        help="The first layer whose logit-lens top-1 token is not the same on both paths.",
    )
    c2.metric(
        "Retrieval top-1 is the answer from layer",
        row_label(settled) if settled is not None else "never",
        help="From this layer to the last, the retrieval path's logit-lens top-1 is the emitted answer token.",
    )
    c3.metric("KL at the last layer", f"{lens.kl[-1, t]:.3f} nats")
    if answer_id is not None:
        fig = lens_position_figure(internals, t, tokens)
        st.plotly_chart(fig, key=keys.scoped(keys.VOCAB_LENS, result_digest(result), t))
    frame = lens_frame(
        top_retrieval,
        top_parametric,
        lens.kl[:, t],
        lens.retrieval.target_probability()[:, t],
        lens.parametric.target_probability()[:, t],
    )
    st.dataframe(
        frame,
        hide_index=True,
        height=min(1100, 38 + 35 * len(frame)),
        column_config=widgets.fitted_columns(
            frame,
            pinned=("layer",),
            text=("retrieval top-k", "parametric top-k"),
            numbers={"KL (nats)": "%.3f", "p(answer) retrieval": "%.3f", "p(answer) parametric": "%.3f"},
            text_width="medium",  # two "large" top-k columns hid the parametric one at 1,440 px (hover: whole cell)
        ),
    )
    st.caption(
        "Each layer's hidden state read through the model's final norm and unembedding. The last row is the "
        "model's real prediction; earlier rows are what the model would predict if it stopped there. The logit "
        "lens is a rough probe for early layers (their states are not in the unembedding's basis), so trust the "
        "depth at which the paths diverge more than the exact early-layer tokens."
    )
    csv = frame.to_csv(index=False)
    widgets.download(st, "Download logit lens at this position (CSV)", csv, "logit_lens.csv", key=keys.VOCAB_LENS_CSV)


def draw_view(handle: ModelHandle, result: DualPathResult, internals: Internals) -> None:
    """The page's sections on the session's last run and its analysis."""
    basis = views.basis_for(handle, result.template)
    direction = draw_direction(basis)
    st.divider()
    draw_backprojection(handle, internals, result, basis, direction)
    st.divider()
    draw_lens(internals, result)


views.run_view("Vocabulary lens", draw_view)
