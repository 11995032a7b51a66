"""Figures of the Attention page: clickable layer × head maps and one head's pattern (pure plotly).

Every token placed in a figure goes through :func:`figures.base.token_label` (visible whitespace, then
HTML-escaped) so plotly draws it literally.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from figures.base import PATH_TITLES, escape_label, line_trace, token_label
from figures.layer_axes import FLAG_COLOR, token_ticks

if TYPE_CHECKING:
    from core.methods.internals import Internals
    from core.methods.lookback import LookbackAnalysis


def _click_cells(z: np.ndarray, text: np.ndarray | None, colorbar: str, mark_label: str) -> go.Scatter:
    """One transparent square marker per cell of the ``(layers, heads)`` map ``z``: what a click selects, and the
    cell's hover (its value; ``mark_label`` where ``text`` marks the cell, when ``mark_label`` is not empty)."""
    n_layers, n_heads = z.shape
    heads, layers = np.meshgrid(np.arange(n_heads), np.arange(n_layers))
    hover = "layer %{y} · head %{x}<br>" + escape_label(colorbar) + " = %{customdata:.4f}"
    if mark_label:
        hover += "<br>%{text}"
    return go.Scatter(
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
        marks: optional boolean ``(layers, heads)``; marked cells show a dot (e.g. specialized heads).
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
        # the title along the bar: on top it widened the bar and squeezed the heads' axis at 1,024 px
        colorbar={"title": {"text": escape_label(colorbar), "side": "right"}, "thickness": 14},
        text=text,
        texttemplate="%{text}" if text is not None else None,
        textfont={"color": "white", "size": 9},
        hoverinfo="skip",
    )
    cells = _click_cells(z, text, colorbar, mark_label if marks is not None else "")
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
            return round(float(y)), round(float(x))
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
    """One head's attention pattern: rows = query positions, columns = key tokens, both labeled by token.

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
    custom = np.empty((*w.shape, 2), dtype=object)
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
    fig.update_xaxes(title_text="key token (attended to)", tickangle=-60, **token_ticks(cols))
    fig.update_yaxes(title_text="query token", autorange="reversed", **token_ticks(rows))
    return fig


def lookback_heatmap(lr: np.ndarray, tokens: Sequence[str], *, title: str, height: int = 720) -> go.Figure:
    """The Lookback Lens map: one row per head (layer-major: ``L0 H0 … L0 H(H−1), L1 H0 …``), one column per
    answer token, the cell = LR of that head while that token was produced (0 = only the answer so far, 1 = only
    the context). The first column is empty: answer token 0 has no earlier answer token.

    Args:
        lr: ``(layers, heads, n)`` lookback ratios (NaN where undefined).
        tokens: the ``n`` answer tokens.

    Raises:
        ValueError: a map that is not 3-D or tokens of another length.
    """
    x = np.asarray(lr, dtype=np.float64)
    if x.ndim != 3 or x.shape[-1] != len(tokens):
        raise ValueError(f"lr must be (layers, heads, {len(tokens)}), got shape {x.shape}")
    n_layers, n_heads, n = x.shape
    z = x.reshape(n_layers * n_heads, n)
    cols = [token_label(t) for t in tokens]
    custom = np.empty((*z.shape, 2), dtype=object)
    for r in range(z.shape[0]):
        custom[r, :, 0] = f"layer {r // n_heads} · head {r % n_heads}"
    for t, c in enumerate(cols):
        custom[:, t, 1] = f"t={t}: {c}"
    fig = go.Figure(
        go.Heatmap(
            z=np.where(np.isfinite(z), z, None),
            x=list(range(n)),
            y=list(range(z.shape[0])),
            zmin=0.0,
            zmax=1.0,
            colorscale="Cividis",
            customdata=custom,
            hovertemplate="%{customdata[0]}<br>answer token %{customdata[1]}<br>lookback ratio %{z:.3f}<extra></extra>",
            colorbar={"title": {"text": "lookback ratio", "side": "right"}, "thickness": 14},
        )
    )
    stride = max(1, int(np.ceil(n_layers / 15)))
    fig.update_layout(title={"text": escape_label(title)}, height=height, margin={"l": 70, "r": 20, "t": 60, "b": 120})
    fig.update_xaxes(title_text="answer token (the step that produced it)", tickangle=-60, **token_ticks(cols))
    fig.update_yaxes(
        title_text="layer (heads within each layer)",
        autorange="reversed",
        tickmode="array",
        tickvals=[layer * n_heads for layer in range(0, n_layers, stride)],
        ticktext=[f"L{layer}" for layer in range(0, n_layers, stride)],
    )
    return fig


def lookback_curve(
    curve: np.ndarray,
    tokens: Sequence[str],
    windows: Sequence[tuple[int, int]],
    window_mean: np.ndarray,
    window_p: np.ndarray,
    *,
    tau: float | None = None,
    height: int = 420,
) -> go.Figure:
    """Where in the answer the model stopped looking back: the head-averaged ratio per answer token, the mean of
    each sliding window (plotted at its last token) and, with a classifier, each window's P(recalled) and τ.

    Raises:
        ValueError: lengths that do not match.
    """
    c = np.asarray(curve, dtype=np.float64)
    if c.shape != (len(tokens),) or len(windows) != len(window_mean):
        raise ValueError("curve, tokens, windows and window means must match")
    if len(window_p) not in (0, len(windows)):
        raise ValueError("window_p must be empty or one per window")
    labels = [token_label(t) for t in tokens]
    ends = [b - 1 for _, b in windows]
    fig = go.Figure()
    hover = "t=%{x}: %{customdata}<br>lookback ratio %{y:.3f}<extra></extra>"
    per_token = np.where(np.isfinite(c), c, None)
    fig.add_trace(
        line_trace(list(range(len(c))), per_token, "per token (mean over heads)", None, hover, customdata=labels)
    )
    dotted = {"mode": "lines", "line_dash": "dot"}
    window_curves = (  # (values, name, color, what, style): each drawn when there are windows / a classifier
        (window_mean, "window mean (8 tokens, at its last token)", None, "mean lookback ratio", dotted),
        (window_p, "window P(recalled)", FLAG_COLOR, "P(recalled)", {"yaxis": "y2"}),
    )
    for values, name, color, what, style in window_curves:
        if len(values):
            hover = f"window ending at t=%{{x}}<br>{what} %{{y:.3f}}<extra></extra>"
            fig.add_trace(line_trace(ends, np.asarray(values, dtype=np.float64), name, color, hover, **style))
    if len(window_p) and tau is not None:
        fig.add_hline(y=float(tau), yref="y2", line={"color": FLAG_COLOR, "dash": "dash", "width": 1})
    fig.update_layout(
        height=height,
        margin={"l": 60, "r": 60, "t": 40, "b": 120},
        legend={"orientation": "h", "y": -0.45, "x": 0},
        yaxis={"title": {"text": "lookback ratio"}, "range": [0, 1]},
        yaxis2={
            "title": {"text": "P(recalled)"},
            "range": [0, 1],
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
        },
    )
    fig.update_xaxes(title_text="answer token", tickangle=-60, **token_ticks(labels))
    return fig


# ----------------------------------------------------------------------------------------------------------
# The Attention page's figures of one run, assembled from its analysis: the page and the notebook API
# (read_or_recall) both call these, so both draw the same figure.


def entropy_map_figure(
    internals: Internals, path: str, where: int | str, tau: float, *, selected: tuple[int, int] | None = None
) -> go.Figure:
    """The attention entropy of every layer and head on one path at ``where`` (an answer position, or ``"mean"``),
    heads below ``tau`` nats marked as specialized (RADAR's rule)."""
    values = internals.entropy_at(path, where)
    return head_heatmap(
        values,
        title=PATH_TITLES[path],
        colorbar="entropy (nats)",
        colorscale="Viridis",
        marks=values < tau,
        mark_label=f"specialized (H < {tau:.1f})",
        selected=selected,
    )


def entropy_diff_figure(
    internals: Internals, where: int | str, *, selected: tuple[int, int] | None = None
) -> go.Figure:
    """Entropy(retrieval) − entropy(parametric) per layer and head at ``where``."""
    diff = internals.entropy_at("retrieval", where) - internals.entropy_at("parametric", where)
    return head_heatmap(
        diff,
        title="Entropy(retrieval) − entropy(parametric)",
        colorbar="Δ entropy (nats)",
        colorscale="RdBu",
        zmid=0.0,
        selected=selected,
        height=560,
    )


def context_mass_figure(
    internals: Internals, where: int | str, *, selected: tuple[int, int] | None = None
) -> go.Figure:
    """The share of the retrieval path's attention that lands on the context tokens, per layer and head."""
    return head_heatmap(
        internals.mass_at("retrieval", "context", where),
        title="Attention mass on the context (retrieval path)",
        colorbar="share on context",
        colorscale="YlOrRd",
        selected=selected,
        height=560,
    )


def head_pattern_figure(
    pattern: np.ndarray, tokens: Sequence[str], rows: Sequence[int], layer: int, head: int, *, all_rows: bool = False
) -> go.Figure:
    """One head's attention pattern: the answer steps' rows (``rows``: the page's ``internals.rows(path)``), or every
    row from the first with ``all_rows``; columns are the prompt and answer tokens."""
    first_row = 0 if all_rows else int(rows[0])
    last_row = int(rows[-1]) + 1
    return pattern_heatmap(
        pattern[first_row:last_row],
        list(tokens[first_row:last_row]),
        tokens,
        row_offset=first_row,
        title=f"Layer {layer}, head {head}: attention of each query token (rows) over the tokens (columns)",
    )


def lookback_figures(view: LookbackAnalysis) -> tuple[go.Figure, go.Figure | None]:
    """The Lookback Lens map (heads × answer tokens) and, when the answer has windows, its curve."""
    fig = lookback_heatmap(
        view.lr, view.answer_tokens, title="Lookback ratio per head (rows) and answer token (columns)"
    )
    if not view.windows:
        return fig, None
    return fig, lookback_curve(
        view.curve, view.answer_tokens, view.windows, view.window_mean, view.window_p, tau=view.tau
    )
