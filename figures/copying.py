"""The Attention page's copying-heads figure: a layer × head map of the attention on the answer span's occurrence in
the context, the heads of largest weight marked (pure plotly; :mod:`core.methods.copying` computes it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go

from figures.attention import head_heatmap

if TYPE_CHECKING:
    from core.methods.copying import CopyingHeads

COPY_COLORBAR = "attention on the span in the context"


def copying_figure(heads: CopyingHeads, *, height: int = 620) -> go.Figure:
    """The copy weight of every head (``heads.copy``, ``(layers, heads)``), the top heads marked with a dot.

    Raises:
        ValueError: a result without weights (the span does not occur in the context: nothing to draw).
    """
    if heads.copy is None:
        raise ValueError(f"no copy weights to draw: {heads.note}")
    marks = np.zeros(heads.copy.shape, dtype=bool)
    for layer, head, _ in heads.top:
        marks[layer, head] = True
    return head_heatmap(
        heads.copy,
        title=f"Attention from the step that generates “{heads.span}” to “{heads.phrase}” in the context",
        colorbar=COPY_COLORBAR,
        colorscale="Viridis",
        marks=marks,
        mark_label=f"one of the {len(heads.top)} heads of largest weight",
        height=height,
    )


def top_heads_rows(heads: CopyingHeads) -> list[dict[str, float | int]]:
    """One row per top head: its layer, head, weight on the span's occurrence, on the whole context, and the span's
    share of its context attention (``NaN`` where it puts none on the context)."""
    if heads.copy is None or heads.context is None:
        return []
    rows = []
    for layer, head, weight in heads.top:
        context = float(heads.context[layer, head])
        rows.append(
            {
                "layer": layer,
                "head": head,
                "on the span": weight,
                "on the context": context,
                "span share of the context's": weight / context if context > 0 else float("nan"),
            }
        )
    return rows
