"""RePCS-family detectors computed from the DualPathResult alone (no extra model call).

All three summarize the per-token KL over the score window, so all are free and higher = grounded (the
context moved the answer's distribution more). ``repcs`` is the run's own Z: its threshold is the τ in force for
the run and its verdict the run's (with τ(L)'s inconclusive band), read again when the τ changes
(``follows_run``).
"""

from __future__ import annotations

import numpy as np

from core.detectors.registry import GROUNDED_HIGH, Detector, DetectorInput, DetectorThreshold, declare
from core.engine.verdict import UNCALIBRATED, normalize_verdict

PAGE = "Dual Path"


def _window(inp: DetectorInput) -> np.ndarray:
    return np.asarray(inp.result.token_kl[: inp.result.score_window], dtype=np.float64)


def _z(inp: DetectorInput) -> float:
    return float(inp.result.repcs_score)


def _mean_kl(inp: DetectorInput) -> float:
    return float(_window(inp).mean())


def _max_kl(inp: DetectorInput) -> float:
    return float(_window(inp).max())


def run_tau(detector: Detector, inp: DetectorInput) -> DetectorThreshold:
    """RePCS' threshold: the τ in force for the run (the result's ``threshold`` and ``threshold_source``: a τ chosen
    in this session, the bundled calibration, or its labeled fallback)."""
    return DetectorThreshold(inp.result.threshold, inp.result.threshold_source or "no threshold available")


def run_verdict(
    detector: Detector, inp: DetectorInput, score: float | None, threshold: DetectorThreshold
) -> tuple[str, DetectorThreshold]:
    """RePCS' verdict as the run says it: the engine's RePCS verdict (``repcs_verdict``) under the τ in force (with its
    inconclusive band)."""
    return (normalize_verdict(inp.result.repcs_verdict) if score is not None else UNCALIBRATED), threshold


declare(
    {
        "name": "repcs",
        "label": "RePCS Z (sum of KL, nats)",
        "score": _z,
        "source": "RePCS eq. 2",
        "short": "RePCS",
        "thresholds": (run_tau,),
        "reading": run_verdict,
        "follows_run": True,
    },
    {
        "name": "repcs_mean",
        "label": "RePCS mean KL per token (nats)",
        "score": _mean_kl,
        "source": "RePCS eq. 2 / length; CRM level 2 KL-mean",
        "short": "mean KL",
    },
    {
        "name": "max_token_kl",
        "label": "Max per-token KL (PECoRe-style, nats)",
        "score": _max_kl,
        "source": "CRM level 2 KL-max; PECoRe-style context sensitivity",
        "short": "max KL",
    },
    higher_means=GROUNDED_HIGH,
    page=PAGE,
)
