"""RePCS-family detectors computed from the DualPathResult alone (no extra model call).

All three summarize the per-token KL over the score window, so all are free and higher = grounded (the
context moved the answer's distribution more).
"""

from __future__ import annotations

import numpy as np

from core.detectors.registry import GROUNDED_HIGH, Detector, DetectorInput, register


def _window(inp: DetectorInput) -> np.ndarray:
    return np.asarray(inp.result.token_kl[: inp.result.score_window], dtype=np.float64)


def _z(inp: DetectorInput) -> float:
    return float(inp.result.repcs_score)


def _mean_kl(inp: DetectorInput) -> float:
    return float(_window(inp).mean())


def _max_kl(inp: DetectorInput) -> float:
    return float(_window(inp).max())


# name, label, score, source
_SPECS = (
    ("repcs", "RePCS Z (sum of KL, nats)", _z, "RePCS eq. 2"),
    ("repcs_mean", "RePCS mean KL per token (nats)", _mean_kl, "RePCS eq. 2 / length; CRM level 2 KL-mean"),
    (
        "max_token_kl",
        "Max per-token KL (PECoRe-style, nats)",
        _max_kl,
        "CRM level 2 KL-max; PECoRe-style context sensitivity",
    ),
)
for _name, _label, _score, _source in _SPECS:
    register(Detector(name=_name, label=_label, higher_means=GROUNDED_HIGH, score=_score, source=_source))
