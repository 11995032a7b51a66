"""One scored row as a calibration stores it (:class:`RowRecord`, a line of ``scored.jsonl``), what the fits made
of the rows (:class:`Fitted`) and the model they are made for (:class:`ModelIdentity`).

A row's label is its behavior (:func:`core.evaluation.headline_fit.behavior_of`: the text for conflict, on-topic and
invented rows, the swap test where context and memory agree): *read* is the clean / grounded class, *recalled* the
memorized one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.engine.axes_calibration import AxesCalibration
from core.engine.result import DualPathResult
from core.engine.swap import SwapTest
from core.engine.threshold import Threshold
from core.engine.verdict import READ, RECALLED
from core.evaluation.constructions import ValidationRow
from core.evaluation.headline_fit import Scored, behavior_of
from core.methods.lookback import LookbackModel
from core.methods.redeep import CalibrationTable, ReDeEPChoice

LIVE_EXCLUDED = ("lookback", "combined", "redeep", "redeep_ecs", "redeep_pks")
"""Cheap detectors not scored while the rows are scored: their artifacts are fitted from these rows (their scores
on the rows come from the stored features and the fitted artifacts, :func:`derived_scores`)."""
LATE_FEATURES = ("redeep_ecs", "redeep_pks", "lookback")
"""The combined detector's features that depend on an artifact fitted here (filled in by :func:`fit_all`)."""
LABEL_Y = {READ: 0, RECALLED: 1}


@dataclass
class RowRecord:
    """One scored row as ``calibrate-model`` stores it (one JSON line of ``scored.jsonl``).

    Attributes:
        key: the row's identity (:func:`core.evaluation.headline_fit.row_key`).
        row: the validation row; result: its run at the app's default settings (parametric answer generated).
        scores: every live-scored detector's raw score (``None`` where it failed; ``errors`` says why).
        lookback: the Lookback Lens' ``(L · H,)`` per-head mean ratios (``None``: a one-token answer).
        ecs, pks: ReDeEP's mean ECS ``(L, H)`` and mean PKS ``(L,)`` over the answer (``None`` where refused).
        combined: the combined detector's features computable before any fit (name → value, ``None`` missing).
        swap: the swap test (rows whose context agrees with memory), ``None`` when not run.
        crm_displacement: CRM's per-layer displacement ``(L + 1, d)`` of a row scored before the model's CRM basis
            existed: its CRM scores are read from it once the basis is computed (``None``: scored with the basis).
    """

    key: str
    row: ValidationRow
    result: DualPathResult
    scores: dict[str, float | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    lookback: list[float] | None = None
    ecs: list[list[float]] | None = None
    pks: list[float] | None = None
    combined: dict[str, float | None] = field(default_factory=dict)
    swap: SwapTest | None = None
    crm_displacement: list[list[float]] | None = None

    @property
    def scored(self) -> Scored:
        return Scored(self.row, self.result, self.swap)

    @property
    def label(self) -> str | None:
        """``read`` / ``recalled`` by behavior, else ``None`` (not decided)."""
        label = behavior_of(self.scored)
        return label if label in LABEL_Y else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "row": self.row.to_dict(),
            "result": self.result.to_dict(),
            "scores": self.scores,
            "errors": self.errors,
            "lookback": self.lookback,
            "ecs": self.ecs,
            "pks": self.pks,
            "combined": self.combined,
            **({} if self.crm_displacement is None else {"crm_displacement": self.crm_displacement}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], swap: SwapTest | None = None) -> RowRecord:
        return cls(
            key=str(data["key"]),
            row=ValidationRow.from_dict(data["row"]),
            result=DualPathResult.from_dict(data["result"]),
            scores=dict(data.get("scores") or {}),
            errors=dict(data.get("errors") or {}),
            lookback=data.get("lookback"),
            ecs=data.get("ecs"),
            pks=data.get("pks"),
            combined=dict(data.get("combined") or {}),
            crm_displacement=data.get("crm_displacement"),
            swap=swap,
        )


@dataclass
class Fitted:
    """What :func:`fit_all` fitted (``None`` where a fit was refused: ``notes`` says why)."""

    tau: Threshold | None = None
    axes: AxesCalibration | None = None
    redeep: ReDeEPChoice | None = None
    redeep_table: CalibrationTable | None = None
    lookback: LookbackModel | None = None
    combined: Any = None
    detectors: dict[str, Any] | None = None
    notes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelIdentity:
    """The model the artifacts are fitted for: its name, cache key, resolved template, layout and settings."""

    name: str
    slug: str
    template: str
    n_layers: int
    n_heads: int
    settings: dict[str, Any]
    trained_on: list[dict[str, Any]] = field(default_factory=list)


def labeled(records: Sequence[RowRecord], split: str) -> list[RowRecord]:
    """The records of ``split`` whose behavior is decided (read / recalled)."""
    return [r for r in records if r.row.split == split and r.label is not None]


def label_array(records: Sequence[RowRecord]) -> np.ndarray:
    return np.array([LABEL_Y[r.label] for r in records if r.label is not None], dtype=int)  # type: ignore[index]


def scored_len(r: RowRecord) -> int:
    return int(min(r.result.score_window, r.result.n_tokens))
