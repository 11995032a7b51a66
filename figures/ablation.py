"""Pure figure and table builders for the Ablations page (plotly / pandas only: no Streamlit, no model).

Every token placed in a figure goes through :func:`figures.base.token_label` (visible whitespace,
then HTML-escaped) because plotly interprets a subset of HTML in labels, cell text and hovers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.methods.ablation import NoiseGrid
from core.methods.ablation.degenerate import degeneracy
from figures.base import (
    KL_COLOR,
    PARAMETRIC_COLOR,
    RETRIEVAL_COLOR,
    cell_grid,
    escape_label,
    line_trace,
    note,
    set_layout,
    short_token_label,
    token_label,
    top_legend,
    two_rows,
)

CLEAN_COLOR = "#4d4d4d"
PERTURBED_COLOR = "#c0392b"
CHANGED_COLOR = "#f5b041"
UNCHANGED_COLOR = "#eceff1"
FLAGGED_COLOR = "#8e44ad"
TOKENS_PER_ROW = 8
# Characters a grid cell shows: 8 cells share half the page's width (about 55 px each on a 1280 px screen),
# which holds 7 monospace characters at 12 px; a longer token is cut with "…" and shown whole in its hover.
CELL_CHARS = 7


def layer_axis_labels(n_hidden: int) -> list[str]:
    """``["emb", "0", "1", …]`` for an ``(L + 1,)`` per-layer array (index ℓ + 1 = decoder layer ℓ)."""
    return ["emb"] + [str(i) for i in range(n_hidden - 1)]


def token_diff_figure(
    tokens: Sequence[str],
    changed: Sequence[bool],
    clean_tokens: Sequence[str] | None = None,
    *,
    per_row: int = TOKENS_PER_ROW,
    title: str = "",
) -> go.Figure:
    """The perturbed answer as a grid of token cells, changed tokens highlighted.

    Args:
        tokens: the perturbed answer's tokens.
        changed: for each token, whether it is outside an unchanged stretch of the clean answer
            (:func:`core.methods.ablation.token_changes`).
        clean_tokens: the clean answer's tokens (only used for the hover text of the same position).
        per_row: cells per row.

    Raises:
        ValueError: when ``tokens`` and ``changed`` differ in length.
    """
    if len(tokens) != len(changed):
        raise ValueError(f"{len(tokens)} tokens but {len(changed)} change flags")
    n = len(tokens)
    if n == 0:
        top = 30 if title else 10
        return set_layout(
            note(go.Figure(), "No answer tokens"), height=80, top=top, bottom=10, left=10, right=10, title=title or None
        )
    rows = -(-n // per_row)
    z = np.full((rows, per_row), np.nan)
    text = np.full((rows, per_row), "", dtype=object)
    hover = np.full((rows, per_row), "", dtype=object)
    for i, (tok, ch) in enumerate(zip(tokens, changed, strict=True)):
        r, c = divmod(i, per_row)
        z[r, c] = 1.0 if ch else 0.0
        text[r, c] = short_token_label(tok, CELL_CHARS)
        clean = ""
        if clean_tokens is not None and i < len(clean_tokens):
            clean = f"<br>clean answer at t={i}: {token_label(clean_tokens[i])}"
        hover[r, c] = f"t={i} · {token_label(tok)}<br>{'changed' if ch else 'as in the clean answer'}{clean}"
    fig = cell_grid(
        z,
        text,
        hover,
        hovertemplate="%{customdata}<extra></extra>",
        gap=2,
        textfont={"size": 12, "family": "monospace"},
        colorscale=[[0.0, UNCHANGED_COLOR], [1.0, CHANGED_COLOR]],
        zmin=0,
        zmax=1,
        showscale=False,
    )
    return set_layout(
        fig,
        height=12 + 38 * rows + (30 if title else 0),
        top=30 if title else 4,
        bottom=4,
        left=4,
        right=4,
        plot_bgcolor="rgba(0,0,0,0)",
        title={"text": escape_label(title), "font": {"size": 13}} if title else None,
    )


def kl_compare_figure(
    clean_tokens: Sequence[str],
    clean_kl: np.ndarray,
    perturbed_tokens: Sequence[str],
    perturbed_kl: np.ndarray,
    score_window: int | None = None,
    *,
    height: int = 360,
) -> go.Figure:
    """Per-token KL_t, clean vs perturbed (nats). Each curve is over its own retrieval answer's positions."""
    ck, pk = np.asarray(clean_kl, dtype=np.float64), np.asarray(perturbed_kl, dtype=np.float64)
    if ck.shape != (len(clean_tokens),) or pk.shape != (len(perturbed_tokens),):
        raise ValueError("each KL array needs one value per token of its answer")
    fig = go.Figure()
    for tokens, kl, name, color, dash in (
        (clean_tokens, ck, "clean", CLEAN_COLOR, "solid"),
        (perturbed_tokens, pk, "perturbed", PERTURBED_COLOR, "dot"),
    ):
        labels = [token_label(t) for t in tokens]
        hover = "t=%{x} · %{customdata}<br>KL = %{y:.4f} nats<extra>" + name + "</extra>"
        style = {"line_dash": dash, "line_width": 2, "marker": {"size": 5}}
        fig.add_trace(line_trace(np.arange(len(kl)), kl, name, color, hover, customdata=labels, **style))
    if score_window is not None and max(len(ck), len(pk)) > score_window:
        fig.add_vline(x=score_window - 0.5, line_dash="dash", line_color="#555")
    set_layout(
        fig,
        height=height,
        top=30,
        bottom=50,
        legend=top_legend(),
        xaxis_title="answer position t (of each run's own retrieval answer)",
        yaxis_title="KL(P_rag ‖ P_para) (nats)",
    )
    fig.update_yaxes(rangemode="tozero")
    return fig


def trajectory_figure(
    clean: np.ndarray,
    perturbed: np.ndarray | None,
    *,
    kind: str = "lts",
    intervened: Sequence[int] = (),
    flagged: Sequence[int] = (),
    height: int = 360,
) -> go.Figure:
    """The per-layer trajectory (LTS_ℓ or ‖d_ℓ‖₂) clean vs perturbed; intervened layers shaded.

    Args:
        clean, perturbed: shape ``(L + 1,)``; index 0 the embeddings, ℓ + 1 decoder layer ℓ.
        kind: ``"lts"`` or ``"l2"`` (axis title).
        intervened: decoder layers that were perturbed (shaded).
        flagged: decoder layers the CRM anomaly rule flags (marked).
    """
    c = np.asarray(clean, dtype=np.float64)
    if c.ndim != 1 or c.size < 2:
        raise ValueError(f"clean must be a 1-D per-layer array of length L + 1, got shape {c.shape}")
    labels = layer_axis_labels(c.size)
    x = np.arange(c.size)
    ytitle = "LTS_ℓ = ⟨d_ℓ, v_ℓ⟩" if kind == "lts" else "‖d_ℓ‖₂ (no CRM basis)"
    series = [("clean", c, CLEAN_COLOR, "solid")]
    if perturbed is not None:
        p = np.asarray(perturbed, dtype=np.float64)
        if p.shape != c.shape:
            raise ValueError(f"perturbed has shape {p.shape}, clean {c.shape}")
        series.append(("perturbed", p, PERTURBED_COLOR, "dot"))
    fig = go.Figure()
    for name, values, color, dash in series:
        hover = f"layer %{{customdata}}: %{{y:.4g}}<extra>{name}</extra>"
        fig.add_trace(line_trace(x, values, name, color, hover, line_dash=dash, line_width=2, customdata=labels))
    for layer in sorted({int(v) for v in intervened}):
        fig.add_vrect(x0=layer + 0.5, x1=layer + 1.5, fillcolor=PERTURBED_COLOR, opacity=0.08, line_width=0)
    flagged = [int(v) for v in flagged if 0 <= int(v) < c.size - 1]
    if flagged:
        fig.add_trace(
            go.Scatter(
                x=[v + 1 for v in flagged],
                y=c[[v + 1 for v in flagged]],
                name="flagged (CRM rule)",
                mode="markers",
                marker={"color": FLAGGED_COLOR, "size": 11, "symbol": "diamond-open"},
                hoverinfo="skip",
            )
        )
    stride = max(1, int(np.ceil(c.size / 40)))
    fig.update_xaxes(
        tickmode="array",
        tickvals=x[::stride].tolist(),
        ticktext=labels[::stride],
        title_text="layer (emb = embeddings; shaded = intervened)",
    )
    return set_layout(fig, height=height, top=30, bottom=50, yaxis_title=ytitle, legend=top_legend())


def dose_response_figure(grid: NoiseGrid, *, height: int = 520) -> go.Figure:
    """Z (top) and log P(first clean answer token) (bottom) against ε: mean ± 1 sd over seeds, clean dashed."""
    if grid.kind != "dose_response":
        raise ValueError(f"expected a dose–response grid, got {grid.kind!r}")
    eps = np.asarray(grid.conditions, dtype=np.float64)
    n_seeds = len(grid.seeds)
    fig = two_rows("Z = Σ KL over the answer (nats)", "log P_rag(first clean answer token) (nats)", spacing=0.1)
    for row, mean, std, clean, color in (
        (1, grid.z_mean, grid.z_std, grid.clean_z, KL_COLOR),
        (2, grid.logprob_mean, grid.logprob_std, grid.clean_first_token_logprob, RETRIEVAL_COLOR),
    ):
        name = "mean over seeds" if row == 1 else "log p mean"
        error = {"type": "data", "array": std, "visible": n_seeds > 1}
        style = {"line_width": 2, "error_y": error, "showlegend": row == 1}
        fig.add_trace(
            line_trace(eps, mean, name, color, "ε = %{x}<br>mean %{y:.4f}<extra></extra>", **style), row=row, col=1
        )
        for j in range(n_seeds):
            values = grid.z[:, j] if row == 1 else grid.first_token_logprob[:, j]
            fig.add_trace(
                go.Scatter(
                    x=eps,
                    y=values,
                    mode="markers",
                    marker={"color": color, "size": 5, "opacity": 0.35},
                    name="single seeds",
                    showlegend=row == 1 and j == 0,
                    legendgroup="seeds",
                    hovertemplate=f"seed {grid.seeds[j]} · ε = %{{x}}<br>%{{y:.4f}}<extra></extra>",
                ),
                row=row,
                col=1,
            )
        fig.add_hline(y=clean, line_dash="dash", line_color=CLEAN_COLOR, row=row, col=1)
    fig.update_xaxes(title_text="noise scale ε", row=2, col=1)
    return set_layout(fig, height=height, top=60, bottom=50, legend=top_legend(1.06))


def layer_sweep_figure(grid: NoiseGrid, *, flagged: Sequence[int] = (), height: int = 380) -> go.Figure:
    """ΔZ = Z(noise on layer ℓ) − Z(clean) per decoder layer: mean ± 1 sd over seeds; flagged layers marked."""
    if grid.kind != "layer_sweep":
        raise ValueError(f"expected a layer sweep, got {grid.kind!r}")
    layers = np.asarray(grid.conditions, dtype=np.int64)
    delta = grid.delta_z
    mean = delta.mean(axis=1)
    std = grid.z_std
    flagged_set = {int(v) for v in flagged}
    colors = [FLAGGED_COLOR if int(layer) in flagged_set else PARAMETRIC_COLOR for layer in layers]
    changed = grid.answer_changed.mean(axis=1)
    fig = go.Figure(
        go.Bar(
            x=layers,
            y=mean,
            marker_color=colors,
            name="ΔZ",
            error_y={"type": "data", "array": std, "visible": len(grid.seeds) > 1},
            customdata=np.stack([changed, grid.z_mean], axis=1),
            hovertemplate="layer %{x}<br>ΔZ = %{y:+.4f} nats<br>Z = %{customdata[1]:.4f}"
            "<br>answer changed in %{customdata[0]:.0%} of seeds<extra></extra>",
        )
    )
    fig.add_hline(y=0, line_color="#555")
    title = f"noise ε = {grid.eps[0]:g} on one layer at a time · clean Z = {grid.clean_z:.4f} nats"
    if flagged_set:
        title += " · purple = flagged by the CRM rule"
    set_layout(
        fig,
        height=height,
        top=40,
        bottom=50,
        title={"text": title, "font": {"size": 13}},
        xaxis_title="decoder layer",
        yaxis_title="ΔZ (nats)",
    )
    fig.update_xaxes(tickmode="linear" if len(layers) <= 40 else "auto")
    return fig


def grid_frame(grid: NoiseGrid) -> pd.DataFrame:
    """One row per scoring run (layers, ε, seed, Z, ΔZ, log-probs, answer changed, answer, degenerate)."""
    frame = pd.DataFrame(grid.rows())
    if "answer" in frame.columns:
        frame["degenerate"] = [degeneracy(str(a)).summary for a in frame["answer"]]
    return frame


def grid_summary_frame(grid: NoiseGrid) -> pd.DataFrame:
    """One row per condition: mean and sd of Z and ΔZ over seeds, mean first-token log-prob, share changed."""
    label = "ε" if grid.kind == "dose_response" else "layer"
    return pd.DataFrame(
        {
            label: list(grid.conditions),
            "Z mean": grid.z_mean,
            "Z sd": grid.z_std,
            "ΔZ mean": grid.delta_z.mean(axis=1),
            "log p(first clean token)": grid.logprob_mean,
            "answers changed": grid.answer_changed.mean(axis=1),
            "answer tokens (mean)": grid.n_tokens.mean(axis=1),
            "degenerate answers": [
                f"{sum(degeneracy(a).degenerate for a in row)} of {len(row)}" for row in grid.answers
            ],
        }
    )
