"""Figures and tables of ReDeEP's per-token view (pure plotly/pandas: a view in, a figure out)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.methods.redeep import ReDeEPView

ROWS = (
    ("ecs", "ECS (read)", "#1f77b4"),
    ("pks", "PKS (recall, nats)", "#d62728"),
    ("kl", "KL between the paths (nats)", "#7f7f7f"),
)


def token_labels(tokens: list[str]) -> list[str]:
    """``"0 Paris"``-style axis labels (position first, so repeated tokens stay distinct)."""
    return [f"{i} {t.strip() or '␣'}"[:24] for i, t in enumerate(tokens)]


def token_figure(view: ReDeEPView) -> go.Figure:
    """Three stacked bar charts over the answer tokens: ECS of the chosen heads, PKS of the chosen layers and the
    dual path's KL (one shared token axis)."""
    x = token_labels(view.trace.tokens)
    values = {"ecs": view.ecs, "pks": view.pks, "kl": view.kl}
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=[r[1] for r in ROWS])
    for i, (name, label, colour) in enumerate(ROWS, start=1):
        y = values[name]
        if y is None:
            continue
        fig.add_trace(go.Bar(x=x, y=[float(v) for v in y], name=label, marker_color=colour), row=i, col=1)
    fig.update_layout(height=560, showlegend=False, margin={"l": 50, "r": 20, "t": 40, "b": 80})
    fig.update_xaxes(tickangle=-45, row=3, col=1)
    return fig


def token_frame(view: ReDeEPView) -> pd.DataFrame:
    """One row per answer token (the table and its CSV): position, token, KL, ECS, PKS, each head and layer."""
    return pd.DataFrame(view.table())


def choice_frame(view: ReDeEPView) -> pd.DataFrame:
    """The chosen heads and layers with their calibration Pearson r (and OV score where known)."""
    c = view.choice
    rows = []
    for layer, head in c.heads:
        ov = c.ov_scores[layer][head] if c.ov_scores is not None else None
        rows.append(
            {"kind": "copying head", "where": f"L{layer}.H{head}", "pearson_r": c.ecs_corr[layer][head], "ov": ov}
        )
    for layer in c.layers:
        rows.append({"kind": "knowledge layer", "where": f"L{layer}", "pearson_r": c.pks_corr[layer], "ov": None})
    return pd.DataFrame(rows)
