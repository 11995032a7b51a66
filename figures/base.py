"""Pure figure and table builders for the result views (plotly / pandas only: no Streamlit, no model).

Tokens are user- or model-generated text. Plotly interprets a subset of HTML in tick labels, hover labels
and annotations, so every token string placed in a figure goes through :func:`escape_label` (``&``, ``<``
and ``>`` become entities that plotly draws literally). Tables are rendered by the data grid as plain text,
so they only get :func:`display_token`'s visible whitespace.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.engine.result import DualPathResult

RETRIEVAL_TITLE = "Retrieval path (query + context)"
PARAMETRIC_TITLE = "Parametric path (query only)"
PATH_TITLES = {"retrieval": RETRIEVAL_TITLE, "parametric": PARAMETRIC_TITLE}
"""Each path's title, as the pages and the notebook API's figures name it (:mod:`components.widgets` re-exports it)."""
RETRIEVAL_COLOR = "#2f5d8a"
PARAMETRIC_COLOR = "#d9822b"
KL_COLOR = "#6a3d9a"
KL_OUTSIDE_COLOR = "#c9bfd8"
MAX_TICK_LABELS = 80
"""Above this many answer tokens only every k-th position gets a tick label."""

_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


def top_legend(y: float = 1.02) -> dict[str, Any]:
    """A horizontal, left-aligned legend above the plot (its bottom at ``y``, in paper units)."""
    return {"orientation": "h", "yanchor": "bottom", "y": y, "x": 0}


def bottom_legend() -> dict[str, Any]:
    """A horizontal legend at the very bottom of the figure (container coordinates), under the x-axis title and
    its tick labels whatever their height; plotly grows the bottom margin to fit it when it wraps."""
    return {"orientation": "h", "yref": "container", "yanchor": "bottom", "y": 0, "x": 0}


def set_layout(
    fig: go.Figure, *, height: int, top: int, bottom: int, left: int = 60, right: int = 20, **layout: Any
) -> go.Figure:
    """The figures' common layout: ``height`` and the margins in pixels; ``layout`` goes on to
    ``update_layout`` (``legend=top_legend()``, ``title=…``, axis titles …). Returns ``fig``."""
    fig.update_layout(height=height, margin={"l": left, "r": right, "t": top, "b": bottom}, **layout)
    return fig


def two_rows(
    top_title: str, bottom_title: str, *, spacing: float, row_heights: Sequence[float] | None = None
) -> go.Figure:
    """Two stacked plots (rows 1 and 2) sharing the x axis, each under its title."""
    return make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=spacing,
        row_heights=None if row_heights is None else list(row_heights),
        subplot_titles=(top_title, bottom_title),
    )


def note(fig: go.Figure, text: str) -> go.Figure:
    """Write ``text`` in the middle of a figure with nothing to plot (e.g. "No answer tokens"). Returns ``fig``."""
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def line_trace(x: Any, y: Any, name: str, color: str | None, hover: str | None, **trace: Any) -> go.Scatter:
    """One series drawn as lines and markers (``mode=`` for another) in ``color`` (plotly's where ``None``),
    ``hover`` its whole hover template; ``trace`` goes on to ``go.Scatter`` (``line_dash``, ``line_width``,
    ``customdata``, ``marker`` …)."""
    mode = trace.pop("mode", "lines+markers")
    return go.Scatter(x=x, y=y, name=name, mode=mode, line_color=color, hovertemplate=hover, **trace)


def cell_grid(
    z: np.ndarray, text: Any, customdata: Any, *, hovertemplate: str, gap: int, textfont: dict[str, Any], **heatmap: Any
) -> go.Figure:
    """Text laid out as a grid of colored cells, read left to right and top to bottom: a heatmap whose cells show
    ``text`` (already escaped), axes hidden, row 0 on top.

    Args:
        z, text, customdata: ``(rows, per_row)`` values, cell texts and hover data (NaN / ``""`` past the end).
        gap: pixels between cells.
        heatmap: the rest of the heatmap (``colorscale``, ``zmin``, ``zmax``, ``colorbar`` or ``showscale``).
    """
    fig = go.Figure(
        go.Heatmap(
            z=z,
            text=text,
            texttemplate="%{text}",
            textfont=textfont,
            customdata=customdata,
            hovertemplate=hovertemplate,
            xgap=gap,
            ygap=gap,
            **heatmap,
        )
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    return fig


def display_token(token: str) -> str:
    """A token with its whitespace made visible (``" Paris"`` → ``"␣Paris"``); ``""`` → ``"∅"``."""
    return token.translate(_WHITESPACE) if token else "∅"


def escape_label(text: str) -> str:
    """Escape ``&``, ``<`` and ``>`` so plotly shows ``text`` literally in labels and hovers."""
    return html.escape(text, quote=False)


def token_label(token: str) -> str:
    """A token ready for a plotly label: visible whitespace, then escaped."""
    return escape_label(display_token(token))


def short_token_label(token: str, most: int) -> str:
    """:func:`token_label` cut to at most ``most`` visible characters (the last one "…") for a fixed-width cell.

    The cut is made before escaping, so an entity such as ``&lt;`` is never split.
    """
    shown = display_token(token)
    if len(shown) > most:
        shown = shown[: max(most - 1, 1)] + "…"
    return escape_label(shown)


def position_label(tokens: Sequence[str], position: int) -> str:
    """``"t=3 · ␣Paris"``: a plain-text label for a position selector (not for plotly)."""
    return f"t={position} · {display_token(tokens[position])}"


def default_position(token_kl: np.ndarray) -> int:
    """The position to show first: where the two paths diverge most (0 for an empty answer)."""
    kl = np.asarray(token_kl, dtype=np.float64)
    return int(np.argmax(kl)) if kl.size else 0


def _kl_bars(fig: go.Figure, positions: np.ndarray, kl: np.ndarray, labels: list[str], window: int) -> None:
    """KL_t bars in the top row: dark inside RePCS' window (summed into Z), pale beyond it."""
    cumulative = np.cumsum(kl)
    custom = np.array(list(zip(labels, cumulative, strict=True)), dtype=object)
    hover_kl = "t=%{x} · %{customdata[0]}<br>KL = %{y:.4f} nats<br>Σ KL up to t = %{customdata[1]:.3f}<extra></extra>"
    for mask, name, color in (
        (positions < window, f"KL_t, summed into Z (t < T = {window})", KL_COLOR),
        (positions >= window, "KL_t beyond the window (not in Z)", KL_OUTSIDE_COLOR),
    ):
        if not mask.any():
            continue
        fig.add_trace(
            go.Bar(
                x=positions[mask],
                y=kl[mask],
                name=name,
                marker_color=color,
                customdata=custom[mask],
                hovertemplate=hover_kl,
            ),
            row=1,
            col=1,
        )


def _entropy_lines(
    fig: go.Figure, positions: np.ndarray, labels: list[str], h_retrieval: np.ndarray, h_parametric: np.ndarray
) -> None:
    """Both paths' next-token entropies in the bottom row."""
    for values, name, color in (
        (h_retrieval, "Retrieval path entropy H(P_rag)", RETRIEVAL_COLOR),
        (h_parametric, "Parametric path entropy H(P_para)", PARAMETRIC_COLOR),
    ):
        hover = "t=%{x} · %{customdata}<br>" + escape_label(name) + " = %{y:.3f} nats<extra></extra>"
        trace = line_trace(positions, values, name, color, hover, line_width=2, marker={"size": 5}, customdata=labels)
        fig.add_trace(trace, row=2, col=1)


def _window_and_ticks(fig: go.Figure, positions: np.ndarray, labels: list[str], window: int) -> None:
    """A dashed line where the window ends (when it ends inside the answer) and at most MAX_TICK_LABELS ticks."""
    n = len(labels)
    if window < n:
        fig.add_vline(x=window - 0.5, line_dash="dash", line_color="#555", row="all", col=1)
        fig.add_annotation(
            x=window - 0.5, y=1, yref="y domain", text=f"T = {window}", showarrow=False, xanchor="left", row=1, col=1
        )
    stride = max(1, int(np.ceil(n / MAX_TICK_LABELS)))
    tick_positions = positions[::stride]
    fig.update_xaxes(
        tickmode="array",
        tickvals=tick_positions.tolist(),
        ticktext=[labels[i] for i in tick_positions],
        tickangle=-60,
        range=[-0.6, n - 0.4],
    )


def kl_entropy_figure(
    tokens: Sequence[str],
    token_kl: np.ndarray,
    entropy_retrieval: np.ndarray,
    entropy_parametric: np.ndarray,
    score_window: int | None = None,
    *,
    height: int = 560,
) -> go.Figure:
    """Per-token KL bars (top row) and both paths' next-token entropies (bottom row), aligned on the answer.

    Args:
        tokens: the retrieval answer's tokens, length n (position t predicts ``tokens[t]`` on both paths).
        token_kl: KL_t = KL(P_rag,t ‖ P_para,t), shape ``(n,)``, nats.
        entropy_retrieval, entropy_parametric: H(P_rag,t), H(P_para,t), shape ``(n,)``, nats.
        score_window: RePCS' T. Bars of positions ``t < T`` (summed into Z) are drawn dark, later ones pale,
            with a dashed line where the window ends.

    Raises:
        ValueError: when the arrays and the tokens differ in length.
    """
    kl = np.asarray(token_kl, dtype=np.float64)
    h_retrieval = np.asarray(entropy_retrieval, dtype=np.float64)
    h_parametric = np.asarray(entropy_parametric, dtype=np.float64)
    n = len(tokens)
    if not (kl.shape == h_retrieval.shape == h_parametric.shape == (n,)):
        raise ValueError(
            f"{n} tokens but arrays of shapes {kl.shape}, {h_retrieval.shape}, {h_parametric.shape}; "
            f"expected ({n},) each"
        )
    fig = two_rows(
        "KL(P_rag ‖ P_para) per answer token (nats)",
        "Next-token entropy of each path (nats)",
        spacing=0.09,
        row_heights=(0.6, 0.4),
    )
    set_layout(fig, height=height, top=60, bottom=90, legend=top_legend(1.06), bargap=0.15)
    if n == 0:
        return note(fig, "No answer tokens to show")

    positions = np.arange(n)
    labels = [token_label(t) for t in tokens]
    window = n if score_window is None else max(0, min(int(score_window), n))
    _kl_bars(fig, positions, kl, labels, window)
    _entropy_lines(fig, positions, labels, h_retrieval, h_parametric)
    _window_and_ticks(fig, positions, labels, window)
    fig.update_xaxes(title_text="answer token (position t; both paths predict the same token)", row=2, col=1)
    fig.update_yaxes(title_text="KL (nats)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="entropy (nats)", rangemode="tozero", row=2, col=1)
    return fig


def kl_entropy_figure_for(result: DualPathResult, *, height: int = 560) -> go.Figure:
    """:func:`kl_entropy_figure` for a :class:`DualPathResult`."""
    return kl_entropy_figure(
        result.answer_tokens,
        result.token_kl,
        result.retrieval.entropy,
        result.parametric.entropy,
        result.score_window,
        height=height,
    )


def topk_frame(tokens: Sequence[str], probs: Sequence[float], answer_token: str | None = None) -> pd.DataFrame:
    """One path's top-k candidates at one position as a table.

    Columns: ``rank`` (1 = most likely), ``token`` (visible whitespace), ``probability`` and ``chosen``
    (whether the candidate is the answer token actually emitted at this position).
    """
    if len(tokens) != len(probs):
        raise ValueError(f"{len(tokens)} tokens but {len(probs)} probabilities")
    return pd.DataFrame(
        {
            "rank": np.arange(1, len(tokens) + 1, dtype=np.int64),
            "token": [display_token(t) for t in tokens],
            "probability": np.asarray(probs, dtype=np.float64),
            "chosen": [answer_token is not None and t == answer_token for t in tokens],
        }
    )


def topk_frames(result: DualPathResult, position: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The retrieval and parametric top-k tables at ``position`` (both predict ``answer_tokens[position]``).

    Raises:
        ValueError: for a position outside the answer.
    """
    if not 0 <= position < result.n_tokens:
        raise ValueError(f"position must be in [0, {result.n_tokens}), got {position}")
    answer = result.answer_tokens[position]
    return (
        topk_frame(result.retrieval.topk_tokens[position], result.retrieval.topk_probs[position], answer),
        topk_frame(result.parametric.topk_tokens[position], result.parametric.topk_probs[position], answer),
    )


def topk_side_by_side(result: DualPathResult, position: int) -> pd.DataFrame:
    """Both paths' top-k at ``position`` in one table: ``rank``, then token/probability per path."""
    retrieval, parametric = topk_frames(result, position)
    k = max(len(retrieval), len(parametric))
    retrieval, parametric = retrieval.reindex(range(k)), parametric.reindex(range(k))
    return pd.DataFrame(
        {
            "rank": np.arange(1, k + 1, dtype=np.int64),
            "retrieval token": retrieval["token"].to_numpy(),
            "retrieval p": retrieval["probability"].to_numpy(),
            "parametric token": parametric["token"].to_numpy(),
            "parametric p": parametric["probability"].to_numpy(),
        }
    )
