"""Figures and tables of the Audit log page (pure plotly / pandas: no Streamlit, no model).

The records come from :class:`core.audit.store.AuditReader`; a record's trajectory is drawn with the Layer
trajectories page's own figure (:func:`components.trajectory_figures.lts_figure`) against the band of the
calibration the record was scored with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from components.figures import line_trace, note, set_layout, top_legend
from components.layer_axes import FLAG_COLOR, row_label
from components.trajectory_figures import lts_figure

HISTORY_COLUMNS = {
    "seq": "#",
    "created_at": "time (UTC)",
    "anomaly_flag": "flagged",
    "anomaly_score": "anomaly score",
    "latency_ms": "latency (ms)",
    "batch_id": "batch",
    "request_id": "request id",
    "id": "record id",
}


def bucket_for(span_seconds: float) -> tuple[str, str]:
    """A pandas resampling rule and its words for a time span: minutes up to 2 h, hours up to 2 days, else days."""
    if span_seconds <= 2 * 3600:
        return "1min", "per minute"
    if span_seconds <= 2 * 86400:
        return "1h", "per hour"
    return "1D", "per day"


def rate_frame(timeline: Sequence[tuple[float, bool, float]]) -> tuple[pd.DataFrame, str]:
    """Audits and anomalies per time bucket: columns ``time``, ``audits``, ``anomalies``, ``rate`` (NaN when empty).

    Args:
        timeline: ``(unix time, anomaly_flag, anomaly_score)`` per record.

    Returns:
        The frame and the bucket's words (``"per minute"`` …).
    """
    if not timeline:
        return pd.DataFrame(columns=["time", "audits", "anomalies", "rate"]), "per minute"
    frame = pd.DataFrame(timeline, columns=["ts", "flag", "score"])
    frame["time"] = pd.to_datetime(frame["ts"], unit="s", utc=True)
    rule, words = bucket_for(float(frame["ts"].max() - frame["ts"].min()))
    grouped = frame.set_index("time").resample(rule)
    out = pd.DataFrame({"audits": grouped["flag"].count(), "anomalies": grouped["flag"].sum()}).reset_index()
    out["anomalies"] = out["anomalies"].astype(int)
    out["rate"] = np.where(out["audits"] > 0, out["anomalies"] / out["audits"].where(out["audits"] > 0, 1), np.nan)
    return out, words


def rate_figure(timeline: Sequence[tuple[float, bool, float]], *, height: int = 360) -> go.Figure:
    """Bars: audits per bucket; line: the share of them flagged (right axis, 0–1)."""
    frame, words = rate_frame(timeline)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    if frame.empty:
        return set_layout(note(fig, "No audits yet"), height=height, top=40, bottom=40)
    fig.add_trace(
        go.Bar(x=frame["time"], y=frame["audits"], name=f"audits {words}", marker_color="rgba(47, 93, 138, 0.35)"),
        secondary_y=False,
    )
    rate = line_trace(
        frame["time"], frame["rate"], f"anomaly rate {words}", FLAG_COLOR, None, line_width=2, connectgaps=False
    )
    fig.add_trace(rate, secondary_y=True)
    fig.update_yaxes(title_text="audits", secondary_y=False)
    fig.update_yaxes(title_text="anomaly rate", range=[0, 1.05], tickformat=".0%", secondary_y=True)
    return set_layout(fig, height=height, top=40, bottom=40, legend=top_legend())


def history_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The history table: one row per record summary, newest first, in the columns of :data:`HISTORY_COLUMNS`."""
    frame = pd.DataFrame(list(records), columns=list(HISTORY_COLUMNS))
    frame["batch_id"] = frame["batch_id"].map(lambda b: b[:8] if isinstance(b, str) else "")
    frame["request_id"] = frame["request_id"].fillna("")
    return frame.rename(columns=HISTORY_COLUMNS)


def record_label(summary: dict[str, Any]) -> str:
    """``#12 · 2025-01-31T12:34:56.789Z · flagged (score 2.31)`` for a record picker."""
    flag = "flagged" if summary.get("anomaly_flag") else "not flagged"
    return f"#{summary['seq']} · {summary['created_at']} · {flag} (score {float(summary['anomaly_score']):.2f})"


def record_trajectory_figure(record: dict[str, Any], calibration: dict[str, Any] | None) -> go.Figure:
    """A stored record's LTS trajectory drawn like the Layer trajectories page: the calibration's μ ± 2σ band,
    its flagged layers and the calibration's kept layers. Without the calibration's description (a database
    written before it was kept) the band is flat at 0."""
    result = record.get("result") or {}
    lts = np.asarray(result.get("lts_trajectory") or [], dtype=np.float64)
    if lts.size == 0:
        return set_layout(note(go.Figure(), "This record has no trajectory"), height=300, top=40, bottom=40)
    mu = np.asarray((calibration or {}).get("mu") or np.zeros_like(lts), dtype=np.float64)
    sigma = np.asarray((calibration or {}).get("sigma") or np.zeros_like(lts), dtype=np.float64)
    if mu.shape != lts.shape or sigma.shape != lts.shape:
        mu, sigma = np.zeros_like(lts), np.zeros_like(lts)
    return lts_figure(
        lts,
        mu,
        sigma,
        kept=(calibration or {}).get("kept_layers") or [],
        flagged=result.get("flagged_layers") or [],
        title=f"LTS along PC1 — record #{record.get('seq', '?')}",
    )


def record_facts(record: dict[str, Any]) -> pd.DataFrame:
    """Two columns (``field``, ``value``) of a record's result, model, calibration and chain entries."""
    result = record.get("result") or {}
    first = result.get("first_token") or {}
    chain = record.get("chain") or {}
    flagged = result.get("flagged_layers") or []
    rows = [
        ("anomaly flag", "yes" if result.get("anomaly_flag") else "no"),
        ("anomaly score", f"{float(result.get('anomaly_score', float('nan'))):.4f}"),
        ("flagged layers (outside μ ± 2σ)", ", ".join(row_label(int(r)) for r in flagged) or "none"),
        ("first-token KL (nats)", f"{float(first.get('kl', float('nan'))):.4f}"),
        (
            "first token: with / without context",
            f"{first.get('top_retrieval', '')!r} / {first.get('top_parametric', '')!r}",
        ),
        ("latency (ms)", f"{float(result.get('latency_ms', float('nan'))):.1f}"),
        ("batch size", str(result.get("batch_size", 1))),
        ("model", str((record.get("model") or {}).get("name", ""))),
        ("calibration", str((record.get("calibration") or {}).get("id", ""))),
        ("request id", str(record.get("request_id") or "")),
        ("record id", str(record.get("id", ""))),
        ("hash", str(chain.get("hash", ""))),
        ("previous hash", str(chain.get("prev_hash", ""))),
    ]
    return pd.DataFrame(rows, columns=["field", "value"])
