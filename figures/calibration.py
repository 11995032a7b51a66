"""Figures and tables of the Evaluate page's calibration tab: Z against the constant τ, the error rates per
answer length, and Z against L with the length-aware τ(L) (plotly / pandas only: no Streamlit, no model; the
rates come from :mod:`core.evaluation.length_rates`, τ(L) from :class:`core.engine.threshold.LengthTau`).

Row labels and names here are the app's own words; the colors are :data:`figures.evaluate.PALETTE`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from figures.base import top_legend
from figures.evaluate import PALETTE, or_dash


def calibration_figure(
    z: Sequence[float], labels: Sequence[str], calibration: Sequence[bool], tau: float, *, height: int = 340
) -> go.Figure:
    """Z of every row as a strip per group (calibration clean / held-out clean / memorized) and the τ line."""
    zz = np.asarray(z, dtype=np.float64)
    lab = np.asarray(labels)
    cal = np.asarray(calibration, dtype=bool)
    groups = (
        ("calibration (grounded)", (lab == "grounded") & cal, PALETTE[0]),
        ("held-out grounded", (lab == "grounded") & ~cal, PALETTE[5]),
        ("memorized (held out)", lab == "memorized", PALETTE[1]),
    )
    fig = go.Figure()
    for name, mask, color in groups:
        if mask.any():
            fig.add_trace(
                go.Box(
                    x=zz[mask],
                    name=name,
                    boxpoints="all",
                    jitter=0.4,
                    pointpos=0,
                    marker={"color": color},
                    line={"color": color},
                    fillcolor="rgba(0,0,0,0)",
                    orientation="h",
                    hovertemplate="Z = %{x:.3f} nats<extra></extra>",
                )
            )
    fig.add_vline(
        x=tau, line={"color": "#c0392b", "dash": "dash"}, annotation_text=f"τ = {tau:.3f}", annotation_position="top"
    )
    fig.update_layout(
        height=height,
        showlegend=False,
        margin={"l": 20, "r": 20, "t": 40, "b": 50},
        xaxis={"title": "Z = Σ KL over the first T answer tokens (nats); memorized if Z < τ"},
    )
    return fig


CALIBRATION_NAMES = {"paper": "constant τ (RePCS, paper)", "length": "length-aware τ(L)"}


def length_rates_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """:func:`core.evaluation.length_rates.rates_by_length` as a table: one row per calibration and length bucket
    with rows (FPR / FNR with their Wilson 95% CIs, the inconclusive shares, the τ applied)."""

    def rate(value: float | None, ci: list[float] | None) -> str:
        if value is None:
            return "–"
        return f"{value:.0%}" + ("" if not ci else f" [{ci[0]:.0%}, {ci[1]:.0%}]")

    out = []
    for r in rows:
        if not r["n_grounded"] and not r["n_memorized"]:
            continue
        length = r["calibration"] == "length"
        out.append(
            {
                "τ": CALIBRATION_NAMES.get(r["calibration"], r["calibration"]),
                "scored tokens L": r["bucket"],
                "grounded rows": r["n_grounded"],
                "FPR [95% CI]": rate(r["fpr"], r["fpr_ci"]),
                "memorized rows": r["n_memorized"],
                "FNR [95% CI]": rate(r["fnr"], r["fnr_ci"]),
                "inconclusive (grounded / memorized)": (
                    f"{or_dash(r['inconclusive_grounded'], '.0%')} / {or_dash(r['inconclusive_memorized'], '.0%')}"
                    if length
                    else "–"
                ),
                "τ applied (nats)": (
                    "–"
                    if r["tau_low"] is None
                    else f"{r['tau_low']:.2f}"
                    + ("" if abs(r["tau_high"] - r["tau_low"]) < 5e-3 else f" – {r['tau_high']:.2f}")
                ),
            }
        )
    return pd.DataFrame(out)


def length_rates_figure(rows: Sequence[dict[str, Any]], alpha: float, *, height: int = 360) -> go.Figure:
    """FPR (left) and FNR (right) per bucket of scored answer length, one bar per calibration, Wilson 95% CIs
    as error bars, and the target α as a dashed line on the FPR side."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("FPR: grounded rows flagged", "FNR: memorized rows missed"))
    for i, name in enumerate(("paper", "length")):
        mine = [r for r in rows if r["calibration"] == name and r["bucket"] != "all"]
        if not mine:
            continue
        label = CALIBRATION_NAMES[name]
        for col, (key, n_key) in enumerate((("fpr", "n_grounded"), ("fnr", "n_memorized")), start=1):
            kept = [r for r in mine if r[key] is not None]
            if not kept:
                continue
            fig.add_trace(
                go.Bar(
                    x=[r["bucket"] for r in kept],
                    y=[r[key] for r in kept],
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": [r[f"{key}_ci"][1] - r[key] for r in kept],
                        "arrayminus": [r[key] - r[f"{key}_ci"][0] for r in kept],
                    },
                    name=label,
                    legendgroup=name,
                    showlegend=col == 1,
                    marker={"color": PALETTE[i]},
                    customdata=[r[n_key] for r in kept],
                    hovertemplate=f"L %{{x}}: %{{y:.1%}} of %{{customdata}} rows<extra>{label}</extra>",
                ),
                row=1,
                col=col,
            )
    fig.add_hline(y=alpha, line={"color": "#c0392b", "dash": "dash"}, row=1, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1])
    fig.update_xaxes(title_text="scored answer tokens L")
    # the legend goes below the x-axis titles (a horizontal legend's default spot is over them)
    fig.update_layout(
        height=height + 40,
        barmode="group",
        margin={"l": 20, "r": 20, "t": 50, "b": 100},
        legend={"orientation": "h", "yanchor": "top", "y": -0.3, "x": 0},
    )
    return fig


def _tau_curves(fig: go.Figure, length_tau: Any, lo: float, hi: float) -> None:
    """τ(L) with its bootstrap band over the calibration's lengths [L_min, L_max], and dotted beyond them out to
    the rows' lengths [``lo``, ``hi``] (extrapolated: rows there are inconclusive)."""
    inside = np.geomspace(length_tau.L_min, length_tau.L_max, 60)
    bands = np.array([length_tau.band(x) for x in inside])
    fig.add_trace(
        go.Scatter(
            x=np.concatenate([inside, inside[::-1]]),
            y=np.concatenate([bands[:, 1], bands[::-1, 0]]),
            fill="toself",
            fillcolor="rgba(192,57,43,0.15)",
            line={"width": 0},
            name=f"{length_tau.band_level:.0%} band: inconclusive",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=inside,
            y=[length_tau.tau(x) for x in inside],
            mode="lines",
            line={"color": "#c0392b"},
            name="τ(L)",
            hovertemplate="τ(%{x:.0f}) = %{y:.3f} nats<extra></extra>",
        )
    )
    first = min(lo, length_tau.L_min)
    for a, b in ((first, length_tau.L_min), (length_tau.L_max, max(hi, length_tau.L_max))):
        if b > a:
            xs = np.geomspace(a, b, 20)
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[length_tau.tau(x) for x in xs],
                    mode="lines",
                    line={"color": "#c0392b", "dash": "dot"},
                    name="τ(L) extrapolated: inconclusive",
                    showlegend=a == first,
                    hoverinfo="skip",
                )
            )


def length_tau_figure(
    z: Sequence[float],
    n_scored: Sequence[int],
    labels: Sequence[str],
    length_tau: Any,
    tau: float,
    *,
    height: int = 380,
) -> go.Figure:
    """Z against L for every row (by label), the constant τ, and τ(L) with its band over the calibration's
    lengths (dotted where extrapolated: those rows are inconclusive). Log-scaled axes: τ(L) is a power law.

    Args:
        length_tau: a :class:`core.engine.threshold.LengthTau` or ``None`` (then only the constant τ is drawn).
    """
    zz = np.maximum(np.asarray(z, dtype=np.float64), 1e-3)
    nn = np.asarray(n_scored, dtype=np.float64)
    lab = np.asarray(labels)
    fig = go.Figure()
    for name, color in (("grounded", PALETTE[5]), ("memorized", PALETTE[1])):
        mask = lab == name
        if mask.any():
            fig.add_trace(
                go.Scatter(
                    x=nn[mask],
                    y=zz[mask],
                    mode="markers",
                    name=name,
                    marker={"color": color, "size": 6, "opacity": 0.7},
                    hovertemplate="L = %{x}, Z = %{y:.3f} nats<extra>" + name + "</extra>",
                )
            )
    lo = max(1.0, float(nn.min()) if nn.size else 1.0)
    hi = max(lo + 1.0, float(nn.max()) if nn.size else 64.0)
    fig.add_hline(y=tau, line={"color": "#7f7f7f", "dash": "dash"}, annotation_text=f"constant τ = {tau:.2f}")
    if length_tau is not None:
        _tau_curves(fig, length_tau, lo, hi)
    fig.update_layout(
        height=height,
        margin={"l": 20, "r": 20, "t": 60, "b": 50},
        xaxis={"title": "scored answer tokens L = min(T, answer length)", "type": "log"},
        yaxis={"title": "Z (nats)", "type": "log"},
        legend=top_legend(),  # above the plot: a horizontal legend's default spot is over the x-axis title
    )
    return fig
