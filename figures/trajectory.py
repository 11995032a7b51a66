"""Figures and tables of the Layer trajectories page: LTS against the calibration band, the baselines, every
answer position, the classifier report (pure plotly / pandas: no Streamlit, no model).

Hidden-state rows ``0 … L``: row 0 is the embedding output (``emb``), row ℓ + 1 decoder layer ℓ
(:mod:`figures.layer_axes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from figures.base import RETRIEVAL_COLOR, bottom_legend, escape_label, line_trace, set_layout, token_label
from figures.layer_axes import FLAG_COLOR, lens_kl_rows, row_axis, row_label, token_ticks

if TYPE_CHECKING:
    from core.methods.crm import CrmBasis
    from core.methods.internals import Internals

KEPT_COLOR = "rgba(46, 139, 87, 0.13)"
BAND_COLOR = "rgba(120, 120, 120, 0.22)"
MEMORIZED_COLOR = "#8e44ad"
GROUNDED_COLOR = "#16a085"

FEATURE_SET_LABELS = {
    "pc1": "LTS along PC1, kept layers (CRM-LR, the paper's main protocol)",
    "supervised": "LTS along the supervised direction, kept layers",
    "pc1_all_layers": "LTS along PC1, all layers",
    "supervised_all_layers": "LTS along the supervised direction, all layers",
    "l2_norm": "‖d_ℓ‖ per layer (magnitude baseline)",
    "logit_lens_kl": "logit-lens KL per layer (baseline)",
}


def _add_band(
    fig: go.Figure,
    rows: np.ndarray,
    m: np.ndarray,
    s: np.ndarray,
    class_means: tuple[np.ndarray, np.ndarray] | None,
) -> None:
    """The calibration band μ ± 2σ, μ itself and, when given, the two classes' mean LTS (thin lines)."""
    fig.add_trace(go.Scatter(x=rows, y=m + 2 * s, mode="lines", line={"width": 0}, showlegend=False, hoverinfo="skip"))
    fig.add_trace(
        go.Scatter(
            x=rows,
            y=m - 2 * s,
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=BAND_COLOR,
            name="calibration μ ± 2σ",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=rows,
            y=m,
            mode="lines",
            line={"color": "#777", "dash": "dot", "width": 1},
            name="calibration μ",
            hoverinfo="skip",
        )
    )
    if class_means is not None:
        for values, name, color in (
            (class_means[0], "mean of memorized calibration prompts", MEMORIZED_COLOR),
            (class_means[1], "mean of grounded calibration prompts", GROUNDED_COLOR),
        ):
            fig.add_trace(
                go.Scatter(
                    x=rows,
                    y=np.asarray(values, dtype=np.float64),
                    mode="lines",
                    line={"color": color, "width": 1},
                    name=name,
                    hoverinfo="skip",
                    opacity=0.7,
                )
            )


def _add_marks(fig: go.Figure, x: np.ndarray, flagged: Sequence[int], kept: Sequence[int]) -> None:
    """Flagged layers (red crosses) and kept layers (shaded columns, one legend entry)."""
    flagged = [int(i) for i in flagged]
    if flagged:
        fig.add_trace(
            go.Scatter(
                x=flagged,
                y=x[flagged],
                mode="markers",
                name="outside μ ± 2σ (flagged)",
                marker={"color": FLAG_COLOR, "size": 12, "symbol": "x"},
                hoverinfo="skip",
            )
        )
    for i, row in enumerate(sorted(int(k) for k in kept)):
        fig.add_vrect(x0=row - 0.5, x1=row + 0.5, fillcolor=KEPT_COLOR, line_width=0, layer="below")
        if i == 0:
            fig.add_trace(
                go.Scatter(
                    x=[None],
                    y=[None],
                    mode="markers",
                    name="kept layer (variance ratio > 0.01)",
                    marker={"color": KEPT_COLOR.replace("0.13", "0.6"), "symbol": "square", "size": 12},
                )
            )


def lts_figure(
    lts: np.ndarray,
    mu: np.ndarray,
    sigma: np.ndarray,
    *,
    kept: Sequence[int],
    flagged: Sequence[int],
    class_means: tuple[np.ndarray, np.ndarray] | None = None,
    title: str,
    height: int = 520,
) -> go.Figure:
    """LTS per layer with the calibration band μ ± 2σ, flagged layers (red) and kept layers (shaded).

    Args:
        lts, mu, sigma: ``(L1,)`` rows ``0 = emb … L``.
        class_means: calibration mean LTS of the memorized and the grounded prompts (thin lines).
    """
    x = np.asarray(lts, dtype=np.float64)
    m, s = np.asarray(mu, dtype=np.float64), np.asarray(sigma, dtype=np.float64)
    if not (x.shape == m.shape == s.shape) or x.ndim != 1:
        raise ValueError(f"lts, mu and sigma must be 1-D of one shape, got {x.shape}, {m.shape}, {s.shape}")
    rows = np.arange(x.size)
    labels = [row_label(r) for r in rows]
    fig = go.Figure()
    _add_band(fig, rows, m, s, class_means)
    z = np.divide(x - m, s, out=np.zeros_like(x), where=s > 0)
    custom = np.array(list(zip(labels, z, m - 2 * s, m + 2 * s, strict=True)), dtype=object)
    hover = (
        "layer %{customdata[0]}<br>LTS = %{y:.3f}<br>z = %{customdata[1]:.2f}<br>"
        "band [%{customdata[2]:.3f}, %{customdata[3]:.3f}]<extra></extra>"
    )
    fig.add_trace(
        line_trace(rows, x, "this run", RETRIEVAL_COLOR, hover, line_width=2, marker={"size": 6}, customdata=custom)
    )
    _add_marks(fig, x, flagged, kept)
    set_layout(
        fig,
        height=height,
        top=50,
        bottom=120,
        title={"text": escape_label(title)},
        legend=bottom_legend(),  # under the slanted layer labels and the axis title at any width
    )
    fig.update_xaxes(title_text="layer (emb = embeddings)", **row_axis(x.size))
    fig.update_yaxes(title_text="LTS = ⟨d_ℓ, v_ℓ⟩", zeroline=True)
    return fig


def baselines_figure(l2: np.ndarray, lens_kl: np.ndarray, *, height: int = 440) -> go.Figure:
    """‖d_ℓ‖ (magnitude baseline) and the logit-lens KL per layer, on the same layer axis."""
    a, b = np.asarray(l2, dtype=np.float64), np.asarray(lens_kl, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"l2 and lens_kl must be 1-D of one shape, got {a.shape} and {b.shape}")
    rows = np.arange(a.size)
    fig = lens_kl_rows("L2 norm ‖d_ℓ‖ of the displacement", b)
    fig.add_trace(
        go.Bar(
            x=rows,
            y=a,
            marker_color="#7f8c8d",
            name="‖d_ℓ‖",
            hovertemplate="layer %{customdata}<br>‖d‖ = %{y:.3f}<extra></extra>",
            customdata=[row_label(r) for r in rows],
        ),
        row=1,
        col=1,
    )
    set_layout(fig, height=height, top=50, bottom=50, showlegend=False)
    fig.update_yaxes(rangemode="tozero")
    return fig


def position_heatmap(
    values: np.ndarray,
    answer_tokens: Sequence[str],
    *,
    title: str,
    colorbar: str,
    colorscale: str = "Viridis",
    zmid: float | None = None,
    height: int = 560,
) -> go.Figure:
    """A layer × answer-position heatmap (rows 0 = emb … L; column t predicts answer token t)."""
    z = np.asarray(values, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] != max(1, len(answer_tokens)):
        raise ValueError(f"values must be (layers + 1, {len(answer_tokens)}), got shape {z.shape}")
    labels = [f"t={t} · {token_label(tok)}" for t, tok in enumerate(answer_tokens)] or ["t=0"]
    custom = np.empty(z.shape, dtype=object)
    for r in range(z.shape[0]):
        for t in range(z.shape[1]):
            custom[r, t] = f"layer {row_label(r)} · {labels[t]}"
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(z.shape[1])),
            y=list(range(z.shape[0])),
            colorscale=colorscale,
            zmid=zmid,
            customdata=custom,
            hovertemplate="%{customdata}<br>" + escape_label(colorbar) + " = %{z:.4f}<extra></extra>",
            colorbar={"title": {"text": escape_label(colorbar)}},
        )
    )
    set_layout(fig, height=height, top=60, bottom=110, title={"text": escape_label(title)})
    fig.update_xaxes(
        title_text="answer position (the step that predicts that token)", tickangle=-60, **token_ticks(labels)
    )
    fig.update_yaxes(title_text="layer", **row_axis(z.shape[0]))
    return fig


def classifier_frame(report: dict[str, Any]) -> pd.DataFrame:
    """The cross-validated classifier report as a table (one row per feature set)."""
    rows = []
    for name, m in (report.get("feature_sets") or {}).items():
        rows.append(
            {
                "features": FEATURE_SET_LABELS.get(name, name),
                "AUC": m["auc"],
                "95% CI low": m["ci95"][0],
                "95% CI high": m["ci95"][1],
                "fold AUC mean": m["fold_auc_mean"],
                "fold AUC std": m["fold_auc_std"],
                "features used": m["n_features"],
            }
        )
    return pd.DataFrame(rows)


def layer_table(
    lts: dict[str, np.ndarray],
    l2: np.ndarray,
    lens_kl: np.ndarray,
    *,
    kept: Sequence[int],
    flagged: dict[str, Sequence[int]],
    evr: np.ndarray | None = None,
) -> pd.DataFrame:
    """One row per hidden-state row: LTS along each direction (and whether flagged), ‖d‖, lens KL, kept."""
    n = len(l2)
    data: dict[str, Any] = {"layer": [row_label(r) for r in range(n)], "kept": [r in set(kept) for r in range(n)]}
    if evr is not None:
        data["variance ratio"] = np.asarray(evr, dtype=np.float64)
    for name, values in lts.items():
        data[f"LTS {name}"] = np.asarray(values, dtype=np.float64)
        data[f"flagged {name}"] = [r in set(flagged.get(name, [])) for r in range(n)]
    data["‖d‖"] = np.asarray(l2, dtype=np.float64)
    data["logit-lens KL"] = np.asarray(lens_kl, dtype=np.float64)
    return pd.DataFrame(data)


# ----------------------------------------------------------------------------------------------------------
# The Layer trajectories page's figures of one run, assembled from its analysis and the model's CRM basis: the page
# and the notebook API (read_or_recall) both call these, so both draw the same figure.

DIRECTION_LABELS = {"pc1": "PC1 (unsupervised)", "supervised": "Supervised (class-mean difference)"}
"""The CRM directions as the page and the figures name them."""
QUANTITIES = {
    "lts": "LTS along the chosen direction",
    "l2": "‖d_ℓ‖ (L2 norm of the displacement)",
    "lens": "logit-lens KL between the paths (nats)",
}
"""What the every-position heatmap can show."""


def run_lts(internals: Internals, basis: CrmBasis, direction: str) -> tuple[np.ndarray, list[int]]:
    """This run's LTS at the last prompt token along ``direction`` and the layers outside the calibration band."""
    lts = basis.lts(internals.displacement[:, 0], direction)
    return lts, basis.flagged(lts, direction)


def run_lts_figure(internals: Internals, basis: CrmBasis, direction: str) -> go.Figure:
    """LTS per layer at the last prompt token with the calibration band, kept and flagged layers."""
    lts, flagged = run_lts(internals, basis, direction)
    return lts_figure(
        lts,
        basis.mu[direction],
        basis.sigma[direction],
        kept=basis.kept_layers,
        flagged=flagged,
        class_means=basis.class_means(direction),
        title=f"LTS along {DIRECTION_LABELS[direction]}",
    )


def run_baselines_figure(internals: Internals) -> go.Figure:
    """‖d_ℓ‖ and the logit-lens KL per layer at the last prompt token."""
    return baselines_figure(internals.disp_norm[:, 0], internals.lens.kl[:, 0])


def positions_figure(
    internals: Internals, answer_tokens: Sequence[str], quantity: str, basis: CrmBasis | None, direction: str
) -> go.Figure:
    """A layer × answer-position heatmap of ``quantity`` (a key of :data:`QUANTITIES`; ``"lts"`` needs ``basis``).

    Raises:
        ValueError: an unknown quantity, or ``"lts"`` without a basis.
    """
    if quantity == "lts":
        if basis is None:
            raise ValueError("LTS at every position needs the model's CRM basis (none is stored for it).")
        values = basis.lts(internals.displacement.transpose(1, 0, 2), direction).T
        title = f"LTS along {DIRECTION_LABELS[direction]}"
        return position_heatmap(values, answer_tokens, title=title, colorbar="LTS", colorscale="RdBu", zmid=0.0)
    if quantity == "l2":
        return position_heatmap(internals.disp_norm, answer_tokens, title="‖d_ℓ(t)‖", colorbar="‖d‖")
    if quantity == "lens":
        return position_heatmap(
            internals.lens.kl,
            answer_tokens,
            title="logit-lens KL(P_rag,ℓ ‖ P_para,ℓ)",
            colorbar="KL (nats)",
            colorscale="YlOrRd",
        )
    raise ValueError(f"quantity must be one of {sorted(QUANTITIES)}, got {quantity!r}")
