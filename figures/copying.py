"""The Attention page's copying-heads figure: a layer × head map of the attention on the answer span's occurrence in
the context, the heads of largest weight marked (pure plotly; :mod:`core.methods.copying` computes it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go

from figures.attention import head_heatmap

if TYPE_CHECKING:
    from core.methods.copying import CopyingHeads

COPY_COLORBAR = "attention on the span in the context"


def copying_figure(heads: CopyingHeads, *, chosen: Sequence[tuple[int, int]] = (), height: int = 620) -> go.Figure:
    """The copy weight of every head (``heads.copy``, ``(layers, heads)``): the run's top heads marked ●, the heads
    ``chosen`` on the model's calibration rows marked ○ (◉ both; chosen heads outside the map are skipped).

    Raises:
        ValueError: a result without weights (the span does not occur in the context: nothing to draw).
    """
    if heads.copy is None:
        raise ValueError(f"no copy weights to draw: {heads.note}")
    top = np.zeros(heads.copy.shape, dtype=bool)
    for layer, head, _ in heads.top:
        top[layer, head] = True
    picked = np.zeros(heads.copy.shape, dtype=bool)
    for layer, head in chosen:
        if 0 <= layer < picked.shape[0] and 0 <= head < picked.shape[1]:
            picked[layer, head] = True
    fig = head_heatmap(
        heads.copy,
        title=f"Attention from the step that generates “{heads.span}” to “{heads.phrase}” in the context",
        colorbar=COPY_COLORBAR,
        colorscale="Viridis",
        marks=top | picked,
        mark_label="marked",
        height=height,
    )
    symbols = np.where(top & picked, "◉", np.where(top, "●", np.where(picked, "○", "")))
    fig.data[0].text = symbols
    fig.data[1].text = [_MARK_HOVER.get(str(s), "") for s in symbols.ravel()]
    return fig


_MARK_HOVER = {
    "●": "one of this run's heads of largest weight",
    "○": "chosen on the model's calibration rows",
    "◉": "one of this run's heads of largest weight, and chosen on the model's calibration rows",
}


def chosen_heads_rows(heads: CopyingHeads, chosen: Sequence[tuple[int, int]]) -> list[dict[str, float | int]]:
    """One row per head chosen on calibration rows (that the map holds): its layer, head and this run's weight on the
    span's occurrence and on the whole context."""
    if heads.copy is None or heads.context is None:
        return []
    shape = heads.copy.shape
    return [
        {"layer": a, "head": b, "on the span": float(heads.copy[a, b]), "on the context": float(heads.context[a, b])}
        for a, b in chosen
        if 0 <= a < shape[0] and 0 <= b < shape[1]
    ]


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
