"""Shared fixtures of the engine's tests."""

from __future__ import annotations

from core.engine.axes_calibration import AxesCalibration

# P(read) = σ(span LLR): ≥ 0.6 needed (LLR > 0.405 nats), ≤ 0.4 not needed (LLR < −0.405); κ = 1 nat;
# support cut −3 nats, band [−4, −2].
CAL = AxesCalibration(
    model="m",
    mean=(0.0, 0.0),
    scale=(1.0, 1.0),
    coef=(1.0, 0.0),
    intercept=0.0,
    reliance_threshold=0.5,
    reliance_band=(0.4, 0.6),
    support_threshold=-3.0,
    support_band=(-4.0, -2.0),
    span_level=1.0,
    source="test",
)
"""A hand-made axes calibration whose probabilities the tests work out by hand."""
