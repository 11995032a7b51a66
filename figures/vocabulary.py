"""Figures and tables of the Vocabulary lens page: the logit lens per layer and the back-projection (pure
plotly / pandas).

Every token placed in a figure goes through :func:`figures.base.token_label` or
:func:`figures.base.display_token` so it is drawn literally.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from figures.base import (
    PARAMETRIC_COLOR,
    RETRIEVAL_COLOR,
    display_token,
    escape_label,
    line_trace,
    set_layout,
    token_label,
)
from figures.layer_axes import lens_kl_rows, row_label

if TYPE_CHECKING:
    from core.methods.internals import Internals


def lens_figure(
    logprob_rag: np.ndarray, logprob_para: np.ndarray, kl: np.ndarray, *, answer_token: str, height: int = 440
) -> go.Figure:
    """Per layer at one position: p(answer token) on each path (top) and the logit-lens KL (bottom)."""
    a, b, k = (np.asarray(v, dtype=np.float64) for v in (logprob_rag, logprob_para, kl))
    if not (a.shape == b.shape == k.shape) or a.ndim != 1:
        raise ValueError(f"arrays must be 1-D of one shape, got {a.shape}, {b.shape}, {k.shape}")
    rows = np.arange(a.size)
    fig = lens_kl_rows(
        f"logit-lens probability of the answer token {token_label(answer_token)}", k, row_heights=(0.6, 0.4)
    )
    labels = [row_label(r) for r in rows]
    for values, name, color in ((a, "retrieval path", RETRIEVAL_COLOR), (b, "parametric path", PARAMETRIC_COLOR)):
        hover = "layer %{customdata}<br>p = %{y:.4f}<extra>" + escape_label(name) + "</extra>"
        fig.add_trace(line_trace(rows, np.exp(values), name, color, hover, customdata=labels), row=1, col=1)
    # inside the top plot's upper left: above it, the legend ran into the subplot's title at narrow widths
    inside = {"x": 0.01, "y": 0.99, "xanchor": "left", "yanchor": "top", "bgcolor": "rgba(255,255,255,0.75)"}
    set_layout(fig, height=height, top=60, bottom=50, legend=inside)
    fig.update_yaxes(range=[0, 1.02], row=1, col=1)
    return fig


TOP_END = "+ end (highest W_U·v)"
BOTTOM_END = "− end (lowest W_U·v)"
END_COLUMNS = (TOP_END, BOTTOM_END)


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
                TOP_END: " · ".join(display_token(t) for t in top) if defined[r] else "— (no direction)",
                BOTTOM_END: " · ".join(display_token(t) for t in bottom) if defined[r] else "—",
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
    """Logit lens at one position, per layer: KL, p(answer token), then each path's top-k (token p).

    The short numeric columns come first so that they stay in view; the long top-k text follows.
    """

    def fmt(row: Sequence[tuple[str, float]]) -> str:
        return "  ".join(f"{display_token(t)} {p:.2f}" for t, p in row)

    n = len(kl)
    return pd.DataFrame(
        {
            "layer": [row_label(r) for r in range(n)],
            "top-1 differs": [bool(a and b and a[0][0] != b[0][0]) for a, b in zip(topk_rag, topk_para, strict=True)],
            "KL (nats)": np.asarray(kl, dtype=np.float64),
            "p(answer) retrieval": np.asarray(p_answer_rag, dtype=np.float64),
            "p(answer) parametric": np.asarray(p_answer_para, dtype=np.float64),
            "retrieval top-k": [fmt(r) for r in topk_rag],
            "parametric top-k": [fmt(r) for r in topk_para],
        }
    )


def lens_position_figure(internals: Internals, position: int, answer_tokens: Sequence[str]) -> go.Figure:
    """The Vocabulary lens page's figure of one run at answer position ``position``: the logit-lens probability of
    the answer token on both paths and the lens KL, layer by layer (the page and the notebook API call this).

    Raises:
        ValueError: ``position`` is not an answer position.
    """
    lens = internals.lens
    if not 0 <= position < min(len(answer_tokens), len(internals.answer_token_ids)):
        raise ValueError(f"position must be an answer position 0…{len(answer_tokens) - 1}, got {position}")
    return lens_figure(
        lens.retrieval.target_logprob[:, position],
        lens.parametric.target_logprob[:, position],
        lens.kl[:, position],
        answer_token=answer_tokens[position],
    )
