"""Pure figure and table builders for the Self-Critique and SMA pages (plotly / pandas; no Streamlit, no model).

Every token, word or sentence placed in a plotly label, hover or cell text goes through
:func:`figures.base.token_label` / :func:`figures.base.escape_label` (plotly renders a subset of
HTML). Tables hold plain strings (the data grid shows them literally).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.methods.selfcritique import K_CHOICES, SelfCritiqueResult, penalized_cosine
from core.methods.sma import CONTEXT, LABELS, NON_MEMBER, PRETRAINED, RETRIEVED, ContextAblation, SMAResult, SMARun
from figures.base import (
    PARAMETRIC_COLOR,
    RETRIEVAL_COLOR,
    cell_grid,
    display_token,
    escape_label,
    note,
    set_layout,
    token_label,
    top_legend,
    two_rows,
)

FIRST_COLOR = "#2f5d8a"
CRITIQUE_COLOR = "#b5462f"
LABEL_COLORS = {PRETRAINED: PARAMETRIC_COLOR, RETRIEVED: RETRIEVAL_COLOR, NON_MEMBER: "#9a9a9a"}
ADS_COLORSCALE = [[0.0, "#b2182b"], [0.5, "#f7f7f7"], [1.0, "#2166ac"]]
MAX_TICK_LABELS = 60


def k_label(k: int | None) -> str:
    """``"top-3"`` … or ``"full vocabulary"``."""
    return "full vocabulary" if k is None else f"top-{k}"


# ----------------------------------------------------------------------------------------------------------
# Self-Critique


def entropy_sequences_figure(
    first_tokens: Sequence[str],
    first_entropy: np.ndarray,
    critique_tokens: Sequence[str],
    critique_entropy: np.ndarray,
    *,
    k: int | None = None,
    height: int = 520,
) -> go.Figure:
    """E₁ (first answer) above E₂ (critique answer), on a shared position axis.

    The score compares the two sequences position by position after zero-padding the shorter one, so both
    rows share the x axis (0 … max(n₁, n₂) − 1); the padded stretch of the shorter row is shaded.

    Raises:
        ValueError: tokens and entropies differ in length.
    """
    e1 = np.asarray(first_entropy, dtype=np.float64)
    e2 = np.asarray(critique_entropy, dtype=np.float64)
    if len(first_tokens) != e1.size or len(critique_tokens) != e2.size:
        raise ValueError(
            f"tokens and entropies differ in length: {len(first_tokens)} vs {e1.size}, "
            f"{len(critique_tokens)} vs {e2.size}"
        )
    fig = two_rows(
        f"E₁ — first answer r₁ ({e1.size} tokens, {k_label(k)} entropy)",
        f"E₂ — critique answer r₂ ({e2.size} tokens, {k_label(k)} entropy)",
        spacing=0.12,
    )
    set_layout(fig, height=height, top=60, bottom=60, showlegend=False, bargap=0.1)
    width = max(e1.size, e2.size)
    if width == 0:
        return note(fig, "No generated tokens to show")
    for row, (tokens, values, color) in enumerate(
        ((first_tokens, e1, FIRST_COLOR), (critique_tokens, e2, CRITIQUE_COLOR)), start=1
    ):
        labels = [token_label(t) for t in tokens]
        fig.add_trace(
            go.Bar(
                x=np.arange(values.size),
                y=values,
                marker_color=color,
                customdata=labels,
                hovertemplate="t=%{x} · %{customdata}<br>H = %{y:.3f} nats<extra></extra>",
            ),
            row=row,
            col=1,
        )
        if values.size < width:
            fig.add_vrect(
                x0=values.size - 0.5,
                x1=width - 0.5,
                fillcolor="#cccccc",
                opacity=0.25,
                line_width=0,
                annotation_text="zero-padded",
                annotation_position="top left",
                row=row,
                col=1,
            )
        fig.update_yaxes(title_text="entropy (nats)", rangemode="tozero", row=row, col=1)
    fig.update_xaxes(title_text="generated position t", range=[-0.6, width - 0.4], row=2, col=1)
    return fig


def entropy_frame(result: SelfCritiqueResult, k: int | None) -> pd.DataFrame:
    """Both sequences position by position (zero-padded as the score sees them) for the table and CSV."""
    e1, e2 = result.entropies(k)
    width = max(e1.size, e2.size)
    rows = []
    for t in range(width):
        rows.append(
            {
                "t": t,
                "r1 token": display_token(result.first_tokens[t]) if t < e1.size else "",
                "E1 (nats)": float(e1[t]) if t < e1.size else 0.0,
                "r2 token": display_token(result.critique_tokens[t]) if t < e2.size else "",
                "E2 (nats)": float(e2[t]) if t < e2.size else 0.0,
            }
        )
    return pd.DataFrame(rows, columns=["t", "r1 token", "E1 (nats)", "r2 token", "E2 (nats)"])


def k_sweep_frame(result: SelfCritiqueResult) -> pd.DataFrame:
    """The score for every selectable K (how much the top-K approximation matters here)."""
    rows = []
    for k in K_CHOICES:
        e1, e2 = result.entropies(k)
        rows.append(
            {
                "K": k_label(k),
                "score S": penalized_cosine(e1, e2),
                "mean E1 (nats)": float(e1.mean()) if e1.size else 0.0,
                "mean E2 (nats)": float(e2.mean()) if e2.size else 0.0,
            }
        )
    return pd.DataFrame(rows)


def score_parts(result: SelfCritiqueResult, k: int | None) -> dict[str, float]:
    """S and its two factors: the cosine of the zero-padded sequences and the length ratio."""
    e1, e2 = result.entropies(k)
    if e1.size == 0 or e2.size == 0:
        return {"score": 0.0, "cosine": 0.0, "length_ratio": 0.0}
    ratio = min(e1.size, e2.size) / max(e1.size, e2.size)
    score = penalized_cosine(e1, e2)
    return {"score": score, "cosine": score / ratio, "length_ratio": ratio}


# ----------------------------------------------------------------------------------------------------------
# SMA


def attribution_frame(result: SMAResult, labels: Sequence[str]) -> pd.DataFrame:
    """One row per unit: segment, unit, β_on, β_off, ADS and the three-way label."""
    if len(labels) != len(result.units):
        raise ValueError(f"{len(labels)} labels for {len(result.units)} units")
    return pd.DataFrame(
        {
            "#": np.arange(len(result.units), dtype=np.int64),
            "segment": [u.segment for u in result.units],
            "unit": [display_token(u.text) for u in result.units],
            "β RAG on": result.beta_on.astype(np.float64),
            "β RAG off": result.beta_off.astype(np.float64),
            "ADS = β_on − β_off": result.ads.astype(np.float64),
            "label": list(labels),
        }
    )


def _rows(n: int, per_row: int) -> list[range]:
    return [range(start, min(n, start + per_row)) for start in range(0, n, per_row)]


MIN_TEXT_FIGURE_PX = 220
"""The colored-text figure's least height: room for its colour bar's labels and title."""


def ads_text_figure(
    result: SMAResult, labels: Sequence[str], *, per_row: int = 10, value: str = "ads", height_per_row: int = 46
) -> go.Figure:
    """The input as colored text: one cell per unit, read left to right and top to bottom, colored by ADS
    (blue > 0, red < 0, symmetric around 0); hover gives β_on, β_off, ADS and the label.

    Args:
        value: ``"ads"``, ``"beta_on"`` or ``"beta_off"`` — what the color shows.
    """
    values = {"ads": result.ads, "beta_on": result.beta_on, "beta_off": result.beta_off}.get(value)
    if values is None:
        raise ValueError(f"value must be 'ads', 'beta_on' or 'beta_off', got {value!r}")
    n = len(result.units)
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} units")
    rows = _rows(n, max(1, per_row))
    z = np.full((len(rows), per_row), np.nan)
    text = [[""] * per_row for _ in rows]
    custom = np.empty((len(rows), per_row, 5), dtype=object)
    custom[:] = ""
    for r, idx in enumerate(rows):
        for c, j in enumerate(idx):
            unit = result.units[j]
            label = token_label(unit.text.strip() or unit.text)
            z[r, c] = values[j]
            text[r][c] = label + (
                " ·ctx" if unit.segment == CONTEXT and (j == 0 or result.units[j - 1].segment != CONTEXT) else ""
            )
            custom[r, c] = [
                label,
                f"{result.beta_on[j]:.4f}",
                f"{result.beta_off[j]:.4f}",
                f"{result.ads[j]:.4f}",
                escape_label(labels[j]),
            ]
    limit = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 1.0
    limit = limit if limit > 0 else 1.0
    title = {"ads": "ADS = β_on − β_off", "beta_on": "β with retrieval on", "beta_off": "β with retrieval off"}[value]
    fig = cell_grid(
        z,
        text,
        custom,
        hovertemplate="%{customdata[0]}<br>β on = %{customdata[1]}<br>β off = %{customdata[2]}"
        "<br>ADS = %{customdata[3]}<br>%{customdata[4]}<extra></extra>",
        gap=3,
        textfont={"size": 12},
        colorscale=ADS_COLORSCALE,
        zmin=-limit,
        zmax=limit,
        # the title runs up the bar's right side and few ticks are labelled: on a short figure a title on
        # top and a tick per step overlapped each other
        colorbar={"title": {"text": title, "side": "right"}, "nticks": 5, "thickness": 14, "tickfont": {"size": 10}},
    )
    return set_layout(
        fig,
        height=max(MIN_TEXT_FIGURE_PX, 70 + height_per_row * len(rows)),
        top=30,
        bottom=10,
        left=10,
        right=10,
        plot_bgcolor="white",
        title={"text": f"Color = {title} (read left to right, top to bottom)", "font": {"size": 13}},
    )


def ads_bar_figure(
    result: SMAResult, labels: Sequence[str], *, tau1: float, tau2: float, height: int = 440
) -> go.Figure:
    """ADS per unit as bars colored by label, β_on and β_off as markers, the non-member band shaded."""
    n = len(result.units)
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} units")
    fig = set_layout(go.Figure(), height=height, top=40, bottom=110, barmode="overlay", legend=top_legend())
    if n == 0:
        return note(fig, "No units")
    x = np.arange(n)
    names = [token_label(u.text.strip() or u.text) for u in result.units]
    for label in LABELS:
        mask = np.array([lab == label for lab in labels])
        if not mask.any():
            continue
        fig.add_trace(
            go.Bar(
                x=x[mask],
                y=result.ads[mask],
                name=f"ADS · {label}",
                marker_color=LABEL_COLORS[label],
                customdata=np.array(names, dtype=object)[mask],
                hovertemplate="%{customdata}<br>ADS = %{y:.4f}<extra>" + escape_label(label) + "</extra>",
            )
        )
    for beta, side, symbol in ((result.beta_on, "on", "circle"), (result.beta_off, "off", "x")):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=beta,
                mode="markers",
                name=f"β RAG {side}",
                marker={"symbol": symbol, "color": "#222", "size": 7},
                customdata=names,
                hovertemplate=f"%{{customdata}}<br>β {side} = %{{y:.4f}}<extra></extra>",
            )
        )
    low, high = min(tau1, tau2), max(tau1, tau2)
    fig.add_hrect(
        y0=low,
        y1=high,
        fillcolor="#9a9a9a",
        opacity=0.15,
        line_width=0,
        annotation_text="non-member band (τ₂ ≤ ADS < τ₁)",
        annotation_position="top left",
    )
    stride = max(1, int(np.ceil(n / MAX_TICK_LABELS)))
    fig.update_xaxes(
        tickmode="array", tickvals=x[::stride].tolist(), ticktext=names[::stride], tickangle=-60, range=[-0.6, n - 0.4]
    )
    fig.update_yaxes(title_text="attribution (Δ response score)", zeroline=True)
    return fig


def samples_frame(run: SMARun, unit_texts: Sequence[str]) -> pd.DataFrame:
    """The perturbed inputs of one run: which units were kept, the answer and its score parts."""
    rows = []
    for i, s in enumerate(run.samples):
        kept = sum(1 for m in s.mask if m == "1")
        rows.append(
            {
                "#": i,
                "kept units": f"{kept}/{len(s.mask)}",
                "mask": s.mask,
                "answer": s.answer,
                "tokens": s.n_tokens,
                "length ratio": s.length_ratio,
                "similarity": s.similarity,
                "score r": s.score,
            }
        )
    return pd.DataFrame(
        rows, columns=["#", "kept units", "mask", "answer", "tokens", "length ratio", "similarity", "score r"]
    )


def context_ablation_frame(ablation: ContextAblation) -> pd.DataFrame:
    """One row per context sentence: the score without it, the drop Δr and the answer without it."""
    return pd.DataFrame(
        {
            "#": np.arange(len(ablation.sentences), dtype=np.int64),
            "sentence removed": [s.strip() for s in ablation.sentences],
            "Δr = r(full) − r(without)": ablation.delta.astype(np.float64),
            "r without it": ablation.scores.astype(np.float64),
            "similarity": ablation.similarities.astype(np.float64),
            "length ratio": ablation.length_ratios.astype(np.float64),
            "answer without it": list(ablation.answers),
        }
    )


def context_ablation_figure(ablation: ContextAblation, *, max_chars: int = 60) -> go.Figure:
    """Horizontal bars: how much removing each context sentence changed the answer (Δr)."""
    n = len(ablation.sentences)
    labels = []
    for i, s in enumerate(ablation.sentences):
        s = " ".join(s.split())
        short = s if len(s) <= max_chars else s[: max_chars - 1] + "…"
        labels.append(escape_label(f"{i}: {short}"))
    fig = go.Figure(
        go.Bar(
            x=ablation.delta,
            y=labels,
            orientation="h",
            marker_color=RETRIEVAL_COLOR,
            customdata=[escape_label(a) for a in ablation.answers],
            hovertemplate="Δr = %{x:.4f}<br>answer without it: %{customdata}<extra></extra>",
        )
    )
    set_layout(fig, height=max(180, 60 + 34 * n), top=30, bottom=40, left=20)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="Δr = r(full context) − r(sentence removed)", zeroline=True)
    return fig
