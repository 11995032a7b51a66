"""RePCS-family detectors computed from the DualPathResult alone (no extra model call)."""

from __future__ import annotations

import numpy as np

from core.detectors.registry import GROUNDED_HIGH, Detector, DetectorInput, register


def _window(inp: DetectorInput) -> np.ndarray:
    return np.asarray(inp.result.token_kl[: inp.result.score_window], dtype=np.float64)


register(
    Detector(
        name="repcs",
        label="RePCS Z (sum of KL, nats)",
        higher_means=GROUNDED_HIGH,
        score=lambda inp: float(inp.result.repcs_score),
        source="RePCS eq. 2",
    )
)
register(
    Detector(
        name="repcs_mean",
        label="RePCS mean KL per token (nats)",
        higher_means=GROUNDED_HIGH,
        score=lambda inp: float(_window(inp).mean()),
        source="RePCS eq. 2 / length; CRM level 2 KL-mean",
    )
)
register(
    Detector(
        name="max_token_kl",
        label="Max per-token KL (PECoRe-style, nats)",
        higher_means=GROUNDED_HIGH,
        score=lambda inp: float(_window(inp).max()),
        source="CRM level 2 KL-max; PECoRe-style context sensitivity",
    )
)
