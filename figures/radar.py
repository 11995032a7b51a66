"""Pure figure and table builders for the RADAR page (plotly / pandas only: no Streamlit, no model calls).

Every token or prompt string that goes into a plotly label or hover is escaped with
:func:`figures.base.token_label` / :func:`figures.base.escape_label` (plotly renders a subset of
HTML); tables are plain text in the data grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.methods.radar import (
    CATEGORY_TITLES,
    ESTIMATOR_TITLES,
    FEATURES,
    REASONING,
    RECALL,
    SPECIALIZATION_TAU,
    TRAIN,
    FeatureTable,
    RadarPrediction,
    RadarTrace,
)
from figures.base import bottom_legend, escape_label, line_trace, set_layout, token_label, two_rows

CONFIDENCE_COLOR = "#2f5d8a"
ENTROPY_COLOR = "#d9822b"
RECALL_COLOR = "#2f5d8a"
REASONING_COLOR = "#d9822b"
CURRENT_COLOR = "#c0392b"
PAPER_COLOR = "#9e9e9e"
OURS_COLOR = "#6a3d9a"
LENGTH_COLOR = "#c9bfd8"


def trajectory_figure(trace: RadarTrace, *, height: int = 520) -> go.Figure:
    """The per-layer logit-lens confidence c_ℓ (top) and entropy H_ℓ (bottom) of the last prompt position.

    The layer where confidence peaks (ℓ*, ``convergence_layer``) is marked; hovering shows each layer's
    top token (escaped).
    """
    c = np.asarray(trace.confidence, dtype=np.float64)
    h = np.asarray(trace.entropy, dtype=np.float64)
    if c.shape != h.shape or c.ndim != 1 or len(trace.top_tokens) != c.size:
        raise ValueError("confidence, entropy and top tokens must have one entry per layer")
    layers = np.arange(c.size)
    tops = [token_label(t) for t in trace.top_tokens]
    fig = two_rows("Confidence c_ℓ = max_i p_ℓ,i", "Entropy H_ℓ (nats)", spacing=0.08)
    for row, values, name, color, hover in (
        (1, c, "confidence", CONFIDENCE_COLOR, "c = %{y:.3f}"),
        (2, h, "entropy", ENTROPY_COLOR, "H = %{y:.3f} nats"),
    ):
        hover = f"layer %{{x}}<br>{hover}<br>top token %{{customdata}}<extra></extra>"
        fig.add_trace(line_trace(layers, values, name, color, hover, customdata=tops), row=row, col=1)
    star = int(np.argmax(c))
    fig.add_vline(x=star, line_dash="dot", line_color=CURRENT_COLOR, row=1, col=1)
    fig.add_annotation(
        x=star, y=float(c[star]), text=f"ℓ* = {star}", showarrow=True, arrowhead=2, ax=40, ay=40, row=1, col=1
    )
    half = c.size // 2
    fig.add_vrect(x0=-0.5, x1=half - 0.5, fillcolor="#e8eef5", opacity=0.5, line_width=0, row="all", col=1)
    fig.update_yaxes(range=[0, 1.02], row=1, col=1)
    fig.update_xaxes(title_text="decoder layer ℓ (shaded: the early half)", row=2, col=1)
    return set_layout(fig, height=height, top=40, bottom=40, left=40, showlegend=False)


def head_entropy_figure(trace: RadarTrace, tau: float = SPECIALIZATION_TAU, *, height: int = 420) -> go.Figure:
    """Heat map of the attention entropy H_ℓ,h (nats) per layer and head; cells below τ are specialized."""
    he = np.asarray(trace.head_entropy, dtype=np.float64)
    if he.ndim != 2:
        raise ValueError(f"head_entropy must be (L, H), got {he.shape}")
    text = np.where(he < tau, "●", "")
    fig = go.Figure(
        go.Heatmap(
            z=he,
            x=[f"h{j}" for j in range(he.shape[1])],
            y=list(range(he.shape[0])),
            colorscale="Viridis",
            text=text,
            texttemplate="%{text}",
            colorbar={"title": "nats"},
            hovertemplate="layer %{y}, head %{x}<br>H = %{z:.3f} nats<extra></extra>",
        )
    )
    return set_layout(
        fig,
        height=height,
        top=30,
        bottom=40,
        left=40,
        title=f"Attention entropy per head (● = below τ = {tau}: counted as specialized)",
        xaxis_title="head",
        yaxis_title="decoder layer ℓ",
    )


def feature_frame(features: dict[str, float], table: FeatureTable | None = None) -> pd.DataFrame:
    """The 37 features in appendix D order: group, feature, value, (given the model's feature table) the
    training-set means of the recall and reasoning prompts, then type, formula, the paper's proxy note and our
    note — the numbers first, so that they stay in view in a narrow window."""
    means: dict[str, tuple[float, float]] = {}
    if table is not None:
        prompts, X = table.split(TRAIN)
        labels = np.array([p.label for p in prompts])
        for j, spec in enumerate(FEATURES):
            rec = X[labels == RECALL, j]
            rea = X[labels == REASONING, j]
            means[spec.name] = (float(rec.mean()) if rec.size else np.nan, float(rea.mean()) if rea.size else np.nan)
    rows = []
    for spec in FEATURES:
        row: dict[str, Any] = {
            "group": f"{spec.group.capitalize()} · {spec.subgroup}",
            "feature": spec.name,
            "value": float(features[spec.name]),
        }
        if table is not None:
            row["train mean (recall)"], row["train mean (reasoning)"] = means[spec.name]
        row |= {
            "type": spec.kind,
            "formula": spec.formula,
            "paper's proxy note": spec.proxy or "",
            "implementation note": spec.note or "",
        }
        rows.append(row)
    return pd.DataFrame(rows)


def votes_frame(prediction: RadarPrediction) -> pd.DataFrame:
    """Each base classifier's recall probability p_j and hard vote."""
    return pd.DataFrame(
        [
            {
                "classifier": ESTIMATOR_TITLES.get(name, name),
                "p(recall)": p,
                "vote": RECALL if prediction.votes[name] == 1 else REASONING,
            }
            for name, p in prediction.probabilities.items()
        ]
    )


def probability_figure(prediction: RadarPrediction, *, height: int = 150) -> go.Figure:
    """One horizontal stacked bar: p̄(recall) against 1 − p̄ (reasoning)."""
    p = float(prediction.p_recall)
    fig = go.Figure()
    for share, name, color, hover in (
        (p, "recall", RECALL_COLOR, "p̄(recall) = %{x:.3f}"),
        (1 - p, "reasoning", REASONING_COLOR, "1 − p̄ = %{x:.3f}"),
    ):
        fig.add_trace(
            go.Bar(
                y=["ensemble"],
                x=[share],
                orientation="h",
                name=name,
                marker_color=color,
                text=[f"{name} {share:.2f}" if share >= 0.12 else f"{share:.2f}"],
                textposition="inside",
                insidetextanchor="middle",
                textfont={"color": "white", "size": 14},
                hovertemplate=hover + "<extra></extra>",
            )
        )
    fig.add_vline(x=0.5, line_dash="dot", line_color="#444")
    return set_layout(
        fig,
        height=height,
        top=10,
        bottom=30,
        left=10,
        right=10,
        barmode="stack",
        showlegend=False,
        uniformtext={"minsize": 12, "mode": "show"},
        yaxis={"showticklabels": False},
        xaxis={"range": [0, 1]},
    )


def accuracy_frame(report: dict[str, Any]) -> pd.DataFrame:
    """Per-category test accuracy next to the paper's Table 1 (fractions; ``None`` where not defined)."""
    rows = []
    entries = [(c["title"], c) for c in report["categories"]]
    entries += [
        (title, report[key])
        for key, title in (
            ("overall", "Overall"),
            ("recall_tasks", "Recall-labeled prompts"),
            ("reasoning_tasks", "Reasoning-labeled prompts"),
        )
    ]
    for title, r in entries:
        rows.append(
            {
                "category": title,
                "n": r["n"],
                "correct": r["correct"],
                "RADAR here": r["accuracy"],
                "soft vote (p̄ > ½)": r["soft_accuracy"],
                "prompt length only": r.get("length_accuracy"),
                "paper": r["paper"],
            }
        )
    cv = report["train_cv"]
    rows.append(
        {
            "category": "Training set, 5-fold cross-validation",
            "n": 30,
            "correct": None,
            "RADAR here": cv["accuracy"],
            "soft vote (p̄ > ½)": cv["accuracy"],
            "prompt length only": None,
            "paper": cv["paper"],
        }
    )
    frame = pd.DataFrame(rows)
    if frame["prompt length only"].isna().all():
        frame = frame.drop(columns=["prompt length only"])
    return frame


def accuracy_figure(report: dict[str, Any], *, height: int = 340) -> go.Figure:
    """Grouped bars: our test accuracy per category (and overall) next to the paper's."""
    cats = [c["title"] for c in report["categories"]] + ["Overall"]
    ours = [c["accuracy"] for c in report["categories"]] + [report["overall"]["accuracy"]]
    paper = [c["paper"] for c in report["categories"]] + [report["overall"]["paper"]]
    bars = [(ours, "RADAR here", OURS_COLOR, "here")]
    length = [c.get("length_accuracy") for c in report["categories"]] + [report["overall"].get("length_accuracy")]
    if all(v is not None for v in length):
        bars.append((length, "prompt length only", LENGTH_COLOR, "length only"))
    bars.append((paper, "paper (DialoGPT-medium)", PAPER_COLOR, "paper"))
    fig = go.Figure()
    for values, name, color, short in bars:
        fig.add_trace(
            go.Bar(
                x=cats,
                y=values,
                name=name,
                marker_color=color,
                hovertemplate=f"%{{x}}: %{{y:.1%}}<extra>{short}</extra>",
            )
        )
    fig.add_hline(y=0.5, line_dash="dot", line_color="#888")
    return set_layout(
        fig,
        height=height,
        top=20,
        bottom=40,
        left=40,
        barmode="group",
        yaxis={"range": [0, 1.05], "tickformat": ".0%"},
        legend=bottom_legend(),  # under the category labels: a legend at the top covered the 100 % bars
    )


def rds_rci_figure(
    rows: Sequence[dict[str, Any]], current: tuple[float, float] | None = None, *, height: int = 460
) -> go.Figure:
    """The test prompts in the RDS–RCI plane (the paper's Figure 2 scatter), colored by label, shaped by
    category; ``current`` = (RDS, RCI) of the prompt on the page, drawn as a star."""
    fig = go.Figure()
    symbols = {
        "clear_recall": "circle",
        "clear_reasoning": "square",
        "ambiguous": "diamond",
        "complex_reasoning": "triangle-up",
    }
    for label, color in ((RECALL, RECALL_COLOR), (REASONING, REASONING_COLOR)):
        for cat, symbol in symbols.items():
            sel = [r for r in rows if r["label"] == label and r["category"] == cat]
            if not sel:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[r["rds"] for r in sel],
                    y=[r["rci"] for r in sel],
                    mode="markers",
                    name=f"{label} · {CATEGORY_TITLES.get(cat, cat)}",
                    marker={
                        "color": color,
                        "symbol": symbol,
                        "size": 9,
                        "opacity": 0.8,
                        "line": {"width": [0 if r["correct"] else 2 for r in sel], "color": "#000"},
                    },
                    customdata=[[escape_label(r["prompt"]), r["predicted"], r["p_recall"]] for r in sel],
                    hovertemplate="%{customdata[0]}<br>RDS %{x:.2f} · RCI %{y:.2f}<br>predicted %{customdata[1]} "
                    "(p̄ = %{customdata[2]:.2f})<extra></extra>",
                )
            )
    if current is not None:
        fig.add_trace(
            go.Scatter(
                x=[current[0]],
                y=[current[1]],
                mode="markers",
                name="this prompt",
                marker={"color": CURRENT_COLOR, "symbol": "star", "size": 18},
                hovertemplate="this prompt<br>RDS %{x:.2f} · RCI %{y:.2f}<extra></extra>",
            )
        )
    return set_layout(
        fig,
        height=height,
        top=20,
        bottom=50,
        left=50,
        xaxis={"title": "RDS (Recall Detection Score)", "range": [0, 1]},
        yaxis={"title": "RCI (Reasoning Complexity Index)", "range": [0, 1]},
    )


def predictions_frame(report: dict[str, Any]) -> pd.DataFrame:
    """Every test prompt with its category, label, prediction, p̄, RDS and RCI (for the table and CSV export)."""
    return pd.DataFrame(
        [
            {
                "id": r["id"],
                "prompt": r["prompt"],
                "category": CATEGORY_TITLES.get(r["category"], r["category"]),
                "label": r["label"],
                "predicted": r["predicted"],
                "correct": r["correct"],
                "p(recall)": r["p_recall"],
                "RDS": r["rds"],
                "RCI": r["rci"],
                "tokens": r.get("n_tokens"),
            }
            for r in report["rows"]
        ]
    )
