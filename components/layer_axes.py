"""Axes and marks shared by the internals figures (pure plotly helpers: no Streamlit, no model).

Layer axes: the attention maps use decoder layers ``0 … L−1``; hidden-state views use rows ``0 … L`` where
row 0 is the embedding output (labeled ``emb``) and row ℓ + 1 is decoder layer ℓ (labeled ``ℓ``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

FLAG_COLOR = "#c0392b"
"""Flagged layers and the selected head."""
MAX_AXIS_LABELS = 120
"""Above this many tokens on an axis only every k-th gets a tick label (all stay in the hover)."""


def row_label(row: int) -> str:
    """Label of a hidden-state row: ``emb`` for 0, else the decoder layer ``row − 1``."""
    return "emb" if row == 0 else str(row - 1)


def row_axis(n_rows: int) -> dict[str, Any]:
    """Axis settings that label ``n_rows`` hidden-state rows ``emb, 0, 1, …``."""
    return {"tickmode": "array", "tickvals": list(range(n_rows)), "ticktext": [row_label(r) for r in range(n_rows)]}


def token_ticks(labels: Sequence[str]) -> dict[str, Any]:
    """Axis settings that label token positions, thinned to at most :data:`MAX_AXIS_LABELS` ticks."""
    n = len(labels)
    stride = max(1, int(np.ceil(n / MAX_AXIS_LABELS)))
    vals = list(range(0, n, stride))
    return {"tickmode": "array", "tickvals": vals, "ticktext": [labels[i] for i in vals]}
