"""Figures and tables of the Evaluate page (plotly / pandas only: no Streamlit, no model, no maths beyond
presentation — the metrics come from :mod:`core.evaluation.report`).

Every string that comes from a file or the model (queries, answers, detector labels) goes through
:func:`figures.base.escape_label` before it reaches a plotly label or hover; tables are plain text.
The calibration tab's figures (τ, τ(L), rates per length) are :mod:`figures.calibration`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from core.detectors import get
from core.detectors.registry import CONTEXT_RELIANCE, GROUNDED_HIGH, GROUPS, MEMORIZED_HIGH
from core.detectors.wording import GROUP_WORDS, direction
from figures.base import escape_label, line_trace

PALETTE = (
    "#2f5d8a",
    "#d9822b",
    "#6a3d9a",
    "#33a02c",
    "#e31a1c",
    "#1f78b4",
    "#b15928",
    "#fb9a99",
    "#a6cee3",
    "#b2df8a",
    "#cab2d6",
    "#ff7f00",
    "#8c8c8c",
    "#17becf",
    "#bcbd22",
)
CHANCE_COLOR = "#9a9a9a"
FOLLOWS_ORDER = ("context", "memory", "both", "neither")


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def or_dash(value: Any, spec: str = ".3f") -> str:
    """``value`` formatted with ``spec``, or ``"–"`` for ``None`` (a metric that could not be computed)."""
    return "–" if value is None else format(value, spec)


ROC_SHOWN = 5
"""How many ROC curves :func:`roc_figure` draws (the best by AUC); the others are one legend click away."""


def roc_figure(detectors: dict[str, dict[str, Any]], *, shown: int | None = ROC_SHOWN, height: int = 520) -> go.Figure:
    """ROC curves of the detectors overlaid (positive class *memorized*), AUC and 95% CI in the legend.

    With two dozen detectors every curve at once is unreadable (issue 45): the ``shown`` best by AUC are drawn, the
    others are listed under "more" in the legend (``visible="legendonly"``: a click draws one).

    Args:
        detectors: ``name → summary entry`` of :func:`core.evaluation.report.summarize` (needs ``roc``, ``auc``,
            ``auc_ci``, ``label``); entries without ``roc`` are skipped.
        shown: how many curves to draw (the best by AUC); ``None`` draws every one.
    """
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[0, 1],
            y=[0, 1],
            mode="lines",
            name="chance (AUC 0.5)",
            line={"color": CHANCE_COLOR, "dash": "dot", "width": 1},
            hoverinfo="skip",
        )
    )
    ranked = sorted(((n, e) for n, e in detectors.items() if e.get("roc")), key=lambda kv: -(kv[1]["auc"] or 0))
    for i, (name, entry) in enumerate(ranked):
        lo, hi = entry.get("auc_ci") or (None, None)
        legend = f"{escape_label(name)} · AUC {or_dash(entry['auc'])} [{or_dash(lo, '.2f')}, {or_dash(hi, '.2f')}]"
        drawn = shown is None or i < shown
        more = {} if drawn else {"legendgroup": "more", "legendgrouptitle": {"text": "more (click to draw)"}}
        fig.add_trace(
            go.Scatter(
                x=entry["roc"]["fpr"],
                y=entry["roc"]["tpr"],
                mode="lines",
                name=legend,
                visible=True if drawn else "legendonly",
                line={"color": _color(i), "width": 2, "shape": "hv"},
                hovertemplate=escape_label(entry.get("label", name)) + "<br>FPR %{x:.3f} · TPR %{y:.3f}<extra></extra>",
                **more,
            )
        )
    hidden = len(ranked) - (len(ranked) if shown is None else min(shown, len(ranked)))
    inside = {"yanchor": "bottom", "y": 0.02, "xanchor": "right", "x": 0.99}
    outside = {"yanchor": "top", "y": 1.0, "xanchor": "left", "x": 1.02, "groupclick": "toggleitem"}
    fig.update_layout(
        height=height,
        margin={"l": 50, "r": 20, "t": 30, "b": 50},
        xaxis={"title": "False-positive rate (grounded rows flagged)", "range": [0, 1], "constrain": "domain"},
        yaxis={"title": "True-positive rate (memorized rows flagged)", "range": [0, 1.01], "scaleanchor": "x"},
        legend={"font": {"size": 11}, **(outside if hidden else inside)},
    )
    return fig


ORIENTATION = (
    "Every score is oriented so that higher means memorized (the positive class): a detector whose raw score is "
    "higher for grounded answers (RePCS's Z, for one) is negated, and the AUC, CI, FPR and precision are computed "
    "on that oriented score."
)
"""The one convention of the metrics table, stated once above it (:func:`metrics_table` follows it)."""
ORIENTATION_COLUMN = "scored as"


def oriented_as(higher_means: str | None) -> str:
    """How a detector's raw score enters the table: ``"raw score"`` (higher already means memorized) or
    ``"− raw score"`` (its raw score is higher for grounded answers); ``""`` when unknown."""
    if higher_means == MEMORIZED_HIGH:
        return "raw score"
    if higher_means == GROUNDED_HIGH:
        return "− raw score"
    return ""


GROUP_COLUMN = "group"
"""The column of a metrics table that holds each detector's group (a key of :data:`GROUPS`)."""
RAW_DIRECTION_COLUMN = "direction of the raw score"
"""The column that states the direction of each detector's raw score in its group's words ("higher = …")."""


def detector_group(name: str, entry: dict[str, Any] | None = None) -> str:
    """The group of detector ``name`` (the entry's own ``group``, else the registry's, else context reliance)."""
    group = (entry or {}).get("group")
    if group in GROUPS:
        return group
    detector = get(name)
    return detector.group if detector is not None else CONTEXT_RELIANCE


def group_heading(group: str) -> str:
    """``**Title** — question`` of a group (the registry's own words: safe Markdown)."""
    return f"**{GROUP_WORDS[group].title}** — {GROUPS[group]}"


def by_group(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(group, rows)`` of a table with a :data:`GROUP_COLUMN`, in :data:`GROUPS` order, the column dropped."""
    if frame.empty or GROUP_COLUMN not in frame.columns:
        return []
    return [
        (group, frame[frame[GROUP_COLUMN] == group].drop(columns=[GROUP_COLUMN]).reset_index(drop=True))
        for group in GROUPS
        if (frame[GROUP_COLUMN] == group).any()
    ]


def with_groups(frame: pd.DataFrame) -> pd.DataFrame:
    """A table with a ``detector`` column, plus each detector's group and the direction of its raw score (from
    the registry), ready for :func:`by_group`."""
    if frame.empty or "detector" not in frame.columns:
        return frame
    groups, directions = [], []
    for name in frame["detector"]:
        detector = get(str(name))
        groups.append(detector_group(str(name)))
        directions.append(direction(detector.group, detector.higher_means) if detector is not None else "")
    return frame.assign(**{GROUP_COLUMN: groups, RAW_DIRECTION_COLUMN: directions})


def metrics_table(detectors: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per detector: AUC, CI, FPR@95%TPR, Precision@10, rows scored, how the score is oriented
    (:data:`ORIENTATION`: higher = memorized for every row), which way its raw score points in its group's words,
    cost, source — group by group (:data:`GROUPS` order, the ``group`` column), best AUC first within a group."""
    rows = []
    for name, e in detectors.items():
        lo, hi = e.get("auc_ci") or (None, None)
        group = detector_group(name, e)
        rows.append(
            {
                GROUP_COLUMN: group,
                "detector": name,
                "description": e.get("label", name),
                "AUC": e.get("auc"),
                "AUC 95% CI low": lo,
                "AUC 95% CI high": hi,
                "FPR @ 95% TPR": e.get("fpr_at_95tpr"),
                "Precision@10": e.get("precision_at_10"),
                "rows scored": e.get("n"),
                ORIENTATION_COLUMN: oriented_as(e.get("higher_means")),
                RAW_DIRECTION_COLUMN: direction(group, e["higher_means"]) if e.get("higher_means") else "",
                "cost": e.get("cost"),
                "note": e.get("note") or e.get("first_error") or "",
                "source": e.get("source", ""),
            }
        )
    frame = pd.DataFrame(rows)
    if not rows:
        return frame
    order = frame[GROUP_COLUMN].map({g: i for i, g in enumerate(GROUPS)})
    frame = frame.assign(_order=order, _auc=frame["AUC"].astype(float))
    frame = frame.sort_values(["_order", "_auc"], ascending=[True, False], na_position="last", kind="stable")
    return frame.drop(columns=["_order", "_auc"]).reset_index(drop=True)


def rows_table(records: Sequence[dict[str, Any]], names: Sequence[str]) -> pd.DataFrame:
    """Per-row scores: row number, label, answers, Z, verdict and one raw-score column per detector."""
    out = []
    labeled = any("label" in r for r in records)
    for r in records:
        row = {"row": r.get("row"), **({"label": r.get("label", "")} if labeled else {})}
        row |= {
            "query": r.get("query", ""),
            "retrieval answer": r.get("rag_answer", ""),
            "Z (nats)": r.get("repcs_score"),
            "verdict": r.get("verdict", ""),
        }
        if "follows" in r:
            row["answer follows"] = r["follows"]
            row["parametric answer"] = r.get("parametric_answer", "")
            row["parametric follows"] = r.get("parametric_follows", "")
        confirmed = r.get("extra.parametric_correct")
        if confirmed is not None:
            row["parametric_correct"] = confirmed
        for name in names:
            row[name] = r.get("scores", {}).get(name)
        out.append(row)
    return pd.DataFrame(out)


def robustness_figure(table: Sequence[dict[str, Any]], *, height: int = 380) -> go.Figure:
    """RePCS AUC per logit-noise σ with bootstrap 95% CIs, and Table IV of the paper as a dashed reference."""
    sig = [r["sigma"] for r in table]
    aucs = [r["auc"] for r in table]
    lo = [r["auc"] - r["auc_ci"][0] for r in table]
    hi = [r["auc_ci"][1] - r["auc"] for r in table]
    error = {"type": "data", "array": hi, "arrayminus": lo, "visible": True}
    hover = "σ = %{x}<br>AUC %{y:.3f}<extra></extra>"
    fig = go.Figure(line_trace(sig, aucs, "this data (95% CI)", PALETTE[0], hover, error_y=error))
    paper = [(r["sigma"], r["paper_auc"]) for r in table if r.get("paper_auc") is not None]
    if paper:
        sig_p, auc_p = zip(*paper, strict=True)
        hover = "σ = %{x}<br>paper AUC %{y:.3f}<extra></extra>"
        fig.add_trace(line_trace(sig_p, auc_p, "RePCS Table IV (their data)", CHANCE_COLOR, hover, line_dash="dash"))
    fig.update_layout(
        height=height,
        margin={"l": 50, "r": 20, "t": 50, "b": 50},
        xaxis={"title": "Gaussian noise σ added to the logits of both paths"},
        yaxis={"title": "ROC-AUC of RePCS (−Z)", "range": [0, 1.02]},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0.0},
    )
    return fig


def robustness_frame(table: Sequence[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "σ": r["sigma"],
                "AUC": r["auc"],
                "95% CI low": r["auc_ci"][0],
                "95% CI high": r["auc_ci"][1],
                "rows": r["n"],
                "paper AUC (Table IV)": r.get("paper_auc"),
            }
            for r in table
        ]
    )


def conflict_counts(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """How often each path's answer repeats the context's claim, the well-known fact, both or neither."""
    rows = []
    for key, title in (
        ("follows", "retrieval answer (with context)"),
        ("parametric_follows", "parametric answer (no context)"),
    ):
        values = [r.get(key) for r in records if r.get(key)]
        if values:
            rows.append({"answer": title, **{f: values.count(f) for f in FOLLOWS_ORDER}, "rows": len(values)})
    return pd.DataFrame(rows)


def conflict_score_figure(records: Sequence[dict[str, Any]], name: str, label: str, *, height: int = 320) -> go.Figure:
    """One detector's raw score per conflict row, grouped by which source the retrieval answer follows."""
    fig = go.Figure()
    for i, group in enumerate(FOLLOWS_ORDER):
        rows = [r for r in records if r.get("follows") == group and r.get("scores", {}).get(name) is not None]
        if not rows:
            continue
        fig.add_trace(
            go.Box(
                y=[r["scores"][name] for r in rows],
                name=f"follows {group}",
                boxpoints="all",
                jitter=0.4,
                pointpos=0,
                marker={"color": _color(i)},
                line={"color": _color(i)},
                customdata=[escape_label(str(r.get("query", ""))[:80]) for r in rows],
                hovertemplate="%{customdata}<br>score %{y:.3f}<extra></extra>",
            )
        )
    fig.update_layout(
        height=height,
        showlegend=False,
        margin={"l": 50, "r": 20, "t": 30, "b": 40},
        yaxis={"title": escape_label(label)},
    )
    return fig
