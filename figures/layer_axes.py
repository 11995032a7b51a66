"""Axes, marks and a figure frame shared by the internals figures (pure plotly helpers: no Streamlit, no model).

Layer axes: the attention maps use decoder layers ``0 … L−1``; hidden-state views use rows ``0 … L`` where
row 0 is the embedding output (labeled ``emb``) and row ℓ + 1 is decoder layer ℓ (labeled ``ℓ``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from figures.base import KL_COLOR, two_rows

FLAG_COLOR = "#c0392b"
"""Flagged layers and the selected head."""
LENS_KL_TITLE = "logit-lens KL(P_rag,ℓ ‖ P_para,ℓ) (nats)"
MAX_AXIS_LABELS = 36
"""Above this many tokens on an axis only every k-th gets a tick label (all stay in the hover): a chart at
1,024 px has room for about 36 slanted or stacked token labels (~14 px each) before they overlap."""
MAX_TICK_CHARS = 14
"""A tick label longer than this is cut with "…" (the hover shows the whole token)."""


def row_label(row: int) -> str:
    """Label of a hidden-state row: ``emb`` for 0, else the decoder layer ``row − 1``."""
    return "emb" if row == 0 else str(row - 1)


def row_names(rows: Sequence[int]) -> str:
    """Hidden-state rows in words, as layer indices (never read as a count): ``"layer 2"``, ``"layers 2, 5 and
    7"``, ``"the embeddings and layer 0"``."""
    emb = ["the embeddings"] if 0 in rows else []
    layers = [str(r - 1) for r in rows if r != 0]
    named = emb + ([f"layer {layers[0]}"] if len(layers) == 1 else [f"layers {_join(layers)}"] if layers else [])
    return _join(named)


def _join(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}" if words else ""


def row_axis(n_rows: int) -> dict[str, Any]:
    """Axis settings that label ``n_rows`` hidden-state rows ``emb, 0, 1, …``."""
    return {"tickmode": "array", "tickvals": list(range(n_rows)), "ticktext": [row_label(r) for r in range(n_rows)]}


def token_ticks(labels: Sequence[str]) -> dict[str, Any]:
    """Axis settings that label token positions, thinned to at most :data:`MAX_AXIS_LABELS` ticks."""
    n = len(labels)
    stride = max(1, int(np.ceil(n / MAX_AXIS_LABELS)))
    vals = list(range(0, n, stride))
    text = [_short(labels[i]) for i in vals]
    return {"tickmode": "array", "tickvals": vals, "ticktext": text, "tickfont": {"size": 11}, "automargin": True}


def _short(label: str) -> str:
    """A tick label cut to :data:`MAX_TICK_CHARS` characters (an escaped entity is never cut in half)."""
    if len(label) <= MAX_TICK_CHARS:
        return label
    cut = label[: MAX_TICK_CHARS - 1]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"


def lens_kl_rows(top_title: str, lens_kl: np.ndarray, *, row_heights: Sequence[float] | None = None) -> go.Figure:
    """Two stacked plots over the hidden-state rows ``emb, 0, 1, …``: the caller's on top (add its traces to
    row 1), the logit-lens KL between the two paths below.

    Args:
        top_title: the top plot's title.
        lens_kl: KL(P_rag,ℓ ‖ P_para,ℓ) per row, shape ``(L + 1,)``, nats.
        row_heights: the two plots' shares of the height (equal when ``None``).
    """
    kl = np.asarray(lens_kl, dtype=np.float64)
    if kl.ndim != 1:
        raise ValueError(f"lens_kl must be 1-D (one value per hidden-state row), got shape {kl.shape}")
    rows = np.arange(kl.size)
    fig = two_rows(top_title, LENS_KL_TITLE, spacing=0.12, row_heights=row_heights)
    fig.add_trace(
        go.Scatter(
            x=rows,
            y=kl,
            mode="lines+markers",
            line={"color": KL_COLOR},
            name="logit-lens KL",
            showlegend=False,
            customdata=[row_label(r) for r in rows],
            hovertemplate="layer %{customdata}<br>KL = %{y:.4f} nats<extra></extra>",
        ),
        row=2,
        col=1,
    )
    fig.update_xaxes(**row_axis(kl.size))
    fig.update_xaxes(title_text="layer (emb = embeddings)", row=2, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    return fig
