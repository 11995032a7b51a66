"""Pure figure and table builders of the internals views (plotly / pandas only: no Streamlit, no model).

Layer axes: the attention maps use decoder layers ``0 … L−1``; hidden-state views use rows ``0 … L`` where
row 0 is the embedding output (labelled ``emb``) and row ℓ + 1 is decoder layer ℓ (labelled ``ℓ``).
Every token placed in a figure goes through :func:`components.figures.token_label` (visible whitespace, then
HTML-escaped) so plotly draws it literally.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from components.figures import (
    PARAMETRIC_COLOR,
    RETRIEVAL_COLOR,
    display_token,
    escape_label,
    token_label,
)

FLAG_COLOR = "#c0392b"
KEPT_COLOR = "rgba(46, 139, 87, 0.13)"
BAND_COLOR = "rgba(120, 120, 120, 0.22)"
MEMORIZED_COLOR = "#8e44ad"
GROUNDED_COLOR = "#16a085"
MAX_AXIS_LABELS = 120
"""Above this many tokens on an axis only every k-th gets a tick label (all stay in the hover)."""

FEATURE_SET_LABELS = {
    "pc1": "LTS along PC1, kept layers (CRM-LR, the paper's main protocol)",
    "supervised": "LTS along the supervised direction, kept layers",
    "pc1_all_layers": "LTS along PC1, all layers",
    "supervised_all_layers": "LTS along the supervised direction, all layers",
    "l2_norm": "‖d_ℓ‖ per layer (magnitude baseline)",
    "logit_lens_kl": "logit-lens KL per layer (baseline)",
}


def row_label(row: int) -> str:
    """Label of a hidden-state row: ``emb`` for 0, else the decoder layer ``row − 1``."""
    return "emb" if row == 0 else str(row - 1)


def _row_axis(n_rows: int) -> dict[str, Any]:
    return {"tickmode": "array", "tickvals": list(range(n_rows)), "ticktext": [row_label(r) for r in range(n_rows)]}


def _token_ticks(labels: Sequence[str]) -> dict[str, Any]:
    n = len(labels)
    stride = max(1, int(np.ceil(n / MAX_AXIS_LABELS)))
    vals = list(range(0, n, stride))
    return {"tickmode": "array", "tickvals": vals, "ticktext": [labels[i] for i in vals]}


def head_heatmap(
    values: np.ndarray,
    *,
    title: str,
    colorbar: str,
    colorscale: str = "Viridis",
    zmid: float | None = None,
    marks: np.ndarray | None = None,
    mark_label: str = "",
    selected: tuple[int, int] | None = None,
    height: int = 620,
) -> go.Figure:
    """A layer × head heatmap whose cells can be clicked (plotly point selection).

    A transparent marker sits on every cell so that a click selects the cell's point (plotly heatmaps do not
    support point selection themselves); a selection event carries ``x`` = head and ``y`` = layer.

    Args:
        values: ``(layers, heads)``.
        marks: optional boolean ``(layers, heads)``; marked cells show a dot (e.g. specialised heads).
        selected: ``(layer, head)`` outlined, e.g. the head whose pattern is open.

    Raises:
        ValueError: for a non-2-D map or marks of another shape.
    """
    z = np.asarray(values, dtype=np.float64)
    if z.ndim != 2:
        raise ValueError(f"values must be (layers, heads), got shape {z.shape}")
    n_layers, n_heads = z.shape
    text = None
    if marks is not None:
        m = np.asarray(marks, dtype=bool)
        if m.shape != z.shape:
            raise ValueError(f"marks must have shape {z.shape}, got {m.shape}")
        text = np.where(m, "●", "")
    heat = go.Heatmap(
        z=z,
        x=list(range(n_heads)),
        y=list(range(n_layers)),
        colorscale=colorscale,
        zmid=zmid,
        colorbar={"title": {"text": escape_label(colorbar)}},
        text=text,
        texttemplate="%{text}" if text is not None else None,
        textfont={"color": "white", "size": 9},
        hoverinfo="skip",
    )
    heads, layers = np.meshgrid(np.arange(n_heads), np.arange(n_layers))
    hover = "layer %{y} · head %{x}<br>" + escape_label(colorbar) + " = %{customdata:.4f}"
    if marks is not None and mark_label:
        hover += "<br>%{text}"
    cells = go.Scatter(
        x=heads.ravel(),
        y=layers.ravel(),
        mode="markers",
        marker={"symbol": "square", "size": 14, "color": "rgba(0,0,0,0)"},
        customdata=z.ravel(),
        text=[escape_label(mark_label) if t else "" for t in (text.ravel() if text is not None else [""] * z.size)],
        hovertemplate=hover + "<extra></extra>",
        showlegend=False,
        selected={"marker": {"opacity": 1}},
        unselected={"marker": {"opacity": 1}},
    )
    fig = go.Figure([heat, cells])
    fig.update_layout(
        title={"text": escape_label(title)},
        height=height,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        hovermode="closest",
        hoverdistance=-1,
        clickmode="event+select",
        dragmode=False,
    )
    fig.update_xaxes(title_text="head", tickmode="linear", dtick=1, range=[-0.5, n_heads - 0.5], showgrid=False)
    fig.update_yaxes(title_text="layer", range=[-0.5, n_layers - 0.5], showgrid=False)
    if selected is not None:
        layer, head = selected
        fig.add_shape(
            type="rect",
            x0=head - 0.5,
            x1=head + 0.5,
            y0=layer - 0.5,
            y1=layer + 0.5,
            line={"color": FLAG_COLOR, "width": 3},
        )
    return fig


def selected_cell(event: Any) -> tuple[int, int] | None:
    """``(layer, head)`` of the first selected point of a :func:`head_heatmap` selection event, if any."""
    try:
        points = event["selection"]["points"]
    except (KeyError, TypeError):
        return None
    for point in points or []:
        x, y = point.get("x"), point.get("y")
        if x is not None and y is not None:
            return int(round(float(y))), int(round(float(x)))
    return None


def pattern_heatmap(
    weights: np.ndarray,
    row_tokens: Sequence[str],
    col_tokens: Sequence[str],
    *,
    row_offset: int = 0,
    title: str,
    height: int = 640,
) -> go.Figure:
    """One head's attention pattern: rows = query positions, columns = key tokens, both labelled by token.

    Args:
        weights: ``(R, C)`` attention weights (rows of the full ``(T, T)`` pattern).
        row_tokens, col_tokens: the ``R`` query and ``C`` key tokens.
        row_offset: index of the first row in the sequence (for the hover).
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(row_tokens), len(col_tokens)):
        raise ValueError(f"weights {w.shape} do not match {len(row_tokens)} rows × {len(col_tokens)} columns")
    rows = [token_label(t) for t in row_tokens]
    cols = [token_label(t) for t in col_tokens]
    custom = np.empty(w.shape + (2,), dtype=object)
    for i, r in enumerate(rows):
        custom[i, :, 0] = f"{row_offset + i}: {r}"
    for j, c in enumerate(cols):
        custom[:, j, 1] = f"{j}: {c}"
    fig = go.Figure(
        go.Heatmap(
            z=w,
            x=list(range(len(cols))),
            y=list(range(len(rows))),
            colorscale="Blues",
            zmin=0.0,
            customdata=custom,
            hovertemplate="query %{customdata[0]}<br>key %{customdata[1]}<br>weight %{z:.4f}<extra></extra>",
            colorbar={"title": {"text": "weight"}},
        )
    )
    fig.update_layout(title={"text": escape_label(title)}, height=height, margin={"l": 110, "r": 20, "t": 60, "b": 120})
    fig.update_xaxes(title_text="key token (attended to)", tickangle=-60, **_token_ticks(cols))
    fig.update_yaxes(title_text="query token", autorange="reversed", **_token_ticks(rows))
    return fig


def lts_figure(
    lts: np.ndarray,
    mu: np.ndarray,
    sigma: np.ndarray,
    *,
    kept: Sequence[int],
    flagged: Sequence[int],
    class_means: tuple[np.ndarray, np.ndarray] | None = None,
    title: str,
    height: int = 520,
) -> go.Figure:
    """LTS per layer with the calibration band μ ± 2σ, flagged layers (red) and kept layers (shaded).

    Args:
        lts, mu, sigma: ``(L1,)`` rows ``0 = emb … L``.
        class_means: calibration mean LTS of the memorised and the grounded prompts (thin lines).
    """
    x = np.asarray(lts, dtype=np.float64)
    m, s = np.asarray(mu, dtype=np.float64), np.asarray(sigma, dtype=np.float64)
    if not (x.shape == m.shape == s.shape) or x.ndim != 1:
        raise ValueError(f"lts, mu and sigma must be 1-D of one shape, got {x.shape}, {m.shape}, {s.shape}")
    rows = np.arange(x.size)
    labels = [row_label(r) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=rows, y=m + 2 * s, mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip"))
    fig.add_trace(
        go.Scatter(
            x=rows,
            y=m - 2 * s,
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=BAND_COLOR,
            name="calibration μ ± 2σ",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=rows,
            y=m,
            mode="lines",
            line={"color": "#777", "dash": "dot", "width": 1},
            name="calibration μ",
            hoverinfo="skip",
        )
    )
    if class_means is not None:
        for values, name, color in (
            (class_means[0], "mean of memorised calibration prompts", MEMORIZED_COLOR),
            (class_means[1], "mean of grounded calibration prompts", GROUNDED_COLOR),
        ):
            fig.add_trace(
                go.Scatter(
                    x=rows,
                    y=np.asarray(values, dtype=np.float64),
                    mode="lines",
                    line={"color": color, "width": 1},
                    name=name,
                    hoverinfo="skip",
                    opacity=0.7,
                )
            )
    z = np.divide(x - m, s, out=np.zeros_like(x), where=s > 0)
    custom = np.array(list(zip(labels, z, m - 2 * s, m + 2 * s, strict=True)), dtype=object)
    fig.add_trace(
        go.Scatter(
            x=rows,
            y=x,
            mode="lines+markers",
            name="this run",
            line={"color": RETRIEVAL_COLOR, "width": 2},
            marker={"size": 6},
            customdata=custom,
            hovertemplate="layer %{customdata[0]}<br>LTS = %{y:.3f}<br>z = %{customdata[1]:.2f}<br>"
            "band [%{customdata[2]:.3f}, %{customdata[3]:.3f}]<extra></extra>",
        )
    )
    flagged = [int(i) for i in flagged]
    if flagged:
        fig.add_trace(
            go.Scatter(
                x=flagged,
                y=x[flagged],
                mode="markers",
                name="outside μ ± 2σ (flagged)",
                marker={"color": FLAG_COLOR, "size": 12, "symbol": "x"},
                hoverinfo="skip",
            )
        )
    for i, row in enumerate(sorted(int(k) for k in kept)):
        fig.add_vrect(x0=row - 0.5, x1=row + 0.5, fillcolor=KEPT_COLOR, line_width=0, layer="below")
        if i == 0:
            fig.add_trace(
                go.Scatter(
                    x=[None],
                    y=[None],
                    mode="markers",
                    name="kept layer (variance ratio > 0.01)",
                    marker={"color": KEPT_COLOR.replace("0.13", "0.6"), "symbol": "square", "size": 12},
                )
            )
    fig.update_layout(
        title={"text": escape_label(title)},
        height=height,
        margin={"l": 60, "r": 20, "t": 50, "b": 120},
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0},
    )
    fig.update_xaxes(title_text="layer (emb = embeddings)", **_row_axis(x.size))
    fig.update_yaxes(title_text="LTS = ⟨d_ℓ, v_ℓ⟩", zeroline=True)
    return fig


def baselines_figure(l2: np.ndarray, lens_kl: np.ndarray, *, height: int = 440) -> go.Figure:
    """‖d_ℓ‖ (magnitude baseline) and the logit-lens KL per layer, on the same layer axis."""
    a, b = np.asarray(l2, dtype=np.float64), np.asarray(lens_kl, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"l2 and lens_kl must be 1-D of one shape, got {a.shape} and {b.shape}")
    rows = np.arange(a.size)
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        subplot_titles=("L2 norm ‖d_ℓ‖ of the displacement", "logit-lens KL(P_rag,ℓ ‖ P_para,ℓ) (nats)"),
    )
    fig.add_trace(
        go.Bar(
            x=rows,
            y=a,
            marker_color="#7f8c8d",
            name="‖d_ℓ‖",
            hovertemplate="layer %{customdata}<br>‖d‖ = %{y:.3f}<extra></extra>",
            customdata=[row_label(r) for r in rows],
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=rows,
            y=b,
            mode="lines+markers",
            line={"color": "#6a3d9a"},
            name="logit-lens KL",
            hovertemplate="layer %{customdata}<br>KL = %{y:.4f} nats<extra></extra>",
            customdata=[row_label(r) for r in rows],
        ),
        row=2,
        col=1,
    )
    fig.update_layout(height=height, margin={"l": 60, "r": 20, "t": 50, "b": 50}, showlegend=False)
    fig.update_xaxes(**_row_axis(a.size))
    fig.update_xaxes(title_text="layer (emb = embeddings)", row=2, col=1)
    fig.update_yaxes(rangemode="tozero")
    return fig


def position_heatmap(
    values: np.ndarray,
    answer_tokens: Sequence[str],
    *,
    title: str,
    colorbar: str,
    colorscale: str = "Viridis",
    zmid: float | None = None,
    height: int = 560,
) -> go.Figure:
    """A layer × answer-position heatmap (rows 0 = emb … L; column t predicts answer token t)."""
    z = np.asarray(values, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] != max(1, len(answer_tokens)):
        raise ValueError(f"values must be (layers + 1, {len(answer_tokens)}), got shape {z.shape}")
    labels = [f"t={t} · {token_label(tok)}" for t, tok in enumerate(answer_tokens)] or ["t=0"]
    custom = np.empty(z.shape, dtype=object)
    for r in range(z.shape[0]):
        for t in range(z.shape[1]):
            custom[r, t] = f"layer {row_label(r)} · {labels[t]}"
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(z.shape[1])),
            y=list(range(z.shape[0])),
            colorscale=colorscale,
            zmid=zmid,
            customdata=custom,
            hovertemplate="%{customdata}<br>" + escape_label(colorbar) + " = %{z:.4f}<extra></extra>",
            colorbar={"title": {"text": escape_label(colorbar)}},
        )
    )
    fig.update_layout(title={"text": escape_label(title)}, height=height, margin={"l": 60, "r": 20, "t": 60, "b": 110})
    fig.update_xaxes(
        title_text="answer position (the step that predicts that token)", tickangle=-60, **_token_ticks(labels)
    )
    fig.update_yaxes(title_text="layer", **_row_axis(z.shape[0]))
    return fig


def lens_figure(
    logprob_rag: np.ndarray, logprob_para: np.ndarray, kl: np.ndarray, *, answer_token: str, height: int = 440
) -> go.Figure:
    """Per layer at one position: p(answer token) on each path (top) and the logit-lens KL (bottom)."""
    a, b, k = (np.asarray(v, dtype=np.float64) for v in (logprob_rag, logprob_para, kl))
    if not (a.shape == b.shape == k.shape) or a.ndim != 1:
        raise ValueError(f"arrays must be 1-D of one shape, got {a.shape}, {b.shape}, {k.shape}")
    rows = np.arange(a.size)
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        row_heights=[0.6, 0.4],
        subplot_titles=(
            f"logit-lens probability of the answer token {token_label(answer_token)}",
            "logit-lens KL(P_rag,ℓ ‖ P_para,ℓ) (nats)",
        ),
    )
    labels = [row_label(r) for r in rows]
    for values, name, color in ((a, "retrieval path", RETRIEVAL_COLOR), (b, "parametric path", PARAMETRIC_COLOR)):
        fig.add_trace(
            go.Scatter(
                x=rows,
                y=np.exp(values),
                mode="lines+markers",
                name=name,
                line={"color": color},
                customdata=labels,
                hovertemplate="layer %{customdata}<br>p = %{y:.4f}<extra>" + escape_label(name) + "</extra>",
            ),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Scatter(
            x=rows,
            y=k,
            mode="lines+markers",
            line={"color": "#6a3d9a"},
            name="KL",
            showlegend=False,
            customdata=labels,
            hovertemplate="layer %{customdata}<br>KL = %{y:.4f}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    fig.update_layout(
        height=height,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.06, "x": 0},
    )
    fig.update_xaxes(**_row_axis(a.size))
    fig.update_xaxes(title_text="layer (emb = embeddings)", row=2, col=1)
    fig.update_yaxes(range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    return fig


def classifier_frame(report: dict[str, Any]) -> pd.DataFrame:
    """The cross-validated classifier report as a table (one row per feature set)."""
    rows = []
    for name, m in (report.get("feature_sets") or {}).items():
        rows.append(
            {
                "features": FEATURE_SET_LABELS.get(name, name),
                "AUC": m["auc"],
                "95% CI low": m["ci95"][0],
                "95% CI high": m["ci95"][1],
                "fold AUC mean": m["fold_auc_mean"],
                "fold AUC std": m["fold_auc_std"],
                "features used": m["n_features"],
            }
        )
    return pd.DataFrame(rows)


def layer_table(
    lts: dict[str, np.ndarray],
    l2: np.ndarray,
    lens_kl: np.ndarray,
    *,
    kept: Sequence[int],
    flagged: dict[str, Sequence[int]],
    evr: np.ndarray | None = None,
) -> pd.DataFrame:
    """One row per hidden-state row: LTS along each direction (and whether flagged), ‖d‖, lens KL, kept."""
    n = len(l2)
    data: dict[str, Any] = {"layer": [row_label(r) for r in range(n)], "kept": [r in set(kept) for r in range(n)]}
    if evr is not None:
        data["variance ratio"] = np.asarray(evr, dtype=np.float64)
    for name, values in lts.items():
        data[f"LTS {name}"] = np.asarray(values, dtype=np.float64)
        data[f"flagged {name}"] = [r in set(flagged.get(name, [])) for r in range(n)]
    data["‖d‖"] = np.asarray(l2, dtype=np.float64)
    data["logit-lens KL"] = np.asarray(lens_kl, dtype=np.float64)
    return pd.DataFrame(data)


def projection_frame(
    top_tokens: Sequence[Sequence[str]],
    bottom_tokens: Sequence[Sequence[str]],
    *,
    kept: Sequence[int],
    defined: Sequence[bool],
) -> pd.DataFrame:
    """Vocabulary back-projection per layer: the tokens at both ends of the direction (sign is arbitrary)."""
    rows = []
    for r, (top, bottom) in enumerate(zip(top_tokens, bottom_tokens, strict=True)):
        rows.append(
            {
                "layer": row_label(r),
                "kept": r in set(kept),
                "+ end (highest W_U·v)": " · ".join(display_token(t) for t in top)
                if defined[r]
                else "— (no direction)",
                "− end (lowest W_U·v)": " · ".join(display_token(t) for t in bottom) if defined[r] else "—",
            }
        )
    return pd.DataFrame(rows)


def lens_frame(
    topk_rag: Sequence[Sequence[tuple[str, float]]],
    topk_para: Sequence[Sequence[tuple[str, float]]],
    kl: np.ndarray,
    p_answer_rag: np.ndarray,
    p_answer_para: np.ndarray,
) -> pd.DataFrame:
    """Logit lens at one position, per layer: each path's top-k (token p), KL, p(answer token)."""

    def fmt(row: Sequence[tuple[str, float]]) -> str:
        return "  ".join(f"{display_token(t)} {p:.2f}" for t, p in row)

    n = len(kl)
    return pd.DataFrame(
        {
            "layer": [row_label(r) for r in range(n)],
            "retrieval top-k": [fmt(r) for r in topk_rag],
            "parametric top-k": [fmt(r) for r in topk_para],
            "top-1 differs": [bool(a and b and a[0][0] != b[0][0]) for a, b in zip(topk_rag, topk_para, strict=True)],
            "KL (nats)": np.asarray(kl, dtype=np.float64),
            "p(answer) retrieval": np.asarray(p_answer_rag, dtype=np.float64),
            "p(answer) parametric": np.asarray(p_answer_para, dtype=np.float64),
        }
    )
