"""Figures and tables of the Audit log page (pure plotly / pandas: no Streamlit, no model).

The records come from :class:`core.audit.store.AuditReader`; a record's trajectory is drawn with the Layer
trajectories page's own figure (:func:`figures.trajectory.lts_figure`) against the band of the
calibration the record was scored with.

A stored record may have been edited by hand (``audit verify`` then names it): every builder here takes what it
finds — a field of the wrong type is shown as missing or as its text, never raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from figures.base import line_trace, note, set_layout, top_legend
from figures.layer_axes import FLAG_COLOR, row_label
from figures.trajectory import lts_figure

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


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a dict, else ``{}`` (a stored field edited into another type)."""
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float:
    """A stored number as a float; NaN for anything else (text, null, a list …)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return float("nan")
    return float(value)


def _layers(value: Any) -> list[int]:
    """A stored list of layer rows; the integers in it (nothing when it is not a list)."""
    if not isinstance(value, list):
        return []
    return [int(v) for v in value if isinstance(v, int) and not isinstance(v, bool)]


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
    score = _number(summary.get("anomaly_score"))
    return f"#{summary.get('seq')} · {summary.get('created_at')} · {flag} (score {score:.2f})"


def record_trajectory_figure(record: dict[str, Any], calibration: dict[str, Any] | None) -> go.Figure:
    """A stored record's LTS trajectory drawn like the Layer trajectories page: the calibration's μ ± 2σ band,
    its flagged layers and the calibration's kept layers. Without the calibration's description (a database
    written before it was kept) the band is flat at 0."""
    result = as_dict(record.get("result"))
    lts = _vector(result.get("lts_trajectory"))
    if lts is None or lts.size == 0:
        return set_layout(note(go.Figure(), "This record has no trajectory"), height=300, top=40, bottom=40)
    calibration = as_dict(calibration)
    mu, sigma = _vector(calibration.get("mu")), _vector(calibration.get("sigma"))
    if mu is None or sigma is None or mu.shape != lts.shape or sigma.shape != lts.shape:
        mu, sigma = np.zeros_like(lts), np.zeros_like(lts)
    n = lts.size
    return lts_figure(
        lts,
        mu,
        sigma,
        kept=[i for i in _layers(calibration.get("kept_layers")) if 0 <= i < n],
        flagged=[i for i in _layers(result.get("flagged_layers")) if 0 <= i < n],
        title=f"LTS along PC1 — record #{record.get('seq', '?')}",
    )


def _vector(value: Any) -> np.ndarray | None:
    """A stored list of numbers as a float64 vector; ``None`` when it is not one."""
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return None
    return np.asarray(value, dtype=np.float64)


def record_facts(record: dict[str, Any]) -> pd.DataFrame:
    """Two columns (``field``, ``value``) of a record's result, model, calibration and chain entries."""
    result = as_dict(record.get("result"))
    first = as_dict(result.get("first_token"))
    chain = as_dict(record.get("chain"))
    flagged = _layers(result.get("flagged_layers"))
    rows = [
        ("anomaly flag", "yes" if result.get("anomaly_flag") else "no"),
        ("anomaly score", f"{_number(result.get('anomaly_score')):.4f}"),
        ("flagged layers (outside μ ± 2σ)", ", ".join(row_label(r) for r in flagged) or "none"),
        ("first-token KL (nats)", f"{_number(first.get('kl')):.4f}"),
        (
            "first token: with / without context",
            f"{first.get('top_retrieval', '')!r} / {first.get('top_parametric', '')!r}",
        ),
        ("latency (ms)", f"{_number(result.get('latency_ms')):.1f}"),
        ("batch size", str(result.get("batch_size", 1))),
        ("model", str(as_dict(record.get("model")).get("name", ""))),
        ("calibration", str(as_dict(record.get("calibration")).get("id", ""))),
        ("request id", str(record.get("request_id") or "")),
        ("record id", str(record.get("id", ""))),
        ("hash", str(chain.get("hash", ""))),
        ("previous hash", str(chain.get("prev_hash", ""))),
    ]
    return pd.DataFrame(rows, columns=["field", "value"])
