"""The Self-Critique detector (parametric path; Self-Critique §4.1)."""

from __future__ import annotations

import math

from core.detectors import keys
from core.detectors.registry import MEMORIZED_HIGH, PARAMETRIC_KNOWLEDGE, DetectorInput, declare
from core.methods.selfcritique import DETECTOR_NAME, SelfCritiqueSettings, run_self_critique


def score(inp: DetectorInput) -> float:
    """The length-penalized cosine of the two answers' entropy sequences (higher ⇒ contaminated)."""
    settings = inp.cache.get(keys.SELFCRITIQUE_SETTINGS) or SelfCritiqueSettings(
        max_new_tokens=int(inp.settings.max_new_tokens), template=inp.settings.template
    )
    result = run_self_critique(inp.handle, inp.result.query, inp.result.context, settings)
    inp.cache[keys.SELFCRITIQUE_DETAILS] = result.summary()
    value = result.score()
    return value if math.isfinite(value) else 0.0


declare(
    {
        "name": DETECTOR_NAME,
        "label": "Self-Critique entropy similarity (parametric path)",
        "higher_means": MEMORIZED_HIGH,
        "score": score,
        "cost": "generate",
        "group": PARAMETRIC_KNOWLEDGE,
        "source": "Self-Critique §4.1 (greedy r₁, critique r₂, length-penalized cosine of top-50 entropies)",
    }
)
