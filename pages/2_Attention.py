"""Attention: how focused each head is on both paths, and how much the answer reads the context.

The page opens on the last dual-path run: the position to inspect, the attention-entropy maps (layer × head)
of both paths and their difference, the count of specialized heads (RADAR appendix D.2.1), the attention
mass the answer puts on the context, one head's pattern over the prompt tokens (click a cell), the Lookback
Lens (per head × answer token, on request: one more forward) and the export. The heads that copied the
answer (attention from the step that generates the answer span to the span in the context) come on request (one
more forward), beside the heads chosen on the model's calibration rows where it has them. The analysis (one
instrumented forward per path) is computed once per run and cached.
"""

from __future__ import annotations

from components import frame

frame.first_paint(
    "Attention",
    plain="Where does the model look while it answers? Each cell of the maps is one attention head: focused heads "
    "look at a few tokens, diffuse ones spread out; the lower chart shows how much of the answer's attention "
    "lands on the passage you gave it.",
    precise="For every layer and head, the entropy of the attention distribution of one query position i, "
    "$H = -\\sum_j A(i, j) \\log A(i, j)$ in nats, on both paths (with and without the context), and their "
    "difference; and the share of attention mass that answer positions put on the context tokens. Attention "
    "weights show where information can flow, not what the model used.",
    citation="Attention entropy as in RADAR (2025) appendix D.2.1.",
)  # on screen while the imports below run

import json
from collections.abc import Iterator
from functools import partial

import numpy as np
import pandas as pd
import streamlit as st

from components import controls, keys, state, widgets
from components import internals_state as views
from components.lru import session_lru
from components.run import run_cached
from components.text import plain_message
from core.engine.calibration_record import ChosenHeads, record_of_result
from core.engine.result import PARAMETRIC, RETRIEVAL, DualPathResult, result_digest
from core.methods.copying import CopyingHeads, copying_heads
from core.methods.internals import RADAR_TAU, SEGMENTS, Internals, attention_specialization, specialized_heads
from core.methods.lookback import WINDOW, LookbackAnalysis
from core.methods.lookback import analyze as lookback_analysis
from core.model.handle import ModelHandle
from figures.attention import (
    context_mass_figure,
    entropy_diff_figure,
    entropy_map_figure,
    head_pattern_figure,
    lookback_figures,
    selected_cell,
)
from figures.base import PATH_TITLES, position_label
from figures.copying import chosen_heads_rows, copying_figure, top_heads_rows

FIRST, ONE, MEAN = "first", "one", "mean"
WHERE_LABELS = {
    FIRST: "First answer step (t = 0: the last prompt token predicts the first answer token)",
    ONE: "One answer position",
    MEAN: "Averaged over the answer",
}


def draw_where(internals: Internals, result: DualPathResult) -> int | str:
    """Which query position the maps describe: an answer position t, or ``"mean"`` over the answer."""
    left, right = st.columns([2, 1])
    with left:
        mode = controls.choice(st.radio, "Query position", keys.ATTN_WHERE, WHERE_LABELS)
    if mode == MEAN:
        return "mean"
    if mode == FIRST or internals.n_positions == 1:
        return 0
    with right:
        tokens = result.answer_tokens or [""]
        t = st.selectbox(
            "Answer position t (the step that predicts answer token t)",
            list(range(internals.n_positions)),
            format_func=lambda i: position_label(tokens, i),
            key=keys.scoped(keys.ATTN_POSITION, result_digest(result)),
        )
    return int(t)


def draw_tau() -> float:
    return float(
        controls.number(
            "Specialization threshold τ (nats)",
            keys.ATTN_TAU,
            RADAR_TAU,
            (0.0, 5.0, 0.1),
            widget=st.slider,
            help="RADAR counts a head as specialized when its attention entropy is below τ (τ = 1.5 in the paper).",
        )
    )


def _on_cell(chart_key: str, path: str) -> None:
    cell = selected_cell(st.session_state.get(chart_key))
    if cell is not None:
        st.session_state[keys.ATTN_CELL] = (path, cell[0], cell[1])


def _chart(fig, key: str, path: str) -> None:
    st.plotly_chart(fig, key=key, on_select=partial(_on_cell, key, path), selection_mode="points")


def _selected() -> tuple[int, int] | None:
    cell = st.session_state.get(keys.ATTN_CELL)
    return (int(cell[1]), int(cell[2])) if cell else None


def draw_entropy_maps(internals: Internals, result: DualPathResult, where: int | str, tau: float) -> None:
    st.subheader("Attention entropy per head")
    tag = result_digest(result)
    maps = {path: internals.entropy_at(path, where) for path in (RETRIEVAL, PARAMETRIC)}
    columns = st.columns(2, gap="medium")
    for column, path in zip(columns, (RETRIEVAL, PARAMETRIC), strict=True):
        with column:
            n_spec = specialized_heads(maps[path], tau)
            st.metric(
                f"Specialized heads ({PATH_TITLES[path].split(' (')[0].lower()})",
                f"{n_spec} of {maps[path].size}",
                help=f"Heads with attention entropy below τ = {tau:.1f} nats at this position (dots on the map).",
            )
            fig = entropy_map_figure(internals, path, where, tau, selected=_selected())
            _chart(fig, keys.scoped(keys.ATTN_MAP, path, tag), path)
    st.markdown("**Difference: retrieval − parametric**")
    _chart(entropy_diff_figure(internals, where, selected=_selected()), keys.scoped(keys.ATTN_DIFF, tag), RETRIEVAL)
    st.caption(
        "Blue cells: the head is more diffuse with the context; red: more focused. The retrieval prompt is "
        "longer, so entropies are not on the same scale (the maximum is log of the number of visible tokens). "
        "A low-entropy head may just be an attention sink on the first token; attention weights show where a "
        "head looks, not what it contributes (RADAR itself calls several of its attention features proxies)."
    )


def draw_context_mass(internals: Internals, result: DualPathResult, where: int | str) -> None:
    st.subheader("How much the answer reads the context")
    mass = internals.mass_at(RETRIEVAL, "context", where)
    n_context = int((internals.retrieval.segments == SEGMENTS.index("context")).sum())
    c1, c2 = st.columns(2)
    c1.metric("Mean attention on context tokens", f"{mass.mean():.1%}", help="Averaged over layers and heads.")
    c2.metric("Context tokens", f"{n_context} of {internals.retrieval.prompt_len} prompt tokens")
    fig = context_mass_figure(internals, where, selected=_selected())
    _chart(fig, keys.scoped(keys.ATTN_MASS, result_digest(result)), RETRIEVAL)
    rows = []
    for path in (RETRIEVAL, PARAMETRIC):
        for segment in SEGMENTS:
            rows.append(
                {"path": path, "segment": segment, "mean share": internals.mass_at(path, segment, where).mean()}
            )
    st.dataframe(
        pd.DataFrame(rows).pivot(index="segment", columns="path", values="mean share").reindex(SEGMENTS),
        column_config={
            p: st.column_config.ProgressColumn(p, min_value=0.0, max_value=1.0, format="%.3f") for p in PATH_TITLES
        },
    )
    st.caption(
        "The share of each query row's attention that lands on the context tokens (the rest goes to the template, "
        "the query and earlier answer tokens). CRM's attention-flow baseline uses the same quantity from the "
        "last token. Much attention on the context is consistent with reading it, but is not proof: a head can "
        "attend to the context and still be ignored downstream."
    )


def _seed_head_inputs(n_layers: int, n_heads: int) -> None:
    cell = st.session_state.get(keys.ATTN_CELL) or (RETRIEVAL, 0, 0)
    shape = (n_layers, n_heads)  # the number inputs' ranges: a new model draws new widgets
    state.seed_widget(keys.ATTN_PATH, cell[0], identity=shape)
    state.seed_widget(keys.ATTN_LAYER, min(int(cell[1]), n_layers - 1), identity=shape)
    state.seed_widget(keys.ATTN_HEAD, min(int(cell[2]), n_heads - 1), identity=shape)


def _from_inputs() -> None:
    st.session_state[keys.ATTN_CELL] = (
        st.session_state[keys.ATTN_PATH],
        int(st.session_state[keys.ATTN_LAYER]),
        int(st.session_state[keys.ATTN_HEAD]),
    )


def draw_head_pattern(handle: ModelHandle, internals: Internals, result: DualPathResult) -> None:
    st.subheader("One head's attention pattern")
    st.caption("Click a cell in any map above, or pick a path, layer and head here.")
    _seed_head_inputs(internals.n_layers, internals.n_heads)
    c1, c2, c3, c4 = st.columns([2, 1, 1, 2])
    c1.radio("Path", list(PATH_TITLES), format_func=PATH_TITLES.__getitem__, key=keys.ATTN_PATH, on_change=_from_inputs)
    c2.number_input(
        "Layer", min_value=0, max_value=internals.n_layers - 1, step=1, key=keys.ATTN_LAYER, on_change=_from_inputs
    )
    c3.number_input(
        "Head", min_value=0, max_value=internals.n_heads - 1, step=1, key=keys.ATTN_HEAD, on_change=_from_inputs
    )
    for key in (keys.ATTN_PATH, keys.ATTN_LAYER, keys.ATTN_HEAD):
        state.mark_drawn(key, identity=(internals.n_layers, internals.n_heads))
    all_rows = c4.checkbox("Show every query row (not only the answer steps)", key=keys.ATTN_ALL_ROWS)
    if st.session_state.get(keys.ATTN_CELL) is None:
        st.info("No head opened yet.")
        return
    path, layer, head = st.session_state[keys.ATTN_CELL]
    try:
        pattern, tokens, prompt_len = views.head_pattern(handle, result, path, int(layer), int(head))
    except ValueError as exc:
        st.error(plain_message(str(exc)))
        return
    entropy = internals.entropy_at(path, 0)[layer, head]
    st.markdown(
        f"**{PATH_TITLES[path]} · layer {layer} · head {head}** — entropy at the first answer step "
        f"{entropy:.3f} nats; the pattern is kept for this head only."
    )
    fig = head_pattern_figure(pattern, tokens, internals.rows(path), int(layer), int(head), all_rows=all_rows)
    st.plotly_chart(fig, key=keys.scoped(keys.ATTN_PATTERN, result_digest(result), path, layer, head, all_rows))
    rows_text = (
        "every token" if all_rows else "the answer steps (the prompt’s last token, then each answer token fed back)"
    )
    st.caption(
        f"Rows are {rows_text}; columns are the {prompt_len} prompt tokens followed by the answer tokens. "
        "Each row sums to one."
    )


MAX_LOOKBACKS = 4


def draw_lookback(handle: ModelHandle, result: DualPathResult) -> None:
    st.subheader("Lookback Lens: which heads read the context while each answer token was produced")
    st.caption(
        "For every head and answer token, the lookback ratio LR = A_ctx / (A_ctx + A_new): the head's mean "
        "attention on the prompt (the context, as in the paper) over its mean attention on the answer tokens "
        "generated before this one (Chuang et al. 2024). 1 = only the prompt, 0 = only the answer so far. The "
        "first answer token has no earlier answer token, so its column is empty. Built for contextual "
        "hallucination in 7B models; on a small model it is an attention pattern, not proof of reading."
    )
    cache = session_lru(keys.ATTN_LOOKBACK, MAX_LOOKBACKS)
    digest = result_digest(result)
    view = cache.get(digest)
    if view is None:
        if not st.button("Compute the lookback map (one forward of the retrieval path)", key=keys.ATTN_LOOKBACK_RUN):
            return
        view = run_cached(
            cache,
            digest,
            lambda progress: lookback_analysis(handle, result),
            start="Tracing the retrieval path's attention…",
            describe=lambda done, total, text="": text or "lookback ratios",
            what="Lookback Lens",
        )
        if view is None:
            return
    draw_lookback_view(view, digest)


def draw_lookback_view(view: LookbackAnalysis, digest: str) -> None:
    c1, c2 = st.columns(2)
    if view.p_recalled is None or view.tau is None:
        c1.metric("Lookback Lens P(recalled)", "—", help=view.classifier or None)
    else:
        c1.metric("Lookback Lens P(recalled)", f"{view.p_recalled:.3f}", f"{view.verdict} at τ = {view.tau:.3f}", "off")
    mean = view.mean_ratio
    c2.metric("Mean lookback ratio (all heads)", "—" if mean is None else f"{mean:.3f}")
    st.caption(plain_message(view.classifier))
    for note in view.notes:
        st.info(note)
    fig, curve = lookback_figures(view)
    st.plotly_chart(fig, key=keys.scoped(keys.ATTN_LOOKBACK_MAP, digest))
    if curve is not None:
        st.plotly_chart(curve, key=keys.scoped(keys.ATTN_LOOKBACK_CURVE, digest))
        st.caption(
            f"Sliding windows of {WINDOW} answer tokens (the paper's span): where the curve drops, the heads "
            "stopped looking back at the context; with a classifier, each window's P(recalled) against τ."
        )
    downloads = [("Download the lookback map (CSV)", view.table(), "lookback_map.csv", keys.ATTN_LOOKBACK_CSV)]
    if view.windows:
        downloads.append(
            ("Download the windows (CSV)", view.window_table(), "lookback_windows.csv", keys.ATTN_LOOKBACK_WINDOWS_CSV)
        )
    for column, (label, rows, name, key) in zip(st.columns(2), downloads):
        widgets.download(column, label, pd.DataFrame(rows).to_csv(index=False), name, key=key)


COPY_CAPTION = (
    "Per head, the attention weight from the position that generates the answer span's first token (the token "
    "before it, with the context) on the context tokens where the span occurs (summed over them); the dots mark "
    "the heads of largest weight. Attention is not attribution: a head that attends to the span's occurrence is a "
    "copying candidate, not proof that it wrote the answer (its output may be ignored downstream, and a model can "
    "attend to a fact it also knows)."
)


def draw_copying(handle: ModelHandle, result: DualPathResult) -> None:
    st.subheader("The heads that copied the answer")
    st.caption(COPY_CAPTION)
    cache = session_lru(keys.ATTN_COPY, MAX_LOOKBACKS)
    digest = result_digest(result)
    view = cache.get(digest)
    if view is None:
        label = "Find the heads that copied the answer (one forward of the retrieval path, up to the span)"
        if not st.button(label, key=keys.ATTN_COPY_RUN):
            return
        view = run_cached(
            cache,
            digest,
            lambda progress: copying_heads(handle, result),
            start="Reading the attention at the answer span…",
            describe=lambda done, total, text="": text or "copying heads",
            what="The copying heads",
        )
        if view is None:
            return
    draw_copying_view(view, digest, record_of_result(result).copying)


def draw_copying_view(view: CopyingHeads, digest: str, chosen: ChosenHeads | None = None) -> None:
    if not view.available or view.copy is None or view.context is None:
        st.info(plain_message(view.note))
        return
    layer, head, weight = view.top[0]
    c1, c2, c3 = st.columns(3)
    c1.metric("Strongest copying head", f"layer {layer} · head {head}", f"{weight:.1%} on the span", "off")
    c2.metric("Mean attention on the span (all heads)", f"{view.copy.mean():.1%}")
    c3.metric("Span tokens in the context", f"{len(view.occurrence_tokens)} of {view.context_tokens}")
    st.caption(plain_message(view.note))
    heads = chosen.heads if chosen is not None else ()
    st.plotly_chart(copying_figure(view, chosen=heads), key=keys.scoped(keys.ATTN_COPY_MAP, digest))
    numbers = {c: st.column_config.NumberColumn(c, format="%.3f") for c in ("on the span", "on the context")}
    st.markdown("**This run's heads of largest weight** (● on the map)")
    st.dataframe(pd.DataFrame(top_heads_rows(view)), hide_index=True, column_config=numbers)
    draw_chosen_heads(view, chosen, numbers)
    payload = json.dumps(view.to_dict(), indent=1)
    widgets.download(st, "Download the copying heads (JSON)", payload, "copying_heads.json", key=keys.ATTN_COPY_JSON)


def draw_chosen_heads(view: CopyingHeads, chosen: ChosenHeads | None, numbers: dict) -> None:
    """The heads chosen on the model's calibration rows (○ on the map), with this run's weights, or why none are."""
    if chosen is None:
        st.caption(
            "No copying heads were chosen on this model's calibration rows (the embedded model's come with the app): "
            "the map marks this run's heads only."
        )
        return
    st.markdown(f"**The heads that copy, chosen on the model's calibration rows** (○ on the map; {len(chosen.heads)})")
    rows = chosen_heads_rows(view, chosen.heads)
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, column_config=numbers)
        mean = sum(r["on the span"] for r in rows) / len(rows)
        st.caption(f"Their mean attention on the span in this run: {mean:.1%}.")
    st.caption(
        f"Chosen on {chosen.rows} agreeing calibration rows ({chosen.recalled} of them recalled), each labeled by its "
        f"swap test: the heads whose weight best told read from recalled, grouped cross-validated AUC "
        f"{chosen.cv_auc:.2f}. That is weak, and the headline does not read them; they are the heads to look at "
        "first, not a verdict."
    )
    if view.copy is not None and not chosen.fits(*view.copy.shape):
        st.warning("Some chosen heads are outside this model's layers and heads: the choice was made for another.")


def _per_path(internals: Internals, where: int | str) -> Iterator[tuple[str, np.ndarray, dict[str, np.ndarray]]]:
    """Each path, its entropy map and its attention mass on each segment at ``where`` (all ``(layers, heads)``)."""
    for path in (RETRIEVAL, PARAMETRIC):
        yield path, internals.entropy_at(path, where), {s: internals.mass_at(path, s, where) for s in SEGMENTS}


def export_payload(internals: Internals, where: int | str, tau: float) -> dict:
    out: dict = {"position": where, "tau": tau, "layers": internals.n_layers, "heads": internals.n_heads, "paths": {}}
    for path, ent, masses in _per_path(internals, where):
        out["paths"][path] = {
            "entropy": np.round(ent, 6).tolist(),
            "specialized_heads": specialized_heads(ent, tau),
            "radar_features": attention_specialization(ent, tau),
            "segment_mass": {s: np.round(mass, 6).tolist() for s, mass in masses.items()},
        }
    return out


def export_frame(internals: Internals, where: int | str) -> pd.DataFrame:
    rows = []
    for path, ent, masses in _per_path(internals, where):
        for layer in range(internals.n_layers):
            for head in range(internals.n_heads):
                rows.append(
                    {
                        "path": path,
                        "layer": layer,
                        "head": head,
                        "entropy_nats": ent[layer, head],
                        **{f"mass_{s}": masses[s][layer, head] for s in SEGMENTS},
                    }
                )
    return pd.DataFrame(rows)


def draw_export(internals: Internals, where: int | str, tau: float) -> None:
    st.subheader("Export")
    c1, c2 = st.columns(2)
    payload = json.dumps(export_payload(internals, where, tau), indent=1)
    widgets.download(c1, "Download the maps (JSON)", payload, "attention_maps.json", key=keys.ATTN_JSON)
    frame = export_frame(internals, where).to_csv(index=False)
    widgets.download(c2, "Download per-head values (CSV)", frame, "attention_heads.csv", key=keys.ATTN_CSV)


def draw_view(handle: ModelHandle, result: DualPathResult, internals: Internals) -> None:
    """The page's sections on the session's last run and its analysis."""
    where = draw_where(internals, result)
    tau = draw_tau()
    st.divider()
    draw_entropy_maps(internals, result, where, tau)
    st.divider()
    draw_context_mass(internals, result, where)
    st.divider()
    draw_head_pattern(handle, internals, result)
    st.divider()
    draw_lookback(handle, result)
    st.divider()
    draw_copying(handle, result)
    st.divider()
    draw_export(internals, where, tau)


views.run_view("Attention", draw_view)
