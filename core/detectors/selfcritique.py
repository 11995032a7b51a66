"""The Self-Critique detector (parametric path; Self-Critique §4.1)."""

from __future__ import annotations

import math

from core.detectors import keys
from core.detectors.registry import MEMORIZED_HIGH, PARAMETRIC_KNOWLEDGE, Details, DetectorInput, declare
from core.engine import DualPathSettings
from core.engine.cost_meter import Work
from core.engine.estimate import estimate_seconds
from core.methods.selfcritique import DETECTOR_NAME, SelfCritiqueSettings, run_self_critique
from core.methods.work import selfcritique_planned
from core.model.handle import ModelHandle


def settings_for(inp: DetectorInput) -> SelfCritiqueSettings:
    """The row's Self-Critique settings: the caller's (``keys.SELFCRITIQUE_SETTINGS``), else the defaults (the
    parametric path) with the run's answer length and template."""
    return inp.cache.get(keys.SELFCRITIQUE_SETTINGS) or SelfCritiqueSettings(
        max_new_tokens=int(inp.settings.max_new_tokens), template=inp.settings.template
    )


def score(inp: DetectorInput) -> float:
    """The length-penalized cosine of the two answers' entropy sequences (higher ⇒ contaminated)."""
    settings = settings_for(inp)
    result = run_self_critique(inp.handle, inp.result.query, inp.result.context, settings)
    inp.cache[keys.SELFCRITIQUE_DETAILS] = result.summary()
    value = result.score()
    return value if math.isfinite(value) else 0.0


def estimate(handle: ModelHandle, settings: DualPathSettings) -> float | None:
    """Self-Critique decodes r₁ (``max_new_tokens``) then r₂ (twice as long): two prompts, three answers' tokens."""
    return estimate_seconds(handle, generated_tokens=3 * int(settings.max_new_tokens), forwards=2)


def work(inp: DetectorInput) -> Work:
    """Its units of work on the row (:func:`core.methods.work.selfcritique_planned`): r₁ is the run's own answer on
    the same path (greedy, the same prompt), r₂ its kind's share of the critique budget."""
    settings = settings_for(inp)
    path = inp.result.retrieval if settings.use_context else inp.result.parametric
    steps = len(getattr(path, "token_ids", ()) or ()) or None
    return selfcritique_planned(inp.handle, inp.result.query, inp.result.context, settings, steps)


DETAILS = Details(
    keys.SELFCRITIQUE_DETAILS,
    {
        "score": "the length-penalized cosine of the two entropy sequences",
        "top_k": "K of the top-K entropy (null: the full vocabulary)",
        "use_context": "whether the answers were given with the context",
        "first_answer": "r₁, the greedy answer",
        "critique_answer": "r₂, the answer asked to differ from r₁",
        "n_first": "tokens of r₁",
        "n_critique": "tokens of r₂",
        "length_ratio": "min / max of the two lengths",
        "entropy_first": "per-token entropy of r₁ (nats)",
        "entropy_critique": "per-token entropy of r₂ (nats)",
    },
)

declare(
    {
        "name": DETECTOR_NAME,
        "label": "Self-Critique entropy similarity (parametric path)",
        "higher_means": MEMORIZED_HIGH,
        "score": score,
        "cost": "generate",
        "group": PARAMETRIC_KNOWLEDGE,
        "source": "Self-Critique §4.1 (greedy r₁, critique r₂, length-penalized cosine of top-50 entropies)",
        "short": "Self-Critique",
        "estimate": estimate,
        "work": work,
        "details": DETAILS,
        "page": "Self-Critique",
    }
)
